"""MCP: a tenant's MCP servers, the ``mcp_resources`` source kind, and the client the ``mcp`` RAG
backend (``sources.rag.mcp_tool``) calls.

Nothing is imported here. The written forms (``sources.mcp_config``) are a module of their own
beside this package: ``sources.models`` and ``sources.rag.config`` read them, and this package
reads both of those, so neither may import from here.
"""
