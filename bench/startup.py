"""How long the installed `m3agent` console script takes to do small things, as a user runs
it: `--help`, a usage error, `sessions`, a scripted `run` to its answer, `cache`, and the
import of the TUI (its first frame waits on that). Median of N runs each, wall time, in a
fresh M3AGENT_HOME.

    python bench/startup.py [--runs 7] [--json bench/results/startup_cpu.json] [--label after]

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
        for name, cmd in cases.items():
            _wall(cmd, env, work)  # warm the file cache
            times = [_wall(cmd, env, work) for _ in range(args.runs)]
            result[name] = round(statistics.median(times), 3)
            print(f"{name:14s} {result[name]:.3f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
