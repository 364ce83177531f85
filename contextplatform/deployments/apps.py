from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "contextplatform.deployments"
    label = "deployments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A deployment that configuration names is neither deleted nor renamed (usage.py); the
        # places are found by the apps above, which connect to ``usage.naming``.
        from django.db.models.signals import pre_delete, pre_save

        from contextplatform.deployments import usage
        from contextplatform.deployments.models import Deployment

        pre_delete.connect(
            usage.refuse_named_delete, sender=Deployment, dispatch_uid="deployment_in_use_delete"
        )
        pre_save.connect(
            usage.refuse_named_rename, sender=Deployment, dispatch_uid="deployment_in_use_rename"
        )

        # The deployments kept per process for calls (selectors.deployment_to_call).
        from contextplatform.core.config_cache import drop_on_change
        from contextplatform.deployments.selectors import DEPLOYMENTS

        drop_on_change(DEPLOYMENTS, Deployment)
