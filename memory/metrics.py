"""Prometheus counters of the memory feature (labels are configuration names only)."""

from __future__ import annotations

from prometheus_client import Counter

MEMORY_RETRIEVAL = Counter(
    "llm_memory_retrieval_total", "Memory retrievals by outcome.", ["backend", "status"]
)
MEMORY_EXTRACTION = Counter(
    "llm_memory_extraction_total",
    "Turns processed by the memory extractor.",
    ["extractor", "status"],
)
MEMORY_STORE_OPERATIONS = Counter(
    "llm_memory_store_operations_total", "Memory writes by operation.", ["operation"]
)
