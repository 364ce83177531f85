"""The masking every log record passes (contextplatform.core.log_redaction): credentials in query
strings, header values and the platform's keys, in the message and in the arguments as uvicorn's
and gunicorn's access formatters read them."""

from __future__ import annotations

import logging

import pytest

from contextplatform.core.log_redaction import is_credential_name, redact, redact_record

KEY = "cp_Abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f'"WebSocket /ws/metrics/?key={KEY}" [accepted]',
            '"WebSocket /ws/metrics/?key=[redacted]" [accepted]',
        ),
        (
            "GET /x?page=2&API_KEY=s3cret&y=1 HTTP/1.1",
            "GET /x?page=2&API_KEY=[redacted]&y=1 HTTP/1.1",
        ),
        (
            "/cb?access_token=abc&X-Amz-Signature=f00",
            "/cb?access_token=[redacted]&X-Amz-Signature=[redacted]",
        ),
        ("Authorization: Bearer abc.def-ghi", "Authorization: [redacted]"),
        (
            "{'X-Goog-Api-Key': 'g00g', 'Accept': 'json'}",
            "{'X-Goog-Api-Key': '[redacted]', 'Accept': 'json'}",
        ),
        ("sent with Bearer abcdefghijkl", "sent with Bearer [redacted]"),
        (f"no such key {KEY}.", "no such key [redacted]."),
        ("GET /api/v1/routes?page=2 HTTP/1.1", "GET /api/v1/routes?page=2 HTTP/1.1"),
    ],
)
def test_redact_masks_credentials_only(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_uvicorn_access_arguments_stay_a_tuple_of_five() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", f"/v1/models?token={KEY}", "1.1", 200),
        None,
    )
    redact_record(record)
    assert record.args == ("127.0.0.1:5", "GET", "/v1/models?token=[redacted]", "1.1", 200)
    assert KEY not in record.getMessage()


class Atoms(dict[str, object]):
    """Like gunicorn's access atoms: a missing header answers "-"."""

    def __getitem__(self, name: str) -> object:
        return super().get(name, "-")


def test_gunicorn_access_atoms_keep_their_type_and_lose_credential_headers() -> None:
    atoms = Atoms(
        {"r": f"GET /?key={KEY} HTTP/1.1", "{x-api-key}i": KEY, "{user-agent}i": "curl", "s": 200}
    )
    record = logging.LogRecord(
        "gunicorn.access", logging.INFO, __file__, 1, "%(r)s %({x-api-key}i)s", None, None
    )
    record.args = atoms
    redact_record(record)
    assert record.args is atoms
    assert atoms["r"] == "GET /?key=[redacted] HTTP/1.1"
    assert atoms["{x-api-key}i"] == "[redacted]"
    assert atoms["{user-agent}i"] == "curl"
    assert atoms["{referer}i"] == "-"


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("Authorization", True),
        ("X-Goog-Api-Key", True),
        ("Cookie", True),
        ("X-Session-Id", True),
        ("x-csrftoken", True),
        ("Accept", False),
        ("X-Request-Id", False),
        ("Content-Type", False),
    ],
)
def test_credential_names(name: str, credential: bool) -> None:
    assert is_credential_name(name) is credential
