"""Replay records: what each resolve did, written off the request path, read by auditors."""

from django.apps import AppConfig


class ReplayConfig(AppConfig):
    name = "contextplatform.replay"
    label = "replay"
    default_auto_field = "django.db.models.BigAutoField"
