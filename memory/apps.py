from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The memory source kind; the write task; the external indexes' listeners.
        from memory import source, writing  # noqa: F401
        from memory.stores import sync  # noqa: F401
