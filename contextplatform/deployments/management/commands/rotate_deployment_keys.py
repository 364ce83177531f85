"""Re-encrypt every tenant's deployment keys and header values under the newest key of
DEPLOYMENT_SECRET_KEYS."""

from __future__ import annotations

from contextplatform.deployments.services import rotate_keys
from tenants.secret_rotation import rotation_command

Command = rotation_command(
    rotate_keys,
    "secret(s)",
    "Re-encrypt the API keys and header values of every tenant's deployments with the first (newest) key of "
    "DEPLOYMENT_SECRET_KEYS. Run it after prepending a new key; drop the old key afterwards.",
)
