"""Write-only secrets inside source settings: a Milvus ``token``, a Qdrant or OpenAI ``api_key``.

A field typed ``Secret`` (a kind's settings, or a rag backend's config) is written in plain text
and from then on only kept, never read back:

    written   "sk-..." (the secret)   {"set": true} (keep the stored one)   null or absent (none)
    stored    {"encrypted": "<Fernet token>"}   (contextplatform.core.secrets, under
              DEPLOYMENT_SECRET_KEYS like deployments' keys), in the layer that writes the source
              (a route's own context, a recipe, the tenant defaults)
    shown     {"set": true}   (the API's representation and export, the admin)

``seal`` runs where a layer is stored (``contextplatform.routes.services``): a plain secret is
encrypted, ``{"set": true}`` takes the stored secret of the same source (matched by name) at the
same place, or none when there is none (a GET body posted to another tenant is accepted, without
the secret it cannot see). A stored token written back that is not the one stored there is
refused: tokens never leave the platform, and one copied from elsewhere (another tenant's rows)
must not decrypt into this tenant's configuration. ``redact`` runs where a layer is shown.
``SecretValue.reveal`` runs where a backend is built for a fetch: only there is the secret plain.

Header values are secrets too (``SecretHeaders``: an external API backend's ``headers``, a
``realtime_apis`` connector's): every value, whatever its name, since an operator's header names
(``X-Goog-Api-Key``, ``Helicone-Auth``, ``X-Tenant-Token``) say too little to tell a credential
from a constant. Each value is its own secret, as above: the names stay shown
(``{"Authorization": {"set": true}}``), and a GET body written back keeps each stored value.
A value stored in plain text before headers were secrets is still read (and shown redacted);
``seal_plain`` (a migration) and ``rotate`` encrypt it.

Where a kind keeps its secrets is the kind's to say (``register_secret_locator``): the rag kind
finds them through its backend's config model, whose ``Secret`` fields (and ``SecretHeaders``
fields, one secret per header) are read off the model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, PlainSerializer, WithJsonSchema

from contextplatform.core import secrets
from contextplatform.core.errors import ApiError

ENCRYPTED = "encrypted"
SHOWN: dict[str, Any] = {"set": True}
MAX_SECRET_CHARS = 4096

MAX_HEADER_VALUE_CHARS = 8192  # bearer tokens and JWTs run long

# A path inside one source's settings, e.g. ("backend_config", "primary", "backend_config",
# "token"), or ("connectors", 0, "headers", "Authorization"): a number steps into a list.
Path = tuple[str | int, ...]
Locator = Callable[[dict[str, Any]], list[Path]]


class SecretUnavailable(Exception):
    """A stored secret that cannot be decrypted (its key was removed from DEPLOYMENT_SECRET_KEYS
    before the configuration was rotated). The message never holds the secret or its token."""


@dataclass(frozen=True)
class SecretValue:
    """A validated secret field: its stored token, or (a configuration not stored yet, such as a
    preview's) the plain text. ``repr`` never shows either."""

    token: str | None = field(default=None, repr=False)
    plain: str | None = field(default=None, repr=False)

    def reveal(self) -> str:
        if self.plain is not None:
            return self.plain
        assert self.token is not None
        try:
            return secrets.decrypt(self.token)
        except secrets.SecretUnreadable:
            raise SecretUnavailable(
                "a stored secret of this source cannot be decrypted with DEPLOYMENT_SECRET_KEYS "
                "(write it again, or add back the key it was written with)"
            ) from None

    def __repr__(self) -> str:
        return "SecretValue(set)"


class SecretMarker:
    """Marks a settings field as a secret (found by ``secret_fields``)."""


class SecretHeadersMarker:
    """Marks a settings field as headers whose values are secrets (``secret_header_fields``)."""


SECRET_MARK = SecretMarker()
SECRET_HEADERS_MARK = SecretHeadersMarker()


def _parse(value: Any) -> SecretValue | None:
    if value is None or is_placeholder(value):
        return None  # {"set": true} not matched to a stored secret: there is none
    if isinstance(value, str):
        if not value or len(value) > MAX_SECRET_CHARS:
            raise ValueError(f"must be 1 to {MAX_SECRET_CHARS} characters")
        if value != value.strip() or any(c in value for c in "\r\n"):
            raise ValueError("must not contain line breaks or surrounding spaces")
        return SecretValue(plain=value)
    if is_envelope(value):
        return SecretValue(token=value[ENCRYPTED])
    raise ValueError('write the secret as a string, {"set": true} to keep the stored one, or null')


def _shown(value: SecretValue | None) -> dict[str, Any] | None:
    return dict(SHOWN) if value is not None else None


# The type of a secret field: validated into a SecretValue, dumped as {"set": true}.
Secret = Annotated[
    SecretValue | None,
    BeforeValidator(_parse),
    PlainSerializer(_shown),
    WithJsonSchema(
        {
            "description": 'write-only: the secret as a string; shown as {"set": true}, '
            "which written back keeps the stored secret",
            "anyOf": [{"type": "string"}, {"type": "object"}, {"type": "null"}],
        }
    ),
    SECRET_MARK,
]


def _parse_header_value(value: Any) -> SecretValue | None:
    if value is None or is_placeholder(value):
        return None  # {"set": true} not matched to a stored value: the header is not sent
    if isinstance(value, str):
        if len(value) > MAX_HEADER_VALUE_CHARS:
            raise ValueError(f"a header value holds at most {MAX_HEADER_VALUE_CHARS} characters")
        if any(c in value for c in "\r\n\0"):
            raise ValueError("a header value must not contain line breaks")
        return SecretValue(plain=value)
    if is_envelope(value):
        return SecretValue(token=value[ENCRYPTED])
    raise ValueError('write each header value as a string, or {"set": true} to keep the stored one')


def _sent_headers(headers: dict[str, SecretValue | None]) -> dict[str, SecretValue]:
    return {name: value for name, value in headers.items() if value is not None}


# The value of one header, a secret (an empty value, hiding nothing, is stored as it is).
SecretHeaderValue = Annotated[
    SecretValue | None,
    BeforeValidator(_parse_header_value),
    PlainSerializer(_shown),
    WithJsonSchema(
        {
            "description": 'write-only: the value as a string; shown as {"set": true}, which '
            "written back keeps the stored value",
            "anyOf": [{"type": "string"}, {"type": "object"}],
        }
    ),
]
# Headers (name → value) whose values are write-only secrets; a header kept with {"set": true}
# and nothing stored is left out.
SecretHeaders = Annotated[
    dict[str, SecretHeaderValue], AfterValidator(_sent_headers), SECRET_HEADERS_MARK
]


def revealed_headers(headers: dict[str, SecretValue]) -> dict[str, str]:
    """The headers as they are sent: where a request is built, and only there."""
    return {name: value.reveal() for name, value in headers.items()}


def secret_fields(model: type[BaseModel]) -> list[str]:
    """The names of ``model``'s fields typed ``Secret``."""
    return [
        name
        for name, info in model.model_fields.items()
        if any(isinstance(meta, SecretMarker) for meta in info.metadata)
    ]


def secret_header_fields(model: type[BaseModel]) -> list[str]:
    """The names of ``model``'s fields typed ``SecretHeaders``."""
    return [
        name
        for name, info in model.model_fields.items()
        if any(isinstance(meta, SecretHeadersMarker) for meta in info.metadata)
    ]


def header_paths(headers: Any, at: Path) -> list[Path]:
    """The path of each header value in ``headers`` (as written) found at ``at``."""
    return [(*at, name) for name in headers] if isinstance(headers, dict) else []


def is_placeholder(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"set"}


def is_envelope(value: Any) -> bool:
    return (
        isinstance(value, dict) and set(value) == {ENCRYPTED} and isinstance(value[ENCRYPTED], str)
    )


# --- where the secrets are ------------------------------------------------------------------------

LOCATORS: dict[str, Locator] = {}


def register_secret_locator(type_name: str, locator: Locator) -> None:
    """``locator(source)`` lists the paths of the secret fields in one source of kind
    ``type_name`` as written (it must not fail on a source that does not validate)."""
    LOCATORS[type_name] = locator


def locations(source: Any) -> list[Path]:
    if not isinstance(source, dict):
        return []
    kind = source.get("type")
    locator = LOCATORS.get(kind) if isinstance(kind, str) else None
    return locator(source) if locator else []


def _step(data: Any, key: str | int) -> tuple[bool, Any]:
    """``data[key]`` where it is there: a name in an object, a number in a list."""
    if isinstance(key, int):
        found = isinstance(data, list) and 0 <= key < len(data)
    else:
        found = isinstance(data, dict) and key in data
    return found, data[key] if found else None


def _get(data: Any, path: Path) -> Any:
    for key in path:
        found, data = _step(data, key)
        if not found:
            return None
    return data


def _has(data: Any, path: Path) -> bool:
    for key in path[:-1]:
        found, data = _step(data, key)
        if not found:
            return False
    return isinstance(data, dict) and path[-1] in data


def _container(data: dict[str, Any], path: Path) -> dict[str, Any]:
    container: Any = data
    for key in path[:-1]:
        container = container[key]
    return container  # type: ignore[no-any-return]


def source_name(source: Any) -> str | None:
    if not isinstance(source, dict):
        return None
    name = source.get("name") or source.get("type")
    return name if isinstance(name, str) else None


def _sources(context: Any) -> list[Any]:
    if isinstance(context, dict) and isinstance(context.get("sources"), list):
        return list(context["sources"])
    return []


def _each_secret(context: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any], Path]]:
    for index, source in enumerate(_sources(context)):
        for path in locations(source):
            if _has(source, path):
                yield index, source, path


# --- the three transformations ----------------------------------------------------------------


def seal(context: Any, previous: Any = None, *, param: str = "context") -> Any:
    """The layer as it is stored: plain secrets encrypted, ``{"set": true}`` resolved against the
    ``previous`` stored layer (the same source by name, the same place). A copy; ``context``
    itself is left as it is."""
    if not any(True for _ in _each_secret(context if isinstance(context, dict) else {})):
        return context
    sealed = copy.deepcopy(context)
    stored = {source_name(s): s for s in _sources(previous)}
    for index, source, path in _each_secret(sealed):
        container, key = _container(source, path), path[-1]
        value = container[key]
        before = _get(stored.get(source_name(source)), path)
        where = f"{param}.sources[{index}]" + "".join(
            f"[{key}]" if isinstance(key, int) else f".{key}" for key in path
        )
        if isinstance(value, str) and value:
            container[key] = {ENCRYPTED: secrets.encrypt(value)}
        elif is_placeholder(value):
            if is_envelope(before):
                container[key] = dict(before)
            else:
                del container[key]  # nothing stored to keep: the source has no secret
        elif is_envelope(value) and value != before:
            raise ApiError(
                "invalid_request",
                f"{where}: a stored secret cannot be written back; write the secret itself, or "
                '{"set": true} to keep the one stored here',
                param=where,
            )
    return sealed


def redact(context: Any) -> Any:
    """The layer as it is shown: every stored (or plain) secret as ``{"set": true}``."""
    if not any(True for _ in _each_secret(context if isinstance(context, dict) else {})):
        return context
    shown = copy.deepcopy(context)
    for _, source, path in _each_secret(shown):
        container, key = _container(source, path), path[-1]
        if container[key] is not None:
            container[key] = dict(SHOWN)
    return shown


def rotate(context: Any) -> tuple[Any, int]:
    """The layer with every stored secret re-encrypted under the newest key (and every value
    still in plain text, such as a header stored before header values were secrets, encrypted),
    and how many. ``secrets.SecretUnreadable`` when a token is readable by none of the keys."""
    return _encrypted(context, rotate_tokens=True)


def seal_plain(context: Any) -> tuple[Any, int]:
    """The layer with every secret still stored in plain text encrypted, and how many; stored
    tokens are left as they are (a migration runs this, whatever keys are configured)."""
    return _encrypted(context, rotate_tokens=False)


def _encrypted(context: Any, *, rotate_tokens: bool) -> tuple[Any, int]:
    found = [item for item in _each_secret(context if isinstance(context, dict) else {})]
    if not found:
        return context, 0
    rotated = copy.deepcopy(context)
    count = 0
    for _, source, path in _each_secret(rotated):
        container, key = _container(source, path), path[-1]
        value = container[key]
        if rotate_tokens and is_envelope(value):
            container[key] = {ENCRYPTED: secrets.rotate(value[ENCRYPTED])}
            count += 1
        elif isinstance(value, str) and value:
            container[key] = {ENCRYPTED: secrets.encrypt(value)}
            count += 1
    return rotated, count
