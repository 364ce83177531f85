"""Secrets at rest (the API keys of tenants' deployments): Fernet tokens under rotating keys.

``settings.DEPLOYMENT_SECRET_KEYS`` is a comma-separated list of Fernet keys, newest first. The
newest encrypts; every key listed decrypts, so rotation is: prepend a new key, run
``manage.py rotate_deployment_keys`` (which re-encrypts every stored token with the newest key),
then drop the old key. Without the setting, one key derived from ``SECRET_KEY`` (HKDF-SHA256)
is used, so the embedded default works with no configuration; changing ``SECRET_KEY`` then makes
stored keys unreadable, which is why production sets the variable.

Keys and plain secrets never appear in the messages raised here.
"""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Binds the derived key to its use: another feature deriving from SECRET_KEY gets another key.
_DERIVATION_INFO = b"context-platform deployment secrets v1"


class SecretUnreadable(Exception):
    """A stored token that no configured key decrypts (a key removed too early, or tampering)."""


def derived_key(secret_key: str) -> bytes:
    """A Fernet key (urlsafe base64 of 32 bytes) derived from Django's ``SECRET_KEY``."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_DERIVATION_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


def configured_keys(keys_text: str, secret_key: str) -> list[bytes]:
    """The keys of ``DEPLOYMENT_SECRET_KEYS`` (newest first), or the one derived key."""
    keys = [part.strip().encode() for part in keys_text.split(",") if part.strip()]
    return keys or [derived_key(secret_key)]


@lru_cache(maxsize=8)
def _cipher(keys_text: str, secret_key: str) -> MultiFernet:
    fernets = []
    for position, key in enumerate(configured_keys(keys_text, secret_key), start=1):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"DEPLOYMENT_SECRET_KEYS: key {position} is not a Fernet key (32 bytes, urlsafe "
                'base64; make one with `python -c "from cryptography.fernet import Fernet; '
                'print(Fernet.generate_key().decode())"`)'
            ) from None
    return MultiFernet(fernets)


def cipher() -> MultiFernet:
    """The cipher of the current settings (cached per key set, so a changed setting applies)."""
    return _cipher(str(getattr(settings, "DEPLOYMENT_SECRET_KEYS", "") or ""), settings.SECRET_KEY)


def encrypt(plain: str) -> str:
    """A Fernet token (text) of ``plain``, under the newest key."""
    return cipher().encrypt(plain.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return cipher().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "no key of DEPLOYMENT_SECRET_KEYS decrypts this secret (was a key removed before "
            "rotate_deployment_keys ran?)"
        ) from None


def rotate(token: str) -> str:
    """``token`` re-encrypted under the newest key (``MultiFernet.rotate``)."""
    try:
        return cipher().rotate(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable("no key of DEPLOYMENT_SECRET_KEYS decrypts this secret") from None
