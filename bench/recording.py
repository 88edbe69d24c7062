"""The native engine with a record of what it was asked and what it generated, for the
session benchmarks (context_session.py, thinking_toggle.py): `requests` (each ChatRequest, in
order) and `generated` (request id -> output token ids)."""

from __future__ import annotations


def recording_engine_class():
    """A NativeEngine subclass that records; imported late, as the benchmarks import m3agent."""
    from m3agent.engine.backends.native import NativeEngine

    class Recording(NativeEngine):
        def __init__(self, *a, **kw):
            self.requests, self.generated = [], {}
            super().__init__(*a, **kw)

        def _deliver(self, out):
            if out.finished:
                self.generated[out.request_id] = list(out.token_ids)
            super()._deliver(out)

        async def stream(self, request):
            self.requests.append(request)
            async for d in super().stream(request):
                yield d

    return Recording
