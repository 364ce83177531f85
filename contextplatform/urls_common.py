"""URLs served on every host: the API, the gateway, the API's schema, health and metrics."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from contextplatform import health
from contextplatform.core import openapi  # noqa: F401  (registers the API key's security scheme)
from contextplatform.core.metrics import metrics_view
from contextplatform.dashboard.home import home

urlpatterns = [
    # What the product is and where its pages are: the admin's "View site".
    path("", home, name="home"),
    path("api/v1/", include("contextplatform.urls_api")),
    # The OpenAI- and Anthropic-compatible gateway, where the providers' SDKs call.
    path("v1/", include("contextplatform.gateway.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # django-prometheus's metrics and ours; every worker's, merged, with PROMETHEUS_MULTIPROC_DIR.
    path("metrics", metrics_view, name="prometheus-django-metrics"),
]
