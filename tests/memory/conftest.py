"""Each test of memory starts in the public schema (the reason: ``tests/sources/conftest.py``;
the extractor's deployment name is looked up the same way)."""

from tests.sources.conftest import public_schema_first  # noqa: F401  (autouse)
