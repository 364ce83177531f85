"""The gateway: OpenAI- and Anthropic-compatible endpoints in front of the routes' models."""

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "contextplatform.gateway"
    label = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The gateway's callers read errors in their provider's shape, also those the kernel's
        # middleware answers before a view runs (an oversized body) or after it failed.
        from contextplatform.core.errors import register_error_renderer
        from contextplatform.gateway.protocol import api_error_renderer, caller_error_renderer
        from contextplatform.protocols.registry import PROTOCOLS

        # Each protocol's own path (and what lies under it) first; the rest of /v1 (the model
        # list, an unknown path) in the shape its caller's client reads.
        for protocol in PROTOCOLS.values():
            register_error_renderer(protocol.path, api_error_renderer(protocol.name))
        register_error_renderer("/v1", caller_error_renderer)
