"""The status bar and /context say when a turn's prefix came back from disk or from the KV
host-memory tier (issue 38)."""

from __future__ import annotations

import json

from m3agent.agent import events as ev
from m3agent.app.tui.status import StatusState
from m3agent.app.tui.usage_tally import UsageTally
from m3agent.engine.api import FinishReason, Usage

FROM_DISK = Usage(31_481, 31_360, 4, restored_prompt_tokens=31_360)


def test_status_bar_says_from_disk():
    line = StatusState(engine="native", state="ready").with_usage(FROM_DISK).render()
    assert "cached 31.4k 100% (31.4k from disk)" in line
    memory = StatusState(engine="native").with_usage(Usage(31_481, 31_360, 4)).render()
    assert "from disk" not in memory and "cached 31.4k 100%" in memory


def test_context_line_names_disk_or_memory():
    tally = UsageTally()
    assert tally.prefix_line() is None
    tally.see(ev.ModelRequestFinished(usage=FROM_DISK, finish_reason=FinishReason.STOP))
    assert tally.prefix_line() == (
        "prefix cache (last call): 31,360 of 31,481 prompt tokens cached, "
        "31,360 of them read back from disk"
    )
    tally.see(
        ev.ModelRequestFinished(usage=Usage(31_600, 31_488, 4), finish_reason=FinishReason.STOP)
    )
    assert tally.prefix_line() == (
        "prefix cache (last call): 31,488 of 31,600 prompt tokens cached in the engine's memory"
    )


# 20,480 of the cached tokens kept in the host tier, 11,008 read back from disk into it
HOST = Usage(31_600, 31_488, 4, restored_prompt_tokens=11_008, host_prompt_tokens=20_480)


def test_status_bar_and_context_say_from_host_memory():
    line = StatusState(engine="native", state="ready").with_usage(HOST).render()
    assert "cached 31.5k 100% (20.5k from host memory, 11.0k from disk)" in line
    tally = UsageTally()
    tally.see(ev.ModelRequestFinished(usage=HOST, finish_reason=FinishReason.STOP))
    assert tally.prefix_line() == (
        "prefix cache (last call): 31,488 of 31,600 prompt tokens cached, 20,480 of them kept "
        "in host memory (the KV host tier), 11,008 of them read back from disk"
    )
    assert HOST.then(HOST).host_prompt_tokens == 40_960  # a turn's calls add up


def test_the_server_wire_carries_both_sources_to_the_remote_client():
    """engine -> `m3agent serve`'s usage JSON -> the remote backend a `run` attaches with:
    where the cached tokens came from survives the trip (the status bar reads it there)."""
    from m3agent.app.serve.wire import usage_json
    from m3agent.engine.backends.remote_stream import ContentReparser, StreamDecoder

    wire = usage_json(HOST)
    assert wire["prompt_tokens_details"] == {
        "cached_tokens": 31_488,
        "restored_tokens": 11_008,
        "host_tokens": 20_480,
    }
    decoder = StreamDecoder(ContentReparser([], "disabled"), "http://127.0.0.1:1")
    decoder.feed_data(json.dumps({"choices": [], "usage": wire}))
    got = decoder.final_usage()
    assert (got.host_prompt_tokens, got.restored_prompt_tokens) == (20_480, 11_008)
