from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sources import kinds  # noqa: F401  (registers the built-in source kinds)
        from sources.prewarm import connect_model_signals

        connect_model_signals()  # profile and session writes invalidate pre-warmed sessions

        from sources import signals

        signals.connect()  # collection writes drop the collections each process keeps
