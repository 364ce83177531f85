"""The gateway's operations in the OpenAPI schema. Its views are Django async views, not DRF's,
so drf-spectacular does not see them: they are written here, loosely (the provider's own request
and answer, with the fields the gateway reads or adds), and merged into the schema by the
project's hook (``contextplatform/openapi_operations.py``). Errors come in the provider's shape,
never the REST envelope."""

from __future__ import annotations

from typing import Any

RESOLVE_ID = "x-context-resolve-id"
ERROR_CODE = "x-context-error-code"


def _header(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


CALL_HEADERS = [
    _header("x-route", "the route to resolve (else the body's `model` names it)"),
    _header("x-user-id", "the end user whose profile and memories the route reads"),
    _header("x-session-id", "the session whose recent messages the route reads and writes"),
    _header(
        "x-memory-store",
        "`true` asks for the turn to be written to the user's memories, `false` opts out",
    ),
]

RESOLVE_ID_HEADER = {
    RESOLVE_ID: {
        "description": "the resolve's id: its replay record, and "
        "`POST /api/v1/resolve/{id}/response`'s",
        "schema": {"type": "string"},
    },
    "x-context-variant": {
        "description": "the arm of the route's traffic split the call ran (`main`: the route's "
        "own context)",
        "schema": {"type": "string"},
    },
}
ERROR_CODE_HEADER = {
    ERROR_CODE: {"description": "the platform's error code", "schema": {"type": "string"}}
}

OPENAI_ERROR: dict[str, Any] = {
    "type": "object",
    "description": "OpenAI's error shape",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}
ANTHROPIC_ERROR: dict[str, Any] = {
    "type": "object",
    "description": "Anthropic's error shape",
    "properties": {
        "type": {"type": "string", "enum": ["error"]},
        "error": {
            "type": "object",
            "properties": {
                "type": {"type": "string"},
                "message": {"type": "string"},
                "code": {"type": "string"},
            },
        },
    },
}

MESSAGES = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"role": {"type": "string"}, "content": {}},
        "additionalProperties": True,
    },
}


def _errors(shape: dict[str, Any]) -> dict[str, Any]:
    answer = {
        "content": {"application/json": {"schema": shape}},
        "headers": ERROR_CODE_HEADER,
    }
    return {
        "400": {"description": "invalid_request: the body or a header is not valid", **answer},
        "401": {"description": "unauthorized: no API key, or one that is not valid", **answer},
        "404": {"description": "not_found: the route does not exist", **answer},
        "429": {"description": "rate_limited or budget_exceeded", **answer},
        "502": {"description": "upstream_error: the deployment failed", **answer},
        "default": {"description": "any other error, in the provider's shape", **answer},
    }


def _chat(
    *, summary: str, description: str, body: dict[str, Any], answer: dict[str, Any], error: Any
) -> dict[str, Any]:
    return {
        "summary": summary,
        "description": description,
        "parameters": CALL_HEADERS,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": body}},
        },
        "responses": {
            "200": {
                "description": "the provider's answer (or its Server-Sent Events with "
                "`stream: true`)",
                "headers": RESOLVE_ID_HEADER,
                "content": {
                    "application/json": {"schema": answer},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            **_errors(error),
        },
    }


CHAT_COMPLETION = _chat(
    summary="OpenAI Chat Completions through the route",
    description="Resolves the route's context into the request, forwards it to the route's "
    "deployment and answers with the provider's answer; the turn is written to the session. A "
    "deployment whose `protocol` is `openai_responses` receives it as a Responses body and its "
    "answer comes back as a chat completion; a body asking what Responses has no field for "
    "(`stop`, `seed`, `logprobs`, `n` over 1...) skips such deployments (400 "
    "`protocol_mismatch` naming the field when the route has no other).",
    body={
        "type": "object",
        "required": ["messages"],
        "properties": {
            "model": {"type": "string", "description": "the route (unless `x-route` names it)"},
            "messages": MESSAGES,
            "stream": {"type": "boolean"},
            "max_tokens": {"type": "integer"},
            "max_completion_tokens": {"type": "integer"},
            "tools": {"type": "array", "items": {"type": "object"}},
            "user": {"type": "string"},
        },
        "additionalProperties": True,
    },
    answer={
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "object"}},
            "usage": {"type": "object"},
        },
        "additionalProperties": True,
    },
    error=OPENAI_ERROR,
)

MESSAGE = _chat(
    summary="Anthropic Messages through the route",
    description="As `createChatCompletion`, in Anthropic's Messages shape, for a route whose "
    "deployment speaks Anthropic.",
    body={
        "type": "object",
        "required": ["messages", "max_tokens"],
        "properties": {
            "model": {"type": "string", "description": "the route (unless `x-route` names it)"},
            "messages": MESSAGES,
            "system": {},
            "max_tokens": {"type": "integer"},
            "stream": {"type": "boolean"},
            "tools": {"type": "array", "items": {"type": "object"}},
            "metadata": {"type": "object"},
        },
        "additionalProperties": True,
    },
    answer={
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "type": {"type": "string"},
            "role": {"type": "string"},
            "content": {"type": "array", "items": {"type": "object"}},
            "stop_reason": {"type": "string", "nullable": True},
            "usage": {"type": "object"},
        },
        "additionalProperties": True,
    },
    error=ANTHROPIC_ERROR,
)
RESPONSE_OBJECT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "`resp_...`"},
        "object": {"type": "string", "enum": ["response"]},
        "created_at": {"type": "integer"},
        "status": {"type": "string", "enum": ["completed", "incomplete", "failed"]},
        "model": {"type": "string"},
        "output": {
            "type": "array",
            "description": "`message` items (`output_text` content) and `function_call` items "
            "(`call_id`, `name`, `arguments`)",
            "items": {"type": "object"},
        },
        "usage": {
            "type": "object",
            "properties": {
                "input_tokens": {"type": "integer"},
                "output_tokens": {"type": "integer"},
                "total_tokens": {"type": "integer"},
            },
        },
        "store": {
            "type": "boolean",
            "description": "whether the gateway kept the response's content (false where the "
            "tenant does not capture content)",
        },
        "previous_response_id": {"type": "string", "nullable": True},
    },
    "additionalProperties": True,
}

RESPONSE = _chat(
    summary="OpenAI Responses through the route",
    description="The Responses body translated to Chat Completions (`instructions` the system "
    "message, `input` items the messages, function tools the chat tools) and run as "
    "`createChatCompletion` runs (context, budgets, fallbacks, the gateway's own tools); the "
    "answer comes back as a Responses object, or with `stream: true` as the Responses API's "
    "events (`response.created` ... `response.completed`). A deployment whose `protocol` is "
    "`openai_responses` receives a Responses body at `{base_url}/responses`. "
    "`previous_response_id` is expanded by the gateway from the responses it kept (the caller's "
    "own: another user's or tenant's is 404); `store` (default true) keeps the response, its "
    "content only where the tenant captures content (else the answer says `store: false` and "
    "the header `x-context-response-stored: false`).",
    body={
        "type": "object",
        "required": ["input"],
        "properties": {
            "model": {"type": "string", "description": "the route (unless `x-route` names it)"},
            "input": {
                "description": "a string, or a list of items: `message` (role, content as a "
                "string or `input_text` parts), `function_call`, `function_call_output`",
            },
            "instructions": {"type": "string"},
            "tools": {
                "type": "array",
                "description": 'function tools: `{"type": "function", "name", "parameters"}`',
                "items": {"type": "object"},
            },
            "tool_choice": {},
            "max_output_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number"},
            "stream": {"type": "boolean"},
            "previous_response_id": {"type": "string"},
            "store": {"type": "boolean"},
            "metadata": {"type": "object"},
            "user": {"type": "string"},
        },
        "additionalProperties": True,
    },
    answer=RESPONSE_OBJECT,
    error=OPENAI_ERROR,
)
RESPONSE["responses"]["200"]["headers"] = {
    **RESOLVE_ID_HEADER,
    "x-context-response-stored": {
        "description": "`true` when the gateway kept the response's content",
        "schema": {"type": "string"},
    },
}

STORED_RESPONSE = {
    "summary": "A response the gateway kept",
    "description": "The caller's own (its `x-user-id`, else the query's `user`; one kept "
    "without a user is the user-less callers'). Another user's, another tenant's or an unknown "
    "one is 404 `not_found`; one kept where the tenant does not capture content is 404 "
    '`response_not_stored` ("response resp_... was not stored: this tenant does not capture '
    "content\"). Kept for the tenant's memory retention (`memory_max_age_days`), else 30 days.",
    "parameters": [
        {
            "name": "response_id",
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
        },
        _header("x-user-id", "the end user the response was made for"),
        {
            "name": "user",
            "in": "query",
            "required": False,
            "description": "the end user, when no `x-user-id` is sent",
            "schema": {"type": "string"},
        },
    ],
    "responses": {
        "200": {
            "description": "the response as it was answered",
            "content": {"application/json": {"schema": RESPONSE_OBJECT}},
        },
        **{
            status: response
            for status, response in _errors(OPENAI_ERROR).items()
            if status in ("400", "401", "404", "429", "default")
        },
    },
}

DELETED_RESPONSE = {
    "summary": "Delete a response the gateway kept",
    "description": "The caller's own (its `x-user-id`, else the query's `user`; one kept "
    "without a user is the user-less callers'), kept with its content or without: it can no "
    "longer be read or continued with `previous_response_id`. Another user's, another tenant's "
    "or an unknown one is 404 `not_found`, and nothing is deleted.",
    "parameters": STORED_RESPONSE["parameters"],
    "responses": {
        "200": {
            "description": "deleted, as OpenAI answers a deletion",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["id", "object", "deleted"],
                        "properties": {
                            "id": {"type": "string"},
                            "object": {"type": "string", "enum": ["response"]},
                            "deleted": {"type": "boolean", "enum": [True]},
                        },
                    }
                }
            },
        },
        **{
            status: response
            for status, response in _errors(OPENAI_ERROR).items()
            if status in ("400", "401", "404", "429", "default")
        },
    },
}

# Anthropic's clients send the key as x-api-key and announce their version.
MESSAGE["parameters"] = [
    *CALL_HEADERS,
    _header("anthropic-version", "sent by Anthropic's clients; not required"),
]

MODELS = {
    "summary": "The tenant's routes, as OpenAI's model list",
    "description": "What a client may send as `model`.",
    "responses": {
        "200": {
            "description": "the routes",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "object": {"type": "string", "enum": ["list"]},
                            "data": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "id": {"type": "string"},
                                        "object": {"type": "string"},
                                        "created": {"type": "integer"},
                                        "owned_by": {"type": "string"},
                                    },
                                },
                            },
                        },
                    }
                }
            },
        },
        **{
            status: response
            for status, response in _errors(OPENAI_ERROR).items()
            if status in ("401", "429", "default")
        },
    },
}

MODEL_OBJECT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "the route's name"},
        "object": {"type": "string", "enum": ["model"]},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
}

MODEL = {
    "summary": "One of the tenant's routes, as OpenAI's model object",
    "description": "What `GET /v1/models` lists for the route; an unknown route is 404 "
    "`not_found` in OpenAI's error shape.",
    "parameters": [
        {
            "name": "model",
            "in": "path",
            "required": True,
            "description": "the route's name",
            "schema": {"type": "string"},
        }
    ],
    "responses": {
        "200": {
            "description": "the route",
            "content": {"application/json": {"schema": MODEL_OBJECT}},
        },
        **{
            status: response
            for status, response in _errors(OPENAI_ERROR).items()
            if status in ("400", "401", "404", "429", "default")
        },
    },
}

COUNT_TOKENS = {
    "summary": "Anthropic's token count of a body, as the route would send it",
    "description": "The route's context resolved into the body as `createMessage` would send "
    "it (its sources fetched as a preview, no judge call, nothing written) and the rewritten "
    "body counted with the route's estimator. `max_tokens` is not needed.",
    "parameters": [
        *CALL_HEADERS,
        _header("anthropic-version", "sent by Anthropic's clients; not required"),
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["messages"],
                    "properties": {
                        "model": {
                            "type": "string",
                            "description": "the route (unless `x-route` names it)",
                        },
                        "messages": MESSAGES,
                        "system": {},
                        "tools": {"type": "array", "items": {"type": "object"}},
                    },
                    "additionalProperties": True,
                }
            }
        },
    },
    "responses": {
        "200": {
            "description": "the count",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["input_tokens"],
                        "properties": {"input_tokens": {"type": "integer"}},
                    }
                }
            },
        },
        **{
            status: response
            for status, response in _errors(ANTHROPIC_ERROR).items()
            if status != "502"
        },
    },
}

# Path (as Django's resolver writes it, under /v1/) → method → operation (without its id and tag:
# the project's table names every operation).
GATEWAY_PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/v1/chat/completions": {"post": CHAT_COMPLETION},
    "/v1/messages": {"post": MESSAGE},
    "/v1/messages/count_tokens": {"post": COUNT_TOKENS},
    "/v1/models": {"get": MODELS},
    "/v1/models/{model}": {"get": MODEL},
    "/v1/responses": {"post": RESPONSE},
    "/v1/responses/{response_id}": {"get": STORED_RESPONSE, "delete": DELETED_RESPONSE},
}
