"""Built-in source kinds; importing this package registers them."""

from sources.kinds import guardrails, recent_messages, user_profile
from sources.rag import source as rag

__all__ = ["guardrails", "rag", "recent_messages", "user_profile"]
