"""The OpenAPI schema tells the truth about failures: every operation documents the error envelope
(``{"error": {"code", "message", "param"}}``) for the statuses it can answer, and the API key
authentication the whole API takes.

``document_errors`` is a drf-spectacular postprocessing hook (``SPECTACULAR_SETTINGS``); the views
declare only what they answer on success (and a 409 where it means something of their own), so
no view can forget an error status. ``ApiKeyScheme`` registers the key's two headers on import
(``contextplatform.urls_common`` imports this module before any schema is generated).

``exclusive_bounds_as_openapi30`` is a hook too: the request bodies written as pydantic models
carry JSON Schema 2020-12's numeric ``exclusiveMinimum`` / ``exclusiveMaximum`` (``Field(gt=0)``),
which the OpenAPI 3.0 document this API serves spells as ``minimum`` plus a boolean; left as they
come, clients and test generators reading 3.0 cannot take the body at all.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

ERROR_COMPONENT = "Error"
ERROR_REF = {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}

# The envelope every API error answers with (contextplatform.core.errors.envelope).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The error envelope of every API error.",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "invalid_request, context_length_exceeded, unauthorized, "
                    "forbidden, not_found, conflict, payload_too_large, rate_limited, "
                    "source_failed, upstream_error, internal_error, ...",
                },
                "message": {"type": "string"},
                "param": {
                    "type": "string",
                    "nullable": True,
                    "description": "the field the error is about, when there is one",
                },
            },
            "required": ["code", "message", "param"],
        }
    },
    "required": ["error"],
}

# Answered by any operation: a bad parameter or body, no or a bad key, a key without the scope,
# a resource (or one the body names) that does not exist, the key's rate limit, a fault.
EVERY_OPERATION = {
    "400": "invalid_request (or context_length_exceeded): a parameter or the body is not valid; "
    "`param` names the field",
    "401": "unauthorized: no API key, or one that is not valid",
    "403": "forbidden: the key lacks the operation's scope",
    "404": "not_found: the resource, or one the request names, does not exist",
    "429": "rate_limited: the key's requests per minute are used up",
    "500": "internal_error: a fault of the platform (logged)",
}
WITH_BODY = {
    "413": "payload_too_large: the body is over the size the API takes",
    "415": "unsupported_media_type: the body is not in a type the operation reads",
}
OTHER = (
    "any other error, in the same envelope (405, 406, 409, 502 upstream_error, 503 source_failed)"
)

METHODS = ("get", "put", "post", "delete", "patch")


def error_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}


def document_errors(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Add the envelope under every error status of every operation; a status a view documents
    itself keeps its description and gains the envelope's schema where it has none."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas[ERROR_COMPONENT] = ERROR_SCHEMA
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in METHODS:
                continue
            responses = operation.setdefault("responses", {})
            statuses = dict(EVERY_OPERATION)
            if "requestBody" in operation:
                statuses.update(WITH_BODY)
            for status, description in statuses.items():
                responses.setdefault(status, error_response(description))
            for status, response in responses.items():
                if status.startswith(("4", "5")) and not response.get("content"):
                    response["content"] = error_response("")["content"]
            responses.setdefault("default", error_response(OTHER))
    return result


# The 2020-12 keyword and the 3.0 bound it becomes with ``true`` beside it.
EXCLUSIVE_BOUNDS = {"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"}


def _bounds_as_openapi30(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _bounds_as_openapi30(item)
        return
    if not isinstance(node, dict):
        return
    for keyword, bound in EXCLUSIVE_BOUNDS.items():
        value = node.get(keyword)
        # A bool is already the 3.0 form (and an int to Python, so it is checked first).
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        inclusive = node.get(bound)
        # Both given (pydantic's ``gt`` with ``ge``): the tighter of the two is the bound.
        if isinstance(inclusive, int | float) and not isinstance(inclusive, bool):
            tighter = inclusive > value if keyword == "exclusiveMinimum" else inclusive < value
            if tighter:
                del node[keyword]
                continue
        node[bound] = value
        node[keyword] = True
    for child in node.values():
        _bounds_as_openapi30(child)


def exclusive_bounds_as_openapi30(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Rewrite every numeric ``exclusiveMinimum: n`` (``exclusiveMaximum``) of the document as
    OpenAPI 3.0's ``minimum: n, exclusiveMinimum: true``."""
    _bounds_as_openapi30(result)
    return result


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """The platform API key, as ``Authorization: Bearer`` (what the openai client sends) or
    ``X-Api-Key`` (what the anthropic client sends)."""

    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = ["ApiKeyBearer", "ApiKeyHeader"]

    def get_security_requirement(self, auto_schema: Any) -> list[dict[str, list[Any]]]:
        return [{"ApiKeyBearer": []}, {"ApiKeyHeader": []}]  # either one, not both

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [
            {"type": "http", "scheme": "bearer", "description": "the platform API key"},
            {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
        ]
