from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import tenants.key_admin  # noqa: F401  (the tenant admin's keys page registers itself)
        from tenants import signals
        from tenants.roles import create_role_groups_after_migrate

        signals.connect()

        post_migrate.connect(
            create_role_groups_after_migrate, dispatch_uid="tenants.roles.create_role_groups"
        )
