"""Issue 28's cold and warm paths: a warm start trusts a file's last hash only while its stat
is unchanged (and the packed bytes must match it), and a file estimated over the per-file cap
is never tokenized whole."""

from __future__ import annotations

import os
import time

from m3agent.agent.context import SnapshotConfig, build_snapshot
from m3agent.agent.context.guard import SECRET_CONTENT, secret_in, secret_in_text
from m3agent.agent.context.scan import _DEFINES, KEYWORDS, bytes_per_token, defined_names
from m3agent.agent.context.store import RACY_NS, StatIndex


def _past_the_racy_window() -> None:
    """A stat is trusted by the next run only once its mtime and ctime are RACY_NS old."""
    time.sleep(RACY_NS / 1e9 + 0.2)


def _files(n: int) -> dict[str, str]:
    files = {"README.md": "# demo\n", "pkg/__init__.py": "from .core import run_core\n"}
    for i in range(n):
        files[f"pkg/mod{i}.py"] = (
            f"from .core import run_core\n\n\ndef step_{i}():\n    return run_core({i})\n"
        )
    files["pkg/core.py"] = "def run_core(x):\n    return x + 1\n"
    return files


def test_warm_start_sees_an_edit_that_keeps_size_and_mtime(make_repo, tokenizer, tmp_path):
    root = make_repo(_files(20))
    _past_the_racy_window()
    cfg = SnapshotConfig(budget_tokens=100_000, cache_dir=tmp_path / "cache")
    first = build_snapshot(root, tokenizer, cfg)
    assert "return x + 1" in first.text
    from m3agent.agent.context.snapshot import _rules_key

    assert "pkg/core.py" in StatIndex(cfg.cache_dir, root, _rules_key(cfg.rules)).known
    target = root / "pkg" / "core.py"
    st = target.stat()
    target.write_text("def run_core(x):\n    return x + 2\n")  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime: ctime still moves
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    second = build_snapshot(root, tokenizer, cfg)
    assert "return x + 2" in second.text and "return x + 1" not in second.text
    fresh = build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=100_000))
    assert second.text == fresh.text


def test_a_stale_hash_in_the_stat_index_restarts_with_every_file_read(
    make_repo, tokenizer, tmp_path
):
    root = make_repo(_files(10))
    _past_the_racy_window()
    cache = tmp_path / "cache"
    cfg = SnapshotConfig(budget_tokens=100_000, cache_dir=cache)
    build_snapshot(root, tokenizer, cfg)
    [stats_file] = list(cache.glob("stats-*.marshal"))
    from m3agent.agent.context.snapshot import _rules_key

    index = StatIndex(cache, root, _rules_key(cfg.rules))
    assert "pkg/core.py" in index.known
    # a hash that no longer matches the bytes under an unchanged stat (what a tool that
    # rewrites a file and restores its times would leave): the packed bytes disagree
    index.seen = {p: (k, b"\0" * 20) for p, (k, _) in index.known.items()}
    index.save()
    snap = build_snapshot(root, tokenizer, cfg)
    fresh = build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=100_000))
    assert snap.text == fresh.text
    assert stats_file.exists()


def test_a_file_estimated_over_the_cap_is_outlined_without_being_tokenized(make_repo, tokenizer):
    class Counting:
        """The real tokenizer, recording how many characters it was asked to encode."""

        def __init__(self, inner):
            self.inner, self.chars = inner, 0
            self.hf_tokenizer = inner.hf_tokenizer

        def encode_text_batch(self, texts):
            self.chars += sum(map(len, texts))
            return self.inner.encode_text_batch(texts)

    big = "".join(f"def huge_{i}(x):\n" + "    x = x * 3 + 1\n" * 40 for i in range(60))
    files = {"README.md": "# demo\n", "app/huge.py": big}
    files.update(
        {f"app/u{i}.py": f"from app.huge import huge_{i}\nhuge_{i}(2)\n" for i in range(40)}
    )
    files.update({f"lib/pad{i}.txt": "lorem ipsum dolor sit amet\n" * 400 for i in range(120)})
    root = make_repo(files)
    budget = 20_000  # the estimate (~700K) is over 300K and twice this: the estimated path
    counting = Counting(tokenizer)
    snap = build_snapshot(root, counting, SnapshotConfig(budget_tokens=budget))
    entry = next(f for f in snap.files if f.path == "app/huge.py")
    assert entry.status == "outline" and "about" in entry.reason
    assert 'outline="top-level symbols only; the file is about ' in snap.text
    assert "\n1: def huge_0(x):\n" in snap.text
    assert counting.chars < len(big)  # never encoded whole (nor everything else)
    assert snap.tokens <= budget


def test_the_lookahead_keeps_every_definition():
    import re

    plain = re.compile(rf"\n[ \t]*{KEYWORDS}|\n([A-Z][A-Z0-9_]{{2,}})\s*[:=]".encode())
    src = (
        b"def alpha(x):\n    pass\nclass Beta:\n    def gamma(self): ...\nasync def delta():\n"
        b"export default function epsilon() {}\npub(crate) fn zeta() {}\nstruct Eta {}\n"
        b"MAX_THETA = 3\nlet iota = 1\nmacro_rules! kappa {}\ntypedef int lambda_t;\n"
        b"impl Mu {}\n  interface Nu {}\nvar xi = 2\nobject Omicron\nrecord Pi()\n"
    )
    got = [m.groups() for m in _DEFINES.finditer(b"\n" + src)]
    assert got == [m.groups() for m in plain.finditer(b"\n" + src)]
    assert set(defined_names(src, True)) >= {b"alpha", b"Beta", b"gamma", b"delta", b"MAX_THETA"}


def test_secret_gate_per_pattern_matches_the_full_scan():
    samples = [
        "-----BEGIN RSA PRIVATE KEY-----\nabc\n",
        "tok = 'ghp_" + "a" * 36 + "'",
        "key AKIA" + "B" * 16 + " here",
        "aws_secret_access_key = " + "x" * 40,
        "AWS_SECRET_ACCESS_KEY: " + "y" * 40,
        "aws_\u017fecret_access_key = " + "z" * 40,
        "glpat-" + "c" * 22,
        "xoxb-" + "1" * 12,
        "https://hooks.slack.com/services/T" + "A" * 24,
        "sk-proj-" + "d" * 40,
        "hf_" + "e" * 34,
        "AIza" + "f" * 35,
        "sk_live_" + "g" * 24,
        "plain text without anything secret, sk and BEGIN as words",
        "é" + "ghp_" + "h" * 36,
    ]
    for text in samples:
        data = text.encode()
        words = b" " + b" ".join(sorted(set(data.translate(_word_bytes()).split()))) + b" "
        assert secret_in(text, words, data.isascii()) == secret_in_text(text), text
    assert len(SECRET_CONTENT) == 11


def _word_bytes() -> bytes:
    from m3agent.agent.context.scan import _WORD_BYTES

    return _WORD_BYTES


def test_token_estimates_per_kind():
    assert bytes_per_token("a/b.py") > bytes_per_token("a/b.h") > 1.5
    assert bytes_per_token("Makefile") == bytes_per_token("x.unknown") == 2.0
