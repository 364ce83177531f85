"""STUB until implemented."""
ExistingMemory = LLMExtractor = extract_local = plan_writes = None
