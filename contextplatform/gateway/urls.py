"""The gateway's paths, mounted under ``/v1/`` on every host (the API key selects the tenant),
where the providers' SDKs look for them."""

from django.urls import path

from contextplatform.gateway.views import ChatCompletionsView, MessagesView, ModelsView

urlpatterns = [
    path("chat/completions", ChatCompletionsView.as_view(), name="gateway-chat-completions"),
    path("messages", MessagesView.as_view(), name="gateway-messages"),
    path("models", ModelsView.as_view(), name="gateway-models"),
]
