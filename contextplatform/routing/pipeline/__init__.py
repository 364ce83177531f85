"""The resolve pipeline: request shapes, budget, packing, injection, the compression stage, turns,
the replay writer, live events and the retrieval preview."""
