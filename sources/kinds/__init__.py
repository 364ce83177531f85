"""Built-in source kinds; importing this package registers them."""

from sources.kinds import guardrails, realtime_apis, recent_messages, user_profile
from sources.mcp import resources as mcp_resources
from sources.rag import source as rag

__all__ = ["guardrails", "mcp_resources", "rag", "realtime_apis", "recent_messages", "user_profile"]
