"""What a turn's memory write costs the API key whose resolve started it: the LLM extractor's
calls, charged to the key's budget once the turn is written (the call was made after the answer,
so nothing was reserved for it; like the relevance judge's calls, it may take the period past
the budget: the key's next call is refused).

Only a key that still exists, is active and has a budget is charged; the tokens are what the
extractor deployment's answers reported (cached input included), the dollars their cost at the
deployment's price, cached input read and written at their own rates (none when it has no
price)."""

from __future__ import annotations

from decimal import Decimal

from contextplatform.core.llm import LLMError, LLMUsage
from contextplatform.deployments.llm import named_deployment
from contextplatform.deployments.pricing import usage_cost
from tenants.key_services import charge
from tenants.models import ApiKey


def charge_extraction(*, key_id: int | None, extractor: str, usage: LLMUsage) -> None:
    """Add the extractor's reported tokens (and their cost) to key ``key_id``'s current budget
    period."""
    tokens = usage.input_tokens + usage.output_tokens
    if key_id is None or tokens <= 0:
        return
    api_key = ApiKey.objects.filter(pk=key_id).first()
    if api_key is None or not api_key.is_active or not api_key.has_budget:
        return
    try:
        found = named_deployment(extractor)
    except LLMError:  # its entry broke since the call: the tokens are still charged
        found = None
    # Cached input read or written is priced at its own rate, as the gateway prices a call.
    cost = usage_cost(found.price if found else None, usage.provider_usage())
    charge(api_key=api_key, tokens=tokens, usd=Decimal(str(cost or 0)))


__all__ = ["charge_extraction"]
