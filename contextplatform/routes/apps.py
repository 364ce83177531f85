"""Routes: the operators' configuration of what each call gets to see (the app label is still
``routing``, so tables, admin URLs and permissions kept their names)."""

from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "contextplatform.routes"
    label = "routing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Routes name deployments: the deployments app asks through its signal before a delete or
        # a rename (deployments.usage), since it cannot import routing.
        from contextplatform.deployments.usage import naming
        from contextplatform.routes.deployment_guard import places_naming

        naming.connect(places_naming, dispatch_uid="routing_places_naming_a_deployment")

        from contextplatform.routes import signals

        signals.connect()
