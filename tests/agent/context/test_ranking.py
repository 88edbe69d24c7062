"""Ranking like a repo map: pinned essentials, value per token, a per-file cap, down-weighted
bulk, exactly reproducible scores; `m3agent context` with the session's real window."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from m3agent.agent.context import SnapshotConfig, build_snapshot
from m3agent.agent.context.outline import outline
from m3agent.agent.context.rank import is_pinned, kind, rank_scores
from m3agent.agent.context.select import file_cap, select

from ...support.cli import run_cli
from ...support.models_server import models_server as serve_models


def status(snap):
    return {f.path: f.status for f in snap.files}


def _module(name: str, n_defs: int) -> str:
    return "".join(f"def {name}_fn{i}(x):\n    return x + {i}\n\n" for i in range(n_defs))


def _repo_files() -> dict[str, str]:
    """A library whose big test module mentions every symbol many times (the trap: by raw
    references it would rank first), README translations, fixtures, and the essentials."""
    files = {
        "README.md": "# widgets\nA library of widgets.\n",
        "pyproject.toml": '[project]\nname = "widgets"\nversion = "1.0"\n',
        "widgets/__init__.py": "from widgets.core import make_widget\n",
        "widgets/core.py": _module("core", 30) + "def make_widget():\n    return 1\n",
        "widgets/util.py": _module("util", 30),
    }
    calls = "".join(f"    core_fn{i}(1)\n    util_fn{i}(2)\n" for i in range(30))
    files["tests/test_everything.py"] = "".join(
        f"def test_case_{k}():\n{calls}\n" for k in range(40)
    )
    for lang in ("zh-CN", "ja", "de", "fr", "es", "pt-br", "ru", "ko"):
        files[f"README.{lang}.md"] = "# widgets\n" + "Une bibliothèque de widgets.\n" * 400
    files["tests/fixtures/big_case.py"] = "core_fn1(1)\n" * 3000
    return files


def test_kinds_and_pins():
    table = {
        "README.md": ("source", True),
        "README.zh-CN.md": ("translation", False),
        "docs/ja/guide.md": ("translation", False),
        "locale/fr/LC_MESSAGES/app.po": ("translation", False),
        "pyproject.toml": ("source", True),
        "package.json": ("source", True),
        "docs/requirements.txt": ("docs", False),
        "docs/api.rst": ("docs", False),
        "docs/README.md": ("source", True),
        "src/rich/__init__.py": ("source", True),
        "numpy/__init__.py": ("source", True),
        "numpy/core/__init__.py": ("source", True),  # sub-packages' entry points (issue 22.9)
        "src/rich/sub/__init__.py": ("source", True),
        "numpy/core/deep/__init__.py": ("source", False),
        "src/lib.rs": ("source", True),
        "cmd/tool/main.go": ("source", True),
        "AGENTS.md": ("source", True),
        "tests/test_x.py": ("test", False),
        "numpy/core/tests/test_umath.py": ("test", False),
        "pkg/x_test.go": ("test", False),
        "web/a.spec.ts": ("test", False),
        "tests/fixtures/case.py": ("fixture", False),
        "testdata/in.txt": ("fixture", False),
        "data/table.json": ("data", False),
        "schemas/big.json": ("data", False),
        "src/widgets/core.py": ("source", False),
    }
    assert {p: (kind(p), is_pinned(p)) for p in table} == table


def test_scores_are_value_per_token_times_kind():
    a = "def shared_helper():\n    return 1\n"
    users = {f"u{i}.py": "shared_helper()\nother_helper()\n" for i in range(5)}
    texts = {"small.py": a, "big.py": a.replace("shared", "other") + "# pad\n" * 2000, **users}
    s = rank_scores(texts)
    assert s["small.py"] > s["big.py"] > 0  # same references, far more tokens
    moved = {("tests/small.py" if p == "small.py" else p): t for p, t in texts.items()}
    as_test = rank_scores(moved)
    assert as_test["tests/small.py"] == pytest.approx(s["small.py"] * 0.3)


def test_scores_exactly_reproducible_across_hash_seeds(tmp_path):
    texts = {p: t for p, t in _repo_files().items() if p.endswith(".py")}
    src = tmp_path / "texts.json"
    src.write_text(json.dumps(texts))
    code = (
        "import json,sys; from m3agent.agent.context.rank import rank_scores; "
        f"t = json.load(open({str(src)!r})); "
        "print(json.dumps({p: repr(v) for p, v in rank_scores(t).items()}, sort_keys=True))"
    )
    outs = set()
    for seed in ("0", "1", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr
        outs.add(r.stdout)
    assert len(outs) == 1


def test_per_file_cap():
    assert file_cap(163_840) == 16_384 and file_cap(5_000) == 2048  # 10%, with a floor
    ranked = [0, 1, 2]
    inc, _ = select(ranked, [20_000, 3_000, 3_000], [5, 5, 5], 100_000)
    assert inc == {1, 2}  # the first-ranked file is over 10% of the room: never whole
    inc, _ = select(ranked, [20_000, 3_000, 3_000], [5, 5, 5], 100_000, cap=50_000)
    assert inc == {0, 1, 2}


def test_snapshot_pins_essentials_and_downweights_bulk(make_repo, tokenizer):
    root = make_repo(_repo_files())
    full = build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=10**7))
    assert full.tokens > 30_000
    snap = build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=full.tokens // 3))
    st = status(snap)
    for p in (
        "README.md",
        "pyproject.toml",
        "widgets/__init__.py",
        "widgets/core.py",
        "widgets/util.py",
    ):
        assert st[p] == "included", p
    assert st["tests/test_everything.py"] != "included"  # referenced a lot, but bulk
    score = {f.path: f.score for f in snap.files if f.status in ("included", "outline", "listed")}
    bulk = [p for p in score if kind(p) != "source"]
    assert len(bulk) == 10  # 8 translations, the test module, the fixture
    assert min(score[p] for p in ("widgets/core.py", "widgets/util.py")) > max(
        score[p] for p in bulk
    )
    assert min(score[p] for p in score if is_pinned(p)) > max(
        score[p] for p in score if not is_pinned(p)
    )
    included = [f for f in snap.files if f.status == "included"]
    assert max(f.tokens for f in included) <= file_cap(snap.budget_tokens)


def test_file_over_the_cap_appears_as_its_outline(make_repo, tokenizer):
    body = "".join(
        f"def big_fn{i}(x):\n" + "    x += 1\n" * 30 + "    return x\n\n" for i in range(60)
    )
    files = {"README.md": "# app\n", "app/engine.py": body}
    files.update(
        {f"app/m{i}.py": f"from app.engine import big_fn{i}\nbig_fn{i}(1)\n" for i in range(20)}
    )
    root = make_repo(files)
    full = build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=10**7))
    engine_tokens = next(f.tokens for f in full.files if f.path == "app/engine.py")
    budget = full.tokens - 50  # just over budget: ranking applies, and the cap
    assert budget < full.tokens and engine_tokens > file_cap(budget)
    snap = build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=budget))
    entry = next(f for f in snap.files if f.path == "app/engine.py")
    assert entry.status == "outline" and entry.tokens <= file_cap(budget)
    assert str(engine_tokens) in entry.reason
    assert (
        f'<file path="app/engine.py" outline="top-level symbols only; the file is {engine_tokens} tokens">'
        in snap.text
    )
    assert "\n1: def big_fn0(x):\n" in snap.text and "def big_fn59(x):\n" in snap.text
    assert "x += 1" not in snap.text
    assert all(status(snap)[f"app/m{i}.py"] == "included" for i in range(20))
    assert snap.tokens <= budget and snap.summary()["files_outlined"] == 1
    # the accounting is the sum of the pieces' counts; the text as a whole counts about the same
    assert abs(snap.tokens - len(tokenizer.encode_text(snap.text))) < 64


def test_outline_lists_top_level_symbols_and_class_members():
    text = (
        "import os\n\nMAX_SIZE = 10\n\nclass Widget:\n    def method(self):\n"
        "        def local(): pass\n        pass\n\n    @property\n    def size(self):\n"
        "        return 1\n\ndef make_widget(size):\n    def inner():\n        pass\n"
        "    return Widget()\nasync def fetch():\n    pass\n"
    )
    assert outline(text) == (
        "3: MAX_SIZE = 10\n5: class Widget:\n6:     def method(self):\n11:     def size(self):\n"
        "14: def make_widget(size):\n18: async def fetch():\n"
    )
    assert outline("x = 1\n") == ""


# ---- m3agent context: the session's real window, listed files' real size -----------------


@pytest.fixture
def models_server():
    model = {"id": "MiniMaxAI/MiniMax-M3", "object": "model", "max_model_len": 163_840}
    with serve_models([model]) as url:
        yield url + "/v1"


def test_context_uses_the_remote_servers_window(make_repo, tmp_path, models_server):
    repo = make_repo({"main.py": "def main():\n    pass\n"})
    r = run_cli(tmp_path / "home", "context", "--json", "--cwd", str(repo), "--engine", "remote",
            "--base-url", models_server)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["window_tokens"] == 163_840 and models_server in d["window_source"]
    assert d["budget_tokens"] == 163_840 - 32_768


def test_context_window_of_a_tiny_native_model_and_real_sizes(make_repo, tmp_path):
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    model = init_tiny(
        tmp_path / "tiny", TinySpec(layers=2, hidden=64, heads=2, kv_heads=1, experts=2)
    )
    repo = make_repo({"main.py": "def main():\n    pass\n", "big.py": "x = 1\n" * 4000})
    r = run_cli(tmp_path / "home", "context", "--json", "--cwd", str(repo), "--engine", "native",
            "--model", str(model), "--budget", "300")  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    # what LLMEngine gives this model on CPU: the 512 MiB KV budget, in 128-token pages
    per_token = 2 * (1 * 2 * 128) + 128  # 2 layers x (K+V) + one MSA layer's index key
    expected = min(524_288, (512 * 2**20 // (per_token * 128 * 4) - 1) * 128)
    assert d["window_tokens"] == expected and "CPU" in d["window_source"]
    big = next(f for f in d["files"] if f["path"] == "big.py")
    assert big["status"] == "listed" and big["size_bytes"] == 24_000
    text = run_cli(tmp_path / "home", "context", "--files", "--cwd", str(repo), "--budget", "300")
    assert text.returncode == 0, text.stderr
    assert "23.4 KB  big.py" in text.stdout
