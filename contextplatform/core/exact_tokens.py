"""Exact token counts for OpenAI model families, offline.

``tiktoken`` downloads its BPE files at run time (a machine without network cannot count), so the
encodings come from ``bpe-openai``: GitHub's ``bpe-openai`` tokenizer (Rust) with ``cl100k_base``
and ``o200k_base`` bundled in its wheel, tiktoken's API and counts. A model whose family is not
known here has no exact tokenizer (``exact_estimator_for`` answers None) and keeps the estimate.

A text the tokenizer refuses (over its length limits) is counted by the heuristic estimator
instead: a count must never fail a resolve.
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from typing import Any

from contextplatform.core.estimation import DEFAULT_ESTIMATOR

logger = logging.getLogger("contextplatform.estimation")

# Model name → encoding, as tiktoken's own table maps them (first match wins: gpt-4o before gpt-4).
MODEL_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), encoding)
    for pattern, encoding in (
        (r"^(chatgpt-4o|gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|gpt-oss)([-.:].*)?$", "o200k_base"),
        (r"^o[134]([-.:].*)?$", "o200k_base"),
        (r"^(gpt-4|gpt-3\.5-turbo|gpt-35-turbo)([-.:].*)?$", "cl100k_base"),
    )
)

_encodings: dict[str, Any] = {}
_lock = threading.Lock()


def encoding_name_for(model: str) -> str | None:
    """The encoding of an OpenAI model name (a ``provider/`` prefix is ignored), or None."""
    name = model.rsplit("/", 1)[-1].strip().lower()
    for pattern, encoding in MODEL_FAMILIES:
        if pattern.match(name):
            return encoding
    return None


def _encoding(name: str) -> Any:
    encoding = _encodings.get(name)
    if encoding is None:
        with _lock:  # loading an encoding reads its whole table once per process
            encoding = _encodings.get(name)
            if encoding is None:
                import bpe_openai

                # It reads its bundled files with a deprecated importlib.resources call.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    encoding = bpe_openai.get_encoding(name)
                _encodings[name] = encoding
    return encoding


class ExactEstimator:
    """Counts with the model's own tokenizer (special-token text counts as ordinary text)."""

    def __init__(self, encoding: str) -> None:
        self.name = encoding
        self._encoding = _encoding(encoding)

    def count(self, text: str) -> int:
        if not text:
            return 0
        try:
            return len(self._encoding.encode_ordinary(text))
        except Exception:  # over the tokenizer's limits: the conservative estimate instead
            logger.info("exact count of %d characters refused; estimating", len(text))
            return DEFAULT_ESTIMATOR.count(text)


def exact_estimator_for(protocol: str, model: str) -> ExactEstimator | None:
    """An exact estimator for an OpenAI deployment's model, when its family is known and the
    bundled encodings load; None otherwise."""
    if protocol not in ("openai", "openai_responses"):  # the same models behind either API
        return None
    encoding = encoding_name_for(model)
    if encoding is None:
        return None
    try:
        return ExactEstimator(encoding)
    except Exception:  # the package missing or broken: estimates, not a failed resolve
        logger.warning("the %s encoding could not be loaded; estimating", encoding, exc_info=True)
        return None
