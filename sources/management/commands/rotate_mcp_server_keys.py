"""Re-encrypt every tenant's MCP server header values under the newest key of
DEPLOYMENT_SECRET_KEYS (run it beside rotate_deployment_keys)."""

from __future__ import annotations

from sources.mcp.services import rotate_header_keys
from tenants.secret_rotation import rotation_command

Command = rotation_command(
    rotate_header_keys,
    "MCP server(s)",
    "Re-encrypt the header values of every tenant's MCP servers with the first (newest) key "
    "of DEPLOYMENT_SECRET_KEYS. Run it after prepending a new key, beside "
    "rotate_deployment_keys; drop the old key afterwards.",
)
