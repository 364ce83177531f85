"""The auditors' replay pages (Django imports this package to register them)."""

from contextplatform.replay.admin import records  # noqa: F401  (registers the pages)
