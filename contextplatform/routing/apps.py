from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "contextplatform.routing"
    label = "routing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Routes name deployments: the deployments app asks through its signal before a delete or
        # a rename (deployments.usage), since it cannot import routing.
        from contextplatform.deployments.usage import naming
        from contextplatform.routing.deployment_guard import places_naming

        naming.connect(places_naming, dispatch_uid="routing_places_naming_a_deployment")

        from contextplatform.routing import signals

        signals.connect()

        # The gateway's callers read errors in their provider's shape, also those the kernel's
        # middleware answers before a view runs (an oversized body) or after it failed.
        from contextplatform.core.errors import register_error_renderer
        from contextplatform.routing.gateway.protocol import api_error_renderer

        register_error_renderer("/v1/messages", api_error_renderer("anthropic"))
        register_error_renderer("/v1/", api_error_renderer("openai"))
