from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from tenants import signals
        from tenants.roles import create_role_groups_after_migrate

        signals.connect()

        post_migrate.connect(
            create_role_groups_after_migrate, dispatch_uid="tenants.roles.create_role_groups"
        )
