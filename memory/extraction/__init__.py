"""Turning a finished turn into memory decisions: add a memory, update one, delete one.

Three jobs, one module each, sharing the records of ``memory.extraction.types``:

* ``memory.extraction.local``: the deterministic default extractor, rules over what the user
  stated about themselves.
* ``memory.extraction.planning``: what to do with the local extractor's statements against the
  user's existing memories (add, or update a near-duplicate).
* ``memory.extraction.llm``: the LLM extractor, one call per turn to a chat deployment that
  answers the decisions itself.

No database here: ``memory.writing`` reads the existing memories and applies the decisions.
"""
