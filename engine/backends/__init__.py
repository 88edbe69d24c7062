"""Engine backends: native (our engine), vllm (in-process vLLM), remote (an OpenAI-compatible
server) and scripted (recorded model text through the real M3 format layer).

Nothing is imported here: app/factory.py imports the one backend asked for, so a missing
optional dependency (torch, vllm) only matters to that backend.
"""
