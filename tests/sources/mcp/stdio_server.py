"""A stdio MCP server for tests (the SDK's ``MCPServer`` over stdin/stdout), started by the MCP
client as a platform stdio server (``MCP_STDIO_SERVERS``)."""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("local-notes", log_level="WARNING")


@server.resource("notes://today")
def today() -> str:
    return "Standup at ten."


@server.resource("notes://environment", mime_type="application/json")
def environment() -> str:
    return json.dumps(sorted(os.environ))


@server.resource("notes://users/{user}")
def user_notes(user: str) -> str:
    return f"Notes for {user}; greeting {os.environ.get('NOTES_GREETING', '')}"


if __name__ == "__main__":
    server.run("stdio")
