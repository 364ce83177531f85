"""The REST API under /api/v1/ (the same paths on every host; the API key picks the tenant)."""

from django.urls import path

from compression import views as compression
from contextplatform.deployments import views as deployments
from contextplatform.evals import api as evals
from contextplatform.replay import api as replay
from contextplatform.replay import source_health_api, spend_api
from contextplatform.resolve.api import compression as compression_views
from contextplatform.resolve.api import feedback, prewarm, rerun, resolve
from contextplatform.routes import api as routes
from contextplatform.routes.selectors import default_memory_extractor
from memory import views as memory
from sources import knowledge_views as knowledge
from sources import views as sources
from sources.mcp import views as mcp
from tenants import views as keys

urlpatterns = [
    path("resolve", resolve.ResolveView.as_view(), name="resolve"),
    path(
        "resolve/<str:resolve_id>/response",
        resolve.ResolveResponseView.as_view(),
        name="resolve-response",
    ),
    path(
        "resolve/<str:resolve_id>/feedback",
        feedback.FeedbackView.as_view(),
        name="resolve-feedback",
    ),
    path("plugins/context/preview", resolve.ContextPreviewView.as_view(), name="context-preview"),
    path(
        "plugins/context/compression/capabilities",
        compression.CapabilitiesView.as_view(),
        name="compression-capabilities",
    ),
    path(
        "plugins/context/compression/health",
        compression.HealthView.as_view(),
        name="compression-health",
    ),
    path(
        "plugins/context/compression/preview",
        compression_views.CompressionPreviewView.as_view(),
        name="compression-preview",
    ),
    path(
        "observability/plugins/context/compression/stats",
        compression.StatsView.as_view(),
        name="compression-stats",
    ),
    path(
        "storage/context-recovery/retrieve",
        compression.RecoveryRetrieveView.as_view(),
        name="recovery-retrieve",
    ),
    path(
        "storage/context-recovery/invalidate",
        compression.RecoveryInvalidateView.as_view(),
        name="recovery-invalidate",
    ),
    path("routes", routes.RouteListView.as_view(), name="routes"),
    path(
        "routes/import",
        routes.RouteImportView.as_view(),
        {"name": "import"},  # the other methods read and write a route named "import"
        name="routes-import",
    ),
    path("routes/<str:name>", routes.RouteDetailView.as_view(), name="route"),
    path("routes/<str:name>/export", routes.RouteExportView.as_view(), name="route-export"),
    path("routes/<str:name>/evals", evals.RouteEvalsView.as_view(), name="route-evals"),
    path("routes/<str:name>/evals/run", evals.RouteEvalsRunView.as_view(), name="route-evals-run"),
    path("eval-runs/<str:run>", evals.EvalRunView.as_view(), name="eval-run"),
    path("deployments", deployments.DeploymentListView.as_view(), name="deployments"),
    path(
        "deployments/<str:name>",
        deployments.DeploymentDetailView.as_view(),
        name="deployment",
    ),
    path("keys", keys.KeyListView.as_view(), name="keys"),
    path("keys/<str:key_id>", keys.KeyDetailView.as_view(), name="key"),
    path("keys/<str:key_id>/rotate", keys.KeyRotateView.as_view(), name="key-rotate"),
    path("mcp-servers", mcp.McpServerListView.as_view(), name="mcp-servers"),
    path("mcp-servers/<str:name>", mcp.McpServerDetailView.as_view(), name="mcp-server"),
    path("replay", replay.ReplayListView.as_view(), name="replay-list"),
    path("sources/health", source_health_api.SourceHealthView.as_view(), name="source-health"),
    path("spend", spend_api.SpendView.as_view(), name="spend"),
    path("replay/<str:record_id>", replay.ReplayDetailView.as_view(), name="replay-detail"),
    path("replay/<str:record_id>/rerun", rerun.ReplayRerunView.as_view(), name="replay-rerun"),
    path("users/<str:user>/profile", sources.UserProfileView.as_view(), name="user-profile"),
    path(
        "users/<str:user>/memories",
        memory.MemoryListView.as_view(default_extractor=default_memory_extractor),
        name="memories",
    ),
    path(
        "users/<str:user>/memories/search",
        memory.MemorySearchView.as_view(),
        name="memories-search",
    ),
    path(
        "users/<str:user>/memories/export",
        memory.MemoryExportView.as_view(),
        name="memories-export",
    ),
    path(
        "users/<str:user>/memories/import",
        memory.MemoryImportView.as_view(),
        name="memories-import",
    ),
    path(
        "users/<str:user>/memories/<int:memory_id>",
        memory.MemoryDetailView.as_view(),
        name="memory",
    ),
    path(
        "sessions/<str:session>/messages",
        sources.SessionMessagesView.as_view(),
        name="session-messages",
    ),
    path(
        "sessions/<str:session>/prewarm",
        prewarm.SessionPrewarmView.as_view(),
        name="session-prewarm",
    ),
    path("collections", knowledge.CollectionListView.as_view(), name="collections"),
    path(
        "collections/<str:name>/documents", knowledge.DocumentListView.as_view(), name="documents"
    ),
    path(
        "collections/<str:name>/documents/<str:document_id>",
        knowledge.DocumentDetailView.as_view(),
        name="document",
    ),
    path("jobs/<str:job_id>", knowledge.JobView.as_view(), name="job"),
]
