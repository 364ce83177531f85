"""The MCP server of the connectors bench (section 9), in a process of its own: the official SDK's
``MCPServer`` over Streamable HTTP (uvicorn, one worker) on loopback, answering at once.

``python -m scripts.bench_mcp_server PORT``. Two resources, one static and one a template filled by
the user, as an ``mcp_resources`` source reads a CRM: ``bench://status`` and
``bench://customers/{user}`` (JSON).
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-crm", version="1", log_level="WARNING")


@server.resource("bench://status")
def status() -> str:
    return "All systems green; the refund queue is short today."


@server.resource("bench://customers/{user}", mime_type="application/json")
def customer(user: str) -> dict[str, object]:
    return {"user": user, "tier": "gold", "open_tickets": 2, "since": "2025-04-01"}


def main() -> None:
    port = int(sys.argv[1])
    uvicorn.run(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
