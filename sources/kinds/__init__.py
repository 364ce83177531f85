"""Built-in source kinds; importing this package registers them."""

from sources.kinds import guardrails, recent_messages, user_profile

__all__ = ["guardrails", "recent_messages", "user_profile"]
