"""Write-only secrets inside source settings: a Milvus ``token``, a Qdrant or OpenAI ``api_key``.

A field typed ``Secret`` (a kind's settings, or a rag backend's config) is written in plain text
and from then on only kept, never read back:

    written   "sk-..." (the secret)   {"set": true} (keep the stored one)   null or absent (none)
    stored    {"encrypted": "<Fernet token>"}   (contextplatform.core.secrets, under
              DEPLOYMENT_SECRET_KEYS like deployments' keys), in the layer that writes the source
              (a route's own context, a recipe, the tenant defaults)
    shown     {"set": true}   (the API's representation and export, the admin)

``seal`` runs where a layer is stored (``contextplatform.routing.services``): a plain secret is
encrypted, ``{"set": true}`` takes the stored secret of the same source (matched by name) at the
same place, or none when there is none (a GET body posted to another tenant is accepted, without
the secret it cannot see). A stored token written back that is not the one stored there is
refused: tokens never leave the platform, and one copied from elsewhere (another tenant's rows)
must not decrypt into this tenant's configuration. ``redact`` runs where a layer is shown.
``SecretValue.reveal`` runs where a backend is built for a fetch: only there is the secret plain.

Where a kind keeps its secrets is the kind's to say (``register_secret_locator``): the rag kind
finds them through its backend's config model, whose ``Secret`` fields are read off the model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, PlainSerializer, WithJsonSchema

from contextplatform.core import secrets
from contextplatform.core.errors import ApiError

ENCRYPTED = "encrypted"
SHOWN: dict[str, Any] = {"set": True}
MAX_SECRET_CHARS = 4096

# A path inside one source's settings, e.g. ("backend_config", "primary", "backend_config",
# "token").
Path = tuple[str, ...]
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


SECRET_MARK = SecretMarker()


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


def secret_fields(model: type[BaseModel]) -> list[str]:
    """The names of ``model``'s fields typed ``Secret``."""
    return [
        name
        for name, info in model.model_fields.items()
        if any(isinstance(meta, SecretMarker) for meta in info.metadata)
    ]


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


def _get(data: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _has(data: Any, path: Path) -> bool:
    for key in path[:-1]:
        if not isinstance(data, dict):
            return False
        data = data.get(key)
    return isinstance(data, dict) and path[-1] in data


def _container(data: dict[str, Any], path: Path) -> dict[str, Any]:
    for key in path[:-1]:
        data = data[key]
    return data


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
        where = f"{param}.sources[{index}].{'.'.join(path)}"
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
    """The layer with every stored secret re-encrypted under the newest key, and how many.
    ``secrets.SecretUnreadable`` when a token is readable by none of the keys."""
    found = [item for item in _each_secret(context if isinstance(context, dict) else {})]
    if not found:
        return context, 0
    rotated = copy.deepcopy(context)
    count = 0
    for _, source, path in _each_secret(rotated):
        container, key = _container(source, path), path[-1]
        if is_envelope(container[key]):
            container[key] = {ENCRYPTED: secrets.rotate(container[key][ENCRYPTED])}
            count += 1
    return rotated, count
