"""vLLM 0.33.0's behaviour through VllmEngine, over the fake that mirrors it: validation errors
are request errors with vLLM's words (400 from serve), EngineGenerateError shows its cause,
a dead core is EngineUnavailable, finish reasons error/repetition, the load failure's root
cause from the engine core's own output, stats logging off unless verbose."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from m3agent.app.serve.http import HttpRequest
from m3agent.app.serve.server import ChatServer, ServeConfig
from m3agent.engine.api import (
    EngineError,
    EngineRequestError,
    EngineUnavailable,
    MediaPart,
    PromptTooLong,
    SamplingParams,
    UsageDelta,
)
from m3agent.engine.backends import vllm as vllm_backend
from m3agent.engine.backends.vllm import VllmEngine
from m3agent.engine.backends.vllm_args import GpuInfo, VllmOptions
from m3agent.engine.backends.vllm_sampling import vllm_sampling_error
from PIL import Image
from test_stream import collect, request

GB = 10**9
H200 = GpuInfo(count=1, memory_bytes=141 * GB, name="H200")


@pytest.fixture
def engine(vllm, checkpoint):
    eng = VllmEngine.from_model_dir(
        checkpoint(weight_bytes=2 * GB), VllmOptions(max_model_len=8192), gpus=H200
    )
    yield eng
    asyncio.run(eng.close())


def with_sampling(rid: str, **kw) -> object:
    req = request(rid)
    return type(req)(req.request_id, req.messages, sampling=SamplingParams(**kw))


BAD_SAMPLING = [
    {"temperature": -0.5},
    {"temperature": 2.5},
    {"temperature": math.inf},
    {"top_p": 0.0},
    {"top_p": 1.5},
    {"top_k": -2},
    {"max_tokens": 0},
    {"stop": ("",)},
]


@pytest.mark.parametrize("kw", BAD_SAMPLING)
def test_sampling_rules_are_vllms_own(vllm, kw):
    """Our pre-submission check says exactly what vLLM's SamplingParams raises."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams as VllmSampling

    ours = SamplingParams(**kw)
    fields = {
        "temperature": ours.temperature,
        "top_p": ours.top_p,
        "top_k": ours.top_k,
        "max_tokens": ours.max_tokens,
        "stop": list(ours.stop),
    }
    with pytest.raises(VLLMValidationError) as real:
        VllmSampling(**fields)
    assert str(real.value).startswith(vllm_sampling_error(ours))
    assert not isinstance(real.value, ValueError)  # why a bare `except ValueError` missed it


@pytest.mark.parametrize("kw", BAD_SAMPLING[:3])
def test_bad_sampling_refused_before_submission(engine, vllm, kw):
    with pytest.raises(EngineRequestError, match="vLLM rejected the request: temperature"):
        asyncio.run(collect(engine, with_sampling("bad", **kw)))
    assert vllm.requests == []


def test_vllm_validation_error_is_a_request_error_even_without_our_check(engine, vllm, monkeypatch):
    monkeypatch.setattr(vllm_backend, "check_sampling", lambda s: None)
    with pytest.raises(EngineRequestError) as e:
        asyncio.run(collect(engine, with_sampling("bad", temperature=2.5)))
    assert "temperature must be in [0, 2], got 2.5." in str(e.value)
    assert "parameter=temperature" in str(e.value)  # vLLM's own __str__


def test_serve_answers_400_with_vllms_message(engine, vllm, tmp_path):
    server = ChatServer(engine, ServeConfig("m3", tmp_path / "media"))
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 2.5}
    resp = asyncio.run(
        server.handle(HttpRequest("POST", "/v1/chat/completions", {}, json.dumps(body).encode()))
    )
    assert resp.status == 400
    assert "temperature must be in [0, 2], got 2.5." in json.loads(resp.body)["error"]["message"]


def big_image(tmp_path):
    path = tmp_path / "big.png"
    Image.new("RGB", (2800, 2800), (10, 200, 10)).save(path)
    return [MediaPart("image", str(path))]


def test_prompt_length_counted_after_media_expansion(vllm, checkpoint, tmp_path, monkeypatch):
    req = request("img", "what is this?", media=big_image(tmp_path))
    path = checkpoint(weight_bytes=2 * GB)
    text_len = len(VllmEngine.from_model_dir(path, gpus=H200)._chat.render(req).token_ids)
    engine = VllmEngine.from_model_dir(path, VllmOptions(max_model_len=text_len + 64), gpus=H200)
    with pytest.raises(PromptTooLong) as ours:
        asyncio.run(collect(engine, req))
    assert vllm.requests == []  # the text alone fits; its image does not
    # Without our check vLLM's input processor refuses it, counting the same tokens.
    monkeypatch.setattr(vllm_backend, "check_prompt_len", lambda n, m: None)
    with pytest.raises(EngineRequestError) as real:
        asyncio.run(collect(engine, req))
    assert f"(length {ours.value.prompt_tokens}) is longer than" in str(real.value)


def test_one_placeholder_per_media_item(engine, vllm, tmp_path, monkeypatch):
    """A template that drops the placeholder: vLLM refuses the mismatch, so do we (400)."""
    from m3agent.engine.m3 import chat

    real_encode = chat.ChatLayer.encode
    image_id = engine._chat.tokenizer.token_to_id("]<]image[>[")
    monkeypatch.setattr(
        chat.ChatLayer,
        "encode",
        lambda self, parts: [i for i in real_encode(self, parts) if i != image_id],
    )
    img = tmp_path / "a.png"
    Image.new("RGB", (56, 56)).save(img)
    with pytest.raises(EngineRequestError, match="1 image items, but instead found 0"):
        asyncio.run(collect(engine, request("x", media=[MediaPart("image", str(img))])))


def test_engine_generate_error_shows_its_cause(engine, vllm):
    vllm.generate_error = RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(EngineError) as e:
        asyncio.run(collect(engine, request("g")))
    assert not isinstance(e.value, EngineRequestError)
    assert "RuntimeError: CUDA error: an illegal memory access" in str(e.value)


def test_dead_engine_core_is_unavailable(engine, vllm):
    vllm.dead = True
    with pytest.raises(EngineUnavailable, match="engine core died"):
        asyncio.run(collect(engine, request("d")))


def test_repetition_finish_reason_surfaces(engine, vllm):
    vllm.finish_reason = "repetition"
    vllm.scripts.append("</mm:think>again again again")
    last = asyncio.run(collect(engine, request("rep")))[-1]
    assert isinstance(last, UsageDelta) and last.finish_reason == "repetition"


def test_error_finish_reason_is_an_engine_error_and_still_counted(engine, vllm):
    vllm.finish_reason = "error"
    with pytest.raises(EngineError, match="internal error"):
        asyncio.run(collect(engine, request("err")))
    assert engine.stats().requests == 1


def test_load_failure_shows_the_engine_cores_root_cause(vllm, checkpoint):
    vllm.core_failure = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "20.00 GiB. GPU 0 has a total capacity of 139.80 GiB"
    )
    with pytest.raises(EngineUnavailable) as e:
        VllmEngine.from_model_dir(checkpoint(weight_bytes=2 * GB), gpus=H200)
    msg = str(e.value)
    assert "out of GPU memory" in msg and "Tried to allocate 20.00 GiB" in msg
    assert "initialization failed" not in msg


def test_kv_cache_root_cause_gets_the_kv_advice(vllm, checkpoint):
    vllm.core_failure = (
        "ValueError: To serve at least one request with the models's max seq "
        "len (262144), (48.00 GiB KV cache is needed, which is larger than "
        "the available KV cache memory (20.00 GiB)."
    )
    with pytest.raises(EngineUnavailable, match="not enough GPU memory for a KV cache"):
        VllmEngine.from_model_dir(checkpoint(weight_bytes=2 * GB), gpus=H200)


def test_stats_logging_off_unless_verbose(vllm, checkpoint):
    path = checkpoint(weight_bytes=2 * GB)
    quiet = VllmEngine.from_model_dir(path, gpus=H200)
    loud = VllmEngine.from_model_dir(path, VllmOptions(verbose=True), gpus=H200)
    assert quiet._engine.log_stats is False and loud._engine.log_stats is True


def test_unknown_engine_argument_fails_like_vllm(vllm):
    import vllm as fake

    with pytest.raises(TypeError, match="unexpected keyword argument 'max_model_length'"):
        fake.AsyncEngineArgs(model="m", max_model_length=8192)


def test_raw_completion_goes_to_vllm_as_ids_and_comes_back_unparsed(engine, vllm):
    from m3agent.engine.api import ContentDelta
    from m3agent.engine.backends.completion import CompletionRequest

    raw = "<mm:think>hmm</mm:think>fine"
    vllm.scripts.append(raw)
    ids = (5, 6, 7, 8)
    out = asyncio.run(
        _complete(
            engine,
            CompletionRequest("c1", prompt_token_ids=ids, sampling=SamplingParams(max_tokens=8)),
        )
    )
    assert "".join(d.text for d in out if isinstance(d, ContentDelta)) == raw
    assert out[-1].finish_reason == "stop" and out[-1].usage.prompt_tokens == 4
    assert vllm.requests[-1][1] == {"prompt_token_ids": list(ids)}
    with pytest.raises(EngineRequestError, match="temperature must be in"):
        asyncio.run(
            _complete(
                engine,
                CompletionRequest("c2", prompt_text="hi", sampling=SamplingParams(temperature=3.0)),
            )
        )


async def _complete(eng, req):
    return [d async for d in eng.complete(req)]


def test_core_output_passes_through_and_its_last_exception_is_found(capfd):
    import subprocess
    import sys

    from m3agent.engine.backends.vllm_core_log import CoreOutputTail

    tail = CoreOutputTail()
    with tail:
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; print('(EngineCore_DP0 pid=9) ERROR [core.py:1] "
                "torch.OutOfMemoryError: CUDA out of memory.'); "
                "print('RuntimeError: Engine core initialization failed.', "
                "file=sys.stderr)",
            ],
            check=True,
        )
    assert tail.root_cause() == "torch.OutOfMemoryError: CUDA out of memory."
    seen = capfd.readouterr()
    assert "CUDA out of memory" in seen.err  # the user still sees vLLM's log
