"""How long the installed `m3agent` console script takes to do small things, as a user runs
it: `--help`, a usage error, `sessions`, a scripted `run` to its answer, `cache`, and the
import of the TUI (its first frame waits on that). Median of N runs each, wall time, in a
fresh M3AGENT_HOME.

    python bench/startup.py [--runs 7] [--json FILE] [--label after] [--compare OLD_CHECKOUT]

--compare: the same cases with an older checkout's m3agent first on the path (PYTHONPATH, so
the same console script and packages run its code), the two interleaved run by run.

Issue 40 moved app/'s imports to the top of the modules that use them; the root command
builds a sub-command only when it runs, so this is what that did to start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _wall(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, timeout=120, check=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", type=Path, help="write the result here too")
    ap.add_argument("--label", default="run")
    ap.add_argument("--compare", type=Path, help="an older checkout to time beside this one")
    args = ap.parse_args()
    exe = shutil.which("m3agent") or str(Path(sys.executable).parent / "m3agent")
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(["Done."]))
        env = {**os.environ, "M3AGENT_HOME": str(home), "HOME": str(home)}
        cases = {
            "--help": [exe, "--help"],
            "usage error": [exe, "run", "--nope"],
            "sessions": [exe, "sessions"],
            "run scripted": [exe, "run", "-e", "scripted", "--script", str(script), "hi"],
            "cache": [exe, "cache"],
            "tui import": [
                sys.executable,
                "-c",
                "import m3agent.app.tui.launch, m3agent.app.tui.run",
            ],
        }
        result: dict[str, object] = {"bench": "startup", "label": args.label, "runs": args.runs}
        envs = {"this": env}
        if args.compare is not None:
            shim = Path(tmp) / "compare"
            shim.mkdir()
            (shim / "m3agent").symlink_to(args.compare.resolve())
            envs["compare"] = {**env, "PYTHONPATH": str(shim)}
            result["compare"] = str(args.compare)
        for name, cmd in cases.items():
            times: dict[str, list[float]] = {k: [] for k in envs}
            for e in envs.values():
                _wall(cmd, e, work)  # warm the file cache
            for _ in range(args.runs):
                for k, e in envs.items():  # interleaved: drift hits both alike
                    times[k].append(_wall(cmd, e, work))
            medians = {k: round(statistics.median(v), 3) for k, v in times.items()}
            result[name] = medians
            print(f"{name:14s} " + "  ".join(f"{k} {v:.3f} s" for k, v in medians.items()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
