"""MCP: a tenant's MCP servers, the ``mcp_resources`` source kind and the ``mcp`` RAG backend.

Nothing is imported here, so that ``sources.rag.config`` can import the backend's settings
(``sources.mcp.config``) without pulling the client in.
"""
