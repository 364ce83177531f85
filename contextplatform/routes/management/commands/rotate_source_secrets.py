"""Re-encrypt the secrets of every tenant's source settings (routes, recipes, tenant defaults)
under the newest key of DEPLOYMENT_SECRET_KEYS."""

from __future__ import annotations

from contextplatform.routes.services import rotate_source_secrets
from tenants.secret_rotation import rotation_command

Command = rotation_command(
    rotate_source_secrets,
    "source secret(s)",
    "Re-encrypt the secrets stored in every tenant's source settings (a Milvus token, a "
    "Qdrant or OpenAI api_key) with the first (newest) key of DEPLOYMENT_SECRET_KEYS. Run it "
    "with rotate_deployment_keys after prepending a new key; drop the old key afterwards.",
)
