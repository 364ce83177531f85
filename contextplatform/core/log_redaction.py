"""No secret in a log line: credentials in the text of every log record are masked where the record
is made, before any handler or formatter sees it.

A record is rewritten at creation (``logging.setLogRecordFactory``) rather than by a filter on some
handlers, because the lines that carry request paths come from loggers this project does not
configure: uvicorn's access log (``"GET /v1/models?api_key=… HTTP/1.1" 200``) and its WebSocket
lines on ``uvicorn.error`` (``"WebSocket /ws/metrics/?key=…" [accepted]``), each with handlers of
its own (uvicorn's, or gunicorn's under ``make run``) that never reach the root logger's. The
factory runs for every logger of the process.

Masked: the values of query-string parameters whose name says credential (``key``, ``api_key``,
``token``, ``access_token``, ``X-Amz-Signature``, ``password``, any case), the values after a
credential header name (``Authorization: …``, ``x-api-key=…``), ``Bearer``/``Basic`` credentials,
and the platform's own API keys wherever they stand. String arguments are masked one by one, so a
formatter that reads the arguments by position (uvicorn's access formatter) or by name (gunicorn's
access atoms) still finds them. The platform's own JSON lines are masked again once formatted
(``RedactingJsonFormatter``), for what is attached to a record after it is made.
"""

from __future__ import annotations

import logging
import re
from collections.abc import MutableMapping
from typing import Any

from pythonjsonlogger.json import JsonFormatter

MASK = "[redacted]"

# What a parameter or header name carrying a credential contains.
_CREDENTIAL_WORD = (
    r"(?:key|token|secret|passw(?:or)?d|auth\w*|session|signature|credential|cookie|jwt)"
)
_CREDENTIAL_NAME = re.compile(rf"[\w.-]*{_CREDENTIAL_WORD}[\w.-]*", re.IGNORECASE)
# ``?api_key=…`` / ``&token=…`` in a path or URL: the value up to the next separator.
_QUERY_PARAMETER = re.compile(
    rf"(?P<name>[?&;][\w.-]*{_CREDENTIAL_WORD}[\w.-]*=)(?P<value>[^&;#\s\"']+)", re.IGNORECASE
)
# ``Authorization: Bearer …``, ``x-api-key=…``, ``'x-goog-api-key': '…'`` in a logged message.
_HEADER_VALUE = re.compile(
    r"(?P<name>\b(?:proxy-)?authorization|\b[\w-]*api[-_]?key|\bcookie|\bset-cookie)"
    r"(?P<sep>['\"]?\s*[:=]\s*['\"]?)(?P<value>(?:(?:bearer|basic|token)\s+)?[^\s'\",;&]+)",
    re.IGNORECASE,
)
_SCHEME_CREDENTIAL = re.compile(r"\b(?P<scheme>bearer|basic)\s+(?P<value>[\w.~+/=-]{8,})", re.I)
# The platform's API keys (``tenants.services.KEY_PREFIX`` and the token after it), anywhere.
_PLATFORM_KEY = re.compile(r"\bcp_[A-Za-z0-9_-]{16,}")


def is_credential_name(name: str) -> bool:
    """Whether a header or parameter of this name carries a credential."""
    return _CREDENTIAL_NAME.fullmatch(name.strip()) is not None


def redact(text: str) -> str:
    """``text`` with every credential it shows replaced by ``[redacted]``. Each pattern runs only
    on a text holding what it needs (a substring test is a hundredth of a pattern's scan): most
    lines hold no credential, and every line of the process passes here."""
    lowered = text.lower()
    if "=" in text:
        text = _QUERY_PARAMETER.sub(lambda match: match["name"] + MASK, text)
    if "authorization" in lowered or "key" in lowered or "cookie" in lowered:
        text = _HEADER_VALUE.sub(lambda match: match["name"] + match["sep"] + MASK, text)
    if "bearer" in lowered or "basic" in lowered:
        text = _SCHEME_CREDENTIAL.sub(lambda match: f"{match['scheme']} {MASK}", text)
    return _PLATFORM_KEY.sub(MASK, text) if "cp_" in text else text


def _redacted_value(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


def redact_record(record: logging.LogRecord) -> None:
    """Mask the record's message and its string arguments in place."""
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    arguments = record.args
    if isinstance(arguments, tuple):
        record.args = tuple(_redacted_value(value) for value in arguments)
    elif isinstance(arguments, MutableMapping):
        # Gunicorn's access atoms: a dict subclass answering "-" for a missing header, kept as
        # it is; a header atom (``{authorization}i``) of a credential name is masked whole.
        for name, value in list(arguments.items()):
            header = name[1:-2] if name.startswith("{") and name.endswith("}i") else None
            if header is not None and is_credential_name(header) and value not in ("", "-"):
                arguments[name] = MASK
            else:
                arguments[name] = _redacted_value(value)


class RedactingJsonFormatter(JsonFormatter):
    """The platform's JSON log lines, masked whole: the fields a record carries beside its message
    (Django's ``request`` on ``django.request``, shown with its query string) and tracebacks are
    added after the record is made, so the finished line is masked too."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def install() -> None:
    """Make every log record of this process pass through ``redact_record`` (once)."""
    current = logging.getLogRecordFactory()
    if getattr(current, "redacts_credentials", False):
        return

    def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        redact_record(record)
        return record

    redacting_factory.redacts_credentials = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting_factory)


def configure(logging_settings: dict[str, Any]) -> None:
    """Django's ``LOGGING_CONFIG``: the dictionary configuration, then the redaction above; run by
    ``django.setup()`` in every process (the web workers, Celery, management commands)."""
    import logging.config

    install()
    if logging_settings:
        logging.config.dictConfig(logging_settings)
