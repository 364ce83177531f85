"""Configuration as code: the route schema, layering, YAML/JSON documents and the legacy translator."""
