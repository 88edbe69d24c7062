"""The disk tier (engine/native/kvstore) over the tiny paged model: a prefix written by one
engine is read back by a fresh one and gives the same tokens and logits; a truncated, corrupt,
foreign or half-written page is never used (recomputed, one line saying why); a full disk or a
read-only folder costs speed, never correctness; the budget evicts least recently used pages."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from m3agent.engine.native.core.cache_setup import WeightsId
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.llm_engine import LLMEngine
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.kvstore import disk as disk_mod
from m3agent.engine.native.kvstore import page_io
from m3agent.engine.native.kvstore.disk import DiskTier
from m3agent.engine.native.kvstore.folder import clear, iter_pages, summarize
from m3agent.engine.native.kvstore.identity import ModelIdentity
from m3agent.engine.native.kvstore.page_file import PageKey, checksum

GREEDY4 = native_params(max_tokens=4, ignore_eos=True)
PAGES = 2  # full pages of a 300-token prompt (the last token is always computed)
PAYLOAD = 4096


def prompt(n: int = 300, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 96, (n,), generator=g).tolist()


def engine(model, root: Path | None, budget: int = 1 << 30, name: str = "w0") -> LLMEngine:
    config = EngineConfig(
        max_num_batched_tokens=128,  # the cold side computes in chunks, the warm one at once
        num_gpu_blocks=40,
        keep_logits=True,
        kv_disk_dir=str(root) if root else None,
        kv_disk_bytes=budget,
    )
    return LLMEngine(model, None, config, weights=WeightsId(name, "tiny"))


def run(eng: LLMEngine, tokens: list[int]):
    (out,) = eng.generate([tokens], GREEDY4)
    logits = torch.stack(next(iter(eng.kept_logits.values())))
    eng.kept_logits.clear()
    eng.close()  # writes what is queued
    return out, logits


def pages(root: Path) -> list[Path]:
    return sorted(e.path for e in iter_pages(root))


_REFERENCE: dict[tuple[int, ...], tuple] = {}


@pytest.fixture
def baseline(make_model):
    """The model (its seeded weights) with its tokens and logits for the prompt without any
    disk tier (computed once per module)."""
    model = make_model()
    key = tuple(prompt())
    if key not in _REFERENCE:
        _REFERENCE[key] = run(engine(model, None), prompt())
    return model, *_REFERENCE[key]


def tier(root: Path, budget: int = 1 << 30) -> DiskTier:
    """A disk tier alone, for pages of 4 KiB of random bytes."""
    identity = ModelIdentity("w", "float32", "float32", 128, ((1, 8, 0),), "cpu", "1+x", "m")
    return DiskTier(root, identity, budget, PAYLOAD)


def key(i: int, parent: bytes | None = None) -> PageKey:
    return PageKey(bytes([i]) * 16, parent, bytes([i]) * 1024)


def page(i: int) -> list[torch.Tensor]:
    return [torch.full((PAYLOAD,), i, dtype=torch.uint8)]


def test_a_fresh_engine_reads_the_prefix_back_and_generates_the_same(baseline, tmp_path):
    model, ref, ref_logits = baseline
    cold, _ = run(engine(model, tmp_path), prompt())
    assert cold.token_ids == ref.token_ids and cold.num_restored_tokens == 0
    # Pages of the prompt and of the generated tokens that filled a block, each once.
    assert len(pages(tmp_path)) == PAGES

    calls = model.forward_calls
    warm_engine = engine(model, tmp_path)
    warm, warm_logits = run(warm_engine, prompt())
    assert warm.token_ids == ref.token_ids
    torch.testing.assert_close(warm_logits, ref_logits, rtol=1e-5, atol=1e-5)
    assert warm.num_cached_tokens == warm.num_restored_tokens == PAGES * 128
    assert model.forward_calls - calls == 4  # the tail at once, then 3 decodes: no recompute
    stats = warm_engine.page_tiers.tiers[0].stats
    assert (stats.restored, stats.saved, stats.rejected) == (PAGES, 0, 0)


def test_a_longer_prompt_restores_the_shared_pages_and_computes_the_rest(baseline, tmp_path):
    model, *_ = baseline
    run(engine(model, tmp_path), prompt())
    longer = prompt() + prompt(100, seed=5)
    ref, _ = run(engine(model, None), longer)
    out, _ = run(engine(model, tmp_path), longer)
    assert out.token_ids == ref.token_ids
    assert out.num_restored_tokens == PAGES * 128


def test_a_damaged_page_is_recomputed_with_one_line(baseline, tmp_path, caplog):
    model, ref, _ = baseline
    run(engine(model, tmp_path), prompt())
    second = _chain(tmp_path, prompt())[1]
    second.write_bytes(_flip(second.read_bytes(), -500))
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        out, _ = run(engine(model, tmp_path), prompt())
    assert out.token_ids == ref.token_ids
    assert out.num_restored_tokens == 128  # the page before the damaged one
    (line,) = [r.getMessage() for r in caplog.records]
    assert "checksum mismatch" in line and "recomputing" in line


DAMAGES = pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[:-100], "truncated"),
        (lambda b: b[:10], "truncated"),
        (lambda b: b"", "truncated"),
        (lambda b: b + b"x", "trailing bytes"),
        (lambda b: _flip(b, 3), "not a page file"),
        (lambda b: _flip(b, 20), "corrupt header"),
        (lambda b: _flip(b, len(b) - 1000), "checksum mismatch"),
        (lambda b: _flip(b, len(b) - 3), "checksum mismatch"),  # the checksum itself
        (lambda b: b[:-8] + b[-16:-8], "checksum mismatch"),
    ],
)


@DAMAGES
def test_every_damage_is_refused_and_the_file_removed(tmp_path, caplog, damage, reason):
    t = tier(tmp_path)
    t.put(key(1), page(1))
    t.flush()
    path = next(iter(pages(tmp_path)))
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        assert t.get(key(1)) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"({reason})" in line
    assert not path.exists() and t.stats.rejected == 1
    t.close()


def test_the_checksum_is_of_the_bytes_whatever_their_parts():
    block = torch.randn(2, 128, 16).to(torch.bfloat16).view(torch.uint8)
    flat = block.numpy().tobytes()
    want = checksum([b"head0123" + flat])
    assert checksum([b"head0123", block.numpy().data]) == want  # a block's view has 3 dims
    assert checksum([b"hea", b"d0123" + flat[:5], flat[5:]]) == want
    words = bytearray(flat)
    words[8:16], words[24:32] = flat[24:32], flat[8:16]  # two words swapped
    assert checksum([b"head0123", bytes(words)]) != want
    words = bytearray(flat)
    words[7] ^= 0x80  # a word's top bit
    assert checksum([b"head0123", bytes(words)]) != want


def test_a_page_naming_another_prefix_is_refused(tmp_path, caplog):
    t = tier(tmp_path)
    t.put(key(1), page(1))
    t.flush()
    assert bytes(t.get(key(1))) == bytes(page(1)[0].numpy())  # intact: used
    other_parent = PageKey(key(1).block_hash, b"p" * 16, key(1).token_bytes)
    other_tokens = PageKey(key(1).block_hash, None, bytes(1024))
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        assert t.get(other_parent) is None
    assert "names another prefix" in caplog.records[0].getMessage()
    t.put(key(1), page(1))
    t.flush()
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        assert t.get(other_tokens) is None
    assert "hash collision" in caplog.records[-1].getMessage()
    t.close()


def test_another_models_page_is_never_used(baseline, make_model, tmp_path, caplog):
    model, ref, _ = baseline
    other = make_model(seed=7)  # other weights: the same tokens have other K/V
    run(engine(other, tmp_path, name="other-weights"), prompt())
    # Same tokens, so same block hashes: copy its pages into this model's folder by hand.
    mine = engine(model, tmp_path)
    mine_dir = mine.page_tiers.tiers[0].dir
    for page in pages(tmp_path):
        target = mine_dir / "pages" / page.parent.name / page.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(page, target)
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        out, _ = run(mine, prompt())
    assert out.token_ids == ref.token_ids and out.num_restored_tokens == 0
    assert "another model or engine version" in caplog.records[0].getMessage()


def test_the_identity_names_weights_dtypes_layout_device_and_engine_version():
    base = ModelIdentity("w", "float32", "float32", 128, ((2, 8, 4),), "cpu", "1+abc", "m")
    changes = [
        {"weights": "w2"},
        {"model_dtype": "bfloat16"},
        {"cache_dtype": "float8_e4m3fn"},
        {"block_size": 64},
        {"layout": ((2, 8, 0),)},
        {"device": "cuda"},
        {"engine": "1+abd"},
    ]
    keys = {ModelIdentity(**{**_fields(base), **c}).key for c in changes}
    assert len(keys) == len(changes) and base.key not in keys
    assert ModelIdentity(**{**_fields(base), "name": "other label"}).key == base.key


def test_a_writer_killed_mid_write_leaves_nothing_that_is_read(tmp_path):
    t = tier(tmp_path)
    t.put(key(1), page(1))
    t.flush()
    t.close()
    (first,) = pages(tmp_path)
    # What kill -9 leaves: a temporary file beside the page (never renamed), and no page.
    data = first.read_bytes()
    leftover = first.with_name(f".{first.name}.999999.dead.tmp")
    leftover.write_bytes(data[: len(data) // 2])
    old = time.time() - 3600
    os.utime(leftover, (old, old))
    first.unlink()
    fresh = tier(tmp_path)
    assert not leftover.exists()  # the next tier's scan removed it
    assert fresh.get(key(1)) is None and fresh.stats.rejected == 0  # a plain miss
    fresh.close()


def failing(code: int):
    def write(fd: int, data) -> int:
        raise OSError(code, os.strerror(code))

    return write


def test_a_full_disk_costs_speed_only(baseline, tmp_path, monkeypatch, caplog):
    model, ref, _ = baseline
    failing_write = failing(errno.ENOSPC)

    monkeypatch.setattr(page_io, "_os_write", failing_write)
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        out, _ = run(engine(model, tmp_path), prompt())
    assert out.token_ids == ref.token_ids
    assert pages(tmp_path) == []
    assert not list(tmp_path.rglob("*.tmp"))  # every half-written file removed
    assert len(caplog.records) == 1  # said once, not per page
    assert "disk full" in caplog.records[0].getMessage()
    monkeypatch.undo()
    run(engine(model, tmp_path), prompt())  # room again: written
    assert len(pages(tmp_path)) == PAGES


def test_a_read_only_folder_stops_writing_and_still_reads(tmp_path, monkeypatch, caplog):
    t = tier(tmp_path)
    t.put(key(1), page(1))
    t.flush()
    monkeypatch.setattr(page_io, "_os_write", failing(errno.EROFS))
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        t.put(key(2, key(1).block_hash), page(2))
        t.flush()
        assert not t.writable and not t.put(key(3), page(3))  # no more tries
    assert len(caplog.records) == 1 and "not writable" in caplog.records[0].getMessage()
    assert t.get(key(1)) is not None  # reading goes on
    assert len(pages(tmp_path)) == 1 and not list(tmp_path.rglob("*.tmp"))
    t.close()


def test_the_budget_evicts_the_least_recently_used_pages(tmp_path):
    t = tier(tmp_path)
    for i in range(4):
        t.put(key(i), page(i))
    t.flush()
    t.close()
    size = pages(tmp_path)[0].stat().st_size
    for age, p in enumerate(sorted(pages(tmp_path), key=lambda p: p.name), start=1):
        os.utime(p, (time.time() - 1000 * age, time.time() - 1000 * age))
    small = tier(tmp_path, budget=5 * size + size // 2)
    assert small.get(key(3)) is not None  # the oldest, read now: the most recently used
    for i in (10, 11):
        small.put(key(i), page(i))
    small.flush()
    left = {p.stem for p in pages(tmp_path)}
    assert sum(p.stat().st_size for p in pages(tmp_path)) <= 5 * size + size // 2
    assert {key(i).name for i in (3, 10, 11)} <= left and len(left) < 6
    assert small.stats.evicted >= 1
    small.close()


def test_cache_summary_and_clear(tmp_path):
    t = tier(tmp_path)
    for i in range(3):
        t.put(key(i), page(i))
    t.flush()
    (m,) = summarize(tmp_path)
    assert (m.name, m.pages) == ("m", 3)
    assert m.bytes == sum(p.stat().st_size for p in pages(tmp_path))
    assert m.detail["device"] == "cpu" and m.detail["cache_dtype"] == "float32"
    with pytest.raises(ValueError, match="keeps nothing"):
        clear(tmp_path, "nope")
    assert clear(tmp_path, m.key[:8]) == (3, m.bytes)
    assert summarize(tmp_path) == []
    t.close()


# ---- helpers --------------------------------------------------------------------------------


def _flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x40
    return bytes(b)


def _fields(identity: ModelIdentity) -> dict:
    return {f: getattr(identity, f) for f in identity.__slots__}


def _chain(root: Path, tokens: list[int]) -> list[Path]:
    """The page files of the prompt's full blocks, in order (named by their chained hashes)."""
    from m3agent.engine.native.core.block_hash import extend_block_hashes

    hashes: list[bytes] = []
    extend_block_hashes(hashes, tokens[: (len(tokens) - 1) // 128 * 128], 128)
    by_name = {p.stem: p for p in pages(root)}
    return [by_name[h.hex()] for h in hashes]


def test_pages_read_ahead_come_in_order_and_a_change_of_order_reads_directly(tmp_path):
    t = tier(tmp_path)
    chain = [key(1)] + [key(i, key(i - 1).block_hash) for i in range(2, 6)]
    for i, k in enumerate(chain, start=1):
        t.put(k, page(i))
    t.flush()
    t.prefetch(chain[1:])
    assert bytes(t.get(chain[1]))[:1] == b"\x02" and bytes(t.get(chain[2]))[:1] == b"\x03"
    assert bytes(t.get(chain[4]))[:1] == b"\x05"  # out of order: read directly, ahead stopped
    assert t._ahead is None
    t.prefetch(chain)
    t.prefetch(())  # stopped before anything was taken: nothing left behind
    assert t._ahead is None and t.stats.rejected == 0
    t.close()


def test_a_page_another_user_wrote_in_a_shared_folder_is_never_used(tmp_path, caplog):
    """Issue 36, round 5: the folder may be shared (docs/kv-cache.md), and a page is checked
    against damage, not forgery: another user who writes a page under a prefix's name (the
    system prompt's hash is no secret) with K/V of their choosing steers the model. Only this
    user's pages are read. Control: the same bytes owned by this user are used."""
    t = tier(tmp_path)
    t.put(key(1), page(7))  # the forger's payload under the prefix's name
    t.flush()
    (path,) = pages(tmp_path)
    os.chown(path, 4242, 4242)  # written by uid 4242 (this test runs as root in CI)
    with caplog.at_level(logging.WARNING, logger=disk_mod.__name__):
        assert t.get(key(1)) is None
    assert "(written by another user)" in caplog.records[0].getMessage()
    assert path.exists()  # not ours to delete
    os.chown(path, os.geteuid(), os.getegid())  # control
    assert bytes(t.get(key(1))) == bytes(page(7)[0].numpy())
    t.close()


def test_a_planted_shard_link_receives_no_page_and_loses_no_file(tmp_path):
    """A shared folder's `pages/01 -> ~/somewhere`: pages were written there, and eviction
    or the stale-temp sweep deleted what it found there. Nothing is written through the
    link, nothing behind it is listed (so never deleted). Control: a real shard is."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.kvp").write_bytes(b"x")
    t = tier(tmp_path / "kv")
    shard = t.dir / "pages" / key(1).name[:2]
    shard.parent.mkdir(parents=True, exist_ok=True)
    shard.symlink_to(victim)
    t.put(key(1), page(1))
    t.flush()
    assert sorted(p.name for p in victim.iterdir()) == ["keep.kvp"]
    assert pages(tmp_path / "kv") == []
    t.close()
    shard.unlink()  # control: a real shard holding the same file is listed
    shard.mkdir()
    (shard / "keep.kvp").write_bytes(b"x")
    assert [p.name for p in pages(tmp_path / "kv")] == ["keep.kvp"]
