"""Outbound HTTP for tenant-configured URLs, guarded against server-side request forgery: one
policy (``policy``: which addresses, the tenant's allow-list, the URL's form, redirects, pinned
resolution), one bounded body reader (``bounded``), and a thin adapter per HTTP library the
project speaks: ``httpx_client`` (connectors, the LLM client), ``httpx2_client`` (the MCP SDK's
library) and ``aiohttp_client`` (the gateway's upstream calls). Import from the module you need:
this package itself exports nothing."""
