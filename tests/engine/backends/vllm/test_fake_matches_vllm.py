"""The fake vllm's AsyncEngineArgs and SamplingParams have exactly vLLM 0.33.0's fields.

Read from the real source with `ast` (no vllm import, no GPU): the wheel unpacked by
`pip download --no-deps vllm==0.33.0 -d /tmp/vllm033 && unzip -q -o /tmp/vllm033/*.whl -d
/tmp/vllm033/src` (or M3AGENT_VLLM_SRC=<dir holding vllm/>). Skipped when it is absent.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from fake_vllm import PACKAGE

CANDIDATES = ("/tmp/vllm033/src", "/tmp/vllm/src", "/tmp/vllm")


def real_source() -> Path:
    for d in (os.environ.get("M3AGENT_VLLM_SRC"), *CANDIDATES):
        if d and (Path(d) / "vllm" / "engine" / "arg_utils.py").is_file():
            version = Path(d).glob("vllm-*.dist-info")
            if any(p.name.startswith("vllm-0.33.0") for p in version) or not list(
                Path(d).glob("vllm-*.dist-info")
            ):
                return Path(d) / "vllm"
    pytest.skip("vLLM 0.33.0's source is not unpacked here (see this module's docstring)")


def class_fields(path: Path, name: str) -> list[str]:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return [
                n.target.id
                for n in node.body
                if isinstance(n, ast.AnnAssign)
                and isinstance(n.target, ast.Name)
                and not ast.unparse(n.annotation).startswith("ClassVar")
            ]
    raise AssertionError(f"no class {name} in {path}")


@pytest.mark.parametrize(
    ("module", "cls"),
    [
        ("engine/arg_utils.py", "EngineArgs"),
        ("engine/arg_utils.py", "AsyncEngineArgs"),
        ("sampling_params.py", "SamplingParams"),
    ],
)
def test_fields_match_the_real_source(module, cls):
    real = class_fields(real_source() / module, cls)
    fake = class_fields(PACKAGE / module, cls)
    assert sorted(fake) == sorted(real)


def test_exception_names_match():
    src = real_source()
    for module, names in (
        (
            "exceptions.py",
            {"VLLMError", "VLLMClientError", "VLLMServerError", "VLLMValidationError"},
        ),
        ("v1/engine/exceptions.py", {"EngineGenerateError", "EngineDeadError"}),
    ):
        real = {
            n.name: [ast.unparse(b) for b in n.bases]
            for n in ast.parse((src / module).read_text()).body
            if isinstance(n, ast.ClassDef)
        }
        fake = {
            n.name: [ast.unparse(b) for b in n.bases]
            for n in ast.parse((PACKAGE / module).read_text()).body
            if isinstance(n, ast.ClassDef)
        }
        for name in names:
            assert fake[name] == real[name], name


def test_generate_and_from_engine_args_signatures_match():
    def params(path: Path, cls: str, fn: str) -> list[str]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for f in node.body:
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == fn:
                        a = f.args
                        return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        raise AssertionError(f"no {cls}.{fn} in {path}")

    real = real_source() / "v1/engine/async_llm.py"
    fake = PACKAGE / "v1/engine/async_llm.py"
    for fn in ("generate", "from_engine_args", "abort"):
        assert params(fake, "AsyncLLM", fn) == params(real, "AsyncLLM", fn), fn
