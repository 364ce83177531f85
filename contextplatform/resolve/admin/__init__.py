"""The route page with its Preview and draft trial, and the replay record page with its Re-run
(Django imports this package to register them)."""

from contextplatform.resolve.admin import preview, rerun  # noqa: F401  (registers the pages)
