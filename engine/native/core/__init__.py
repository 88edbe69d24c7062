"""The engine core: requests, the scheduler and its token budget, the paged KV cache
manager, and what a step reports (vLLM v1 vocabulary)."""
