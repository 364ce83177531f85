"""The gateway's paths, mounted under ``/v1/`` on every host (the API key selects the tenant),
where the providers' SDKs look for them."""

from django.urls import path

from contextplatform.gateway.views import (
    ChatCompletionsView,
    CountTokensView,
    MessagesView,
    ModelsView,
    ModelView,
    ResponsesView,
    StoredResponseView,
)

urlpatterns = [
    path("chat/completions", ChatCompletionsView.as_view(), name="gateway-chat-completions"),
    path("messages", MessagesView.as_view(), name="gateway-messages"),
    path("messages/count_tokens", CountTokensView.as_view(), name="gateway-count-tokens"),
    path("models", ModelsView.as_view(), name="gateway-models"),
    path("models/<str:model>", ModelView.as_view(), name="gateway-model"),
    path("responses", ResponsesView.as_view(), name="gateway-responses"),
    path("responses/<str:response_id>", StoredResponseView.as_view(), name="gateway-response"),
]
