"""Issue 28: `m3agent context --json` on git trees built from this machine's installed packages.

Builds (once, under --trees) git repositories from real source trees: `torch` (the installed
torch package) and `site` (the stdlib plus installed site-packages, up to ~29K files). For each
tree it times, in the same run:

- the floor: `git ls-files` + read + SHA-1 of every listed file (what any snapshot must pay);
- a cold run: `m3agent context --json` with an empty M3AGENT_HOME (no caches);
- warm runs: the same command again with that home (caches filled by the cold run);

each as a real subprocess, wall time, user + sys CPU seconds and max RSS (wait4), repeated;
best and median reported, each run with the 1-minute load average when it started (on a
shared machine wall time stretches with the load; CPU seconds are what to compare).
It also records what was packed (tokens, files included / outlined / listed, the content hash)
and every file refused as holding a secret, with the line that matched, so false positives on
real trees can be read. `--legacy-root DIR` runs an older checkout the same way (PYTHONPATH
onto a folder `m3agent/` of symlinks to its top-level packages) and compares what it packs.

    python bench/context_scale.py --tree torch --tree site --repeat 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scheduling import realtime, scheduler  # noqa: E402

# Binaries that would only make `git add` slow (the snapshot skips them by extension anyway).
_SKIP_SUFFIXES = (".so", ".pyc", ".a", ".dylib", ".o")
_PREFERRED = ("torch", "numpy", "transformers", "textual", "rich", "markdown_it", "scipy")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _wanted(p: Path) -> bool:
    name = p.name
    if "__pycache__" in p.parts or ".so." in name or name.endswith(_SKIP_SUFFIXES):
        return False
    try:
        st = p.stat()
    except OSError:
        return False
    return p.is_file() and not p.is_symlink() and st.st_size <= 20 * 2**20


def _files_under(src: Path) -> list[Path]:
    if src.is_file():
        return [src] if _wanted(src) else []
    return sorted(p for p in src.rglob("*") if _wanted(p))


def _site_dir() -> Path:
    """The site-packages that holds torch (a venv's own may hold only pip)."""
    import torch

    return Path(torch.__file__).parent.parent


def _site_sources(max_files: int) -> list[tuple[str, list[Path]]]:
    """The stdlib, then the preferred packages, then the rest alphabetically, while under
    max_files; each as (destination prefix, files)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = _site_dir()
    out = [("stdlib", [p for p in _files_under(stdlib) if "site-packages" not in p.parts])]
    total = len(out[0][1])
    names = [n for n in _PREFERRED if (site / n).exists()]
    names += sorted(n.name for n in site.iterdir() if n.name not in _PREFERRED)
    for n in names:
        if n.endswith((".dist-info", ".libs", ".pth")) or n == "__pycache__":
            continue
        files = _files_under(site / n)
        if files and total + len(files) <= max_files:
            out.append((f"site/{n}", files))
            total += len(files)
    return out


def _git(root: Path, *args: str) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(root), **_GIT_ENV}
    subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)


def build_tree(name: str, trees: Path, max_files: int) -> Path:
    root = trees / name
    if (root / ".git").is_dir() and (root / ".built").is_file():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    if name == "torch":
        import torch

        src = Path(torch.__file__).parent
        sources = [("torch", _files_under(src))]
        base = {"torch": src}
    else:
        sources = _site_sources(max_files)
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        site = _site_dir()
        base = {k: (stdlib if k == "stdlib" else site / k.split("/", 1)[1]) for k, _ in sources}
    for prefix, files in sources:
        for f in files:
            rel = f.relative_to(base[prefix]) if base[prefix].is_dir() else Path(f.name)
            dest = root / prefix / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)  # a copy, not a hard link: the snapshot refuses those
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "tree")
    (root / ".git" / "info" / "exclude").write_text(".built\n")
    (root / ".built").write_text("ok\n")
    return root


def _cpu_self() -> float:
    """This process's CPU seconds and its waited-for children's (git)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def floor(root: Path) -> dict:
    """list + read + hash of every listed file: the least any snapshot pays."""
    load = _load()
    c0 = _cpu_self()
    t0 = time.perf_counter()
    r = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    paths = [p for p in r.stdout.decode().split("\0") if p]
    n_bytes = 0
    for p in paths:
        try:
            data = (root / p).read_bytes()
        except OSError:
            continue
        n_bytes += len(data)
        hashlib.sha1(data).digest()
    return {
        "files": len(paths),
        "mb": round(n_bytes / 1e6, 1),
        "s": round(time.perf_counter() - t0, 3),
        # this process's CPU plus git's (a waited-for child)
        "cpu_s": round(_cpu_self() - c0, 3),
        "load_1m": load,
    }


def _command(legacy: Path | None, root: Path, quiet: bool) -> tuple[list[str], dict]:
    env = dict(os.environ)
    env.pop("M3AGENT_CONFIG", None)
    if legacy is None:
        cmd = [str(Path(sys.executable).with_name("m3agent")), "context", "--json"]
        cmd += ["--quiet"] if quiet else []
    else:
        shim = Path(tempfile.gettempdir()) / f"m3agent-legacy-{legacy.name}"
        (shim / "m3agent").mkdir(parents=True, exist_ok=True)
        for pkg in ("app", "engine", "agent", "tools"):
            link = shim / "m3agent" / pkg
            if not link.exists():
                link.symlink_to(legacy / pkg)
        (shim / "m3agent" / "__init__.py").touch()
        env["PYTHONPATH"] = str(shim)
        cmd = [sys.executable, "-m", "m3agent.app.cli", "context", "--json"]
    return cmd + ["--cwd", str(root)], env


def run_once(cmd: list[str], env: dict, home: Path) -> dict:
    env = {**env, "M3AGENT_HOME": str(home)}
    load = _load()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd} failed: {stderr[-2000:]}")
    return {
        "s": wall,
        # user + sys of the command and the scan workers it waited for: what a run costs
        # whatever else loads the machine (wall time stretches with the load average)
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "load_1m": load,
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "report": json.loads(stdout),
        "stderr_lines": len(stderr.splitlines()),
    }


def _secret_hits(root: Path, report: dict) -> list[dict]:
    """Files refused for secret-shaped content, with the matching line (to judge them)."""
    from m3agent.agent.context.guard import SECRET_CONTENT

    hits = []
    for f in report["files"]:
        if not f["reason"].startswith("secret (the content"):
            continue
        text = (root / f["path"]).read_text(errors="replace")
        line = next(
            (
                ln.strip()[:200]
                for ln in text.splitlines()
                for _, rx in SECRET_CONTENT
                if rx.search(ln)
            ),
            "",
        )
        hits.append({"path": f["path"], "reason": f["reason"], "line": line})
    return hits


def _packed(report: dict) -> dict:
    by = {
        s: [f["path"] for f in report["files"] if f["status"] == s] for s in ("included", "outline")
    }
    return {
        "tokens": report["tokens"],
        "files_included": report["files_included"],
        "files_outlined": report["files_outlined"],
        "files_listed": report["files_listed"],
        "files_skipped": report["files_skipped"],
        "content_hash": report["content_hash"],
        "sets": by,
    }


def _stats(xs: list[float]) -> dict:
    return {
        "best": round(min(xs), 2),
        "median": round(statistics.median(xs), 2),
        "all": [round(x, 2) for x in xs],
    }


def measure(root: Path, legacy: Path | None, repeat: int, warm_repeat: int) -> dict:
    cmd, env = _command(legacy, root, quiet=False)
    colds, warms, rss_cold, rss_warm = [], [], [], []
    cold_cpu, warm_cpu, cold_load, warm_load = [], [], [], []
    last = None
    stderr_lines = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as home:
            r = run_once(cmd, env, Path(home))
            colds.append(r["s"])
            cold_cpu.append(r["cpu_s"])
            cold_load.append(r["load_1m"])
            rss_cold.append(r["max_rss_mb"])
            stderr_lines = r["stderr_lines"]
            for _ in range(warm_repeat):
                w = run_once(cmd, env, Path(home))
                warms.append(w["s"])
                warm_cpu.append(w["cpu_s"])
                warm_load.append(w["load_1m"])
                rss_warm.append(w["max_rss_mb"])
                if w["report"]["content_hash"] != r["report"]["content_hash"]:
                    raise RuntimeError("a warm run packed different bytes than the cold run")
            last = r["report"]
    assert last is not None
    return {
        "cold_s": _stats(colds),
        "warm_s": _stats(warms),
        "cold_cpu_s": _stats(cold_cpu),
        "warm_cpu_s": _stats(warm_cpu),
        "cold_load_1m": cold_load,
        "warm_load_1m": warm_load,
        "max_rss_cold_mb": max(rss_cold),
        "max_rss_warm_mb": max(rss_warm),
        "stderr_lines_cold": stderr_lines,
        "build_time_s_in_report": last["build_time_s"],
        "packed": _packed(last),
        "secret_refusals": _secret_hits(root, last),
    }


def compare(new: dict, old: dict) -> dict:
    a = set(new["sets"]["included"]) | set(new["sets"]["outline"])
    b = set(old["sets"]["included"]) | set(old["sets"]["outline"])
    return {
        "tokens_new": new["tokens"],
        "tokens_old": old["tokens"],
        "shown_both": len(a & b),
        "shown_only_new": len(a - b),
        "shown_only_old": len(b - a),
        "jaccard": round(len(a & b) / max(1, len(a | b)), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--tree", action="append", choices=("torch", "site"), default=None)
    ap.add_argument("--trees", type=Path, default=Path(tempfile.gettempdir()) / "m3agent-scale")
    ap.add_argument("--max-files", type=int, default=29_300)
    ap.add_argument("--repeat", type=int, default=2, help="cold runs (each with a fresh home)")
    ap.add_argument("--warm-repeat", type=int, default=2, help="warm runs after each cold one")
    ap.add_argument("--legacy-root", type=Path, default=None, help="an older checkout to compare")
    ap.add_argument("--legacy-repeat", type=int, default=1)
    ap.add_argument("--legacy-only", action="store_true", help="measure only --legacy-root")
    ap.add_argument("--compare-with", type=Path, default=None, help="an earlier result's JSON")
    ap.add_argument(
        "--realtime",
        action="store_true",
        help="run (with every m3agent it starts) under SCHED_FIFO: a shared machine's other "
        "processes stop disturbing the wall times (root or CAP_SYS_NICE; recorded in the JSON)",
    )
    ap.add_argument("--out", type=Path, default=Path("bench/results/context_scale.json"))
    args = ap.parse_args()
    if args.realtime:
        realtime()
    rows = []
    for name in args.tree or ["torch", "site"]:
        t0 = time.perf_counter()
        root = build_tree(name, args.trees, args.max_files)
        row = {"tree": name, "build_tree_s": round(time.perf_counter() - t0, 1)}
        row["floor"] = [floor(root) for _ in range(args.repeat)]
        if not args.legacy_only:
            row["new"] = measure(root, None, args.repeat, args.warm_repeat)
        if args.legacy_root is not None:
            row["legacy"] = measure(root, args.legacy_root.resolve(), args.legacy_repeat, 1)
        if "new" in row and "legacy" in row:
            row["packed_vs_legacy"] = compare(row["new"]["packed"], row["legacy"]["packed"])
        if args.compare_with is not None:
            earlier = json.loads(args.compare_with.read_text())
            for old in earlier["rows"]:
                side = old.get("legacy") or old["new"]
                if old["tree"] == name and "new" in row:
                    keys = ("cold_s", "warm_s", "cold_cpu_s", "warm_cpu_s", "max_rss_cold_mb")
                    row["earlier"] = {k: side[k] for k in keys if k in side}
                    row["packed_vs_earlier"] = compare(row["new"]["packed"], side["packed"])
        print(json.dumps({k: v for k, v in row.items() if k not in ("new", "legacy")}), flush=True)
        for key in ("new", "legacy"):
            if key in row:
                m = row[key]
                print(
                    f"{name} {key}: cold {m['cold_s']} s (cpu {m['cold_cpu_s']}, load "
                    f"{m['cold_load_1m']}) warm {m['warm_s']} s (cpu {m['warm_cpu_s']}, load "
                    f"{m['warm_load_1m']}) rss {m['max_rss_cold_mb']} MB",
                    flush=True,
                )
        rows.append(row)
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "scheduler": scheduler(),
        "note": "cpu_s = user + sys of the run (children included); load_1m = the 1-minute "
        "load average when the run started (2 cores shared with other processes)",
        "python": sys.version.split()[0],
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
