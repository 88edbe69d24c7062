"""What bench/one_gpu_product.py measures besides the console script's own output: GPU and
server memory sampled, a cold disk read, a git repository of real source, one TUI turn in a
real terminal (tests/app/tui/tmux_driver.py's private tmux server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

GB = 1e9
_SOURCE_TOPS = ("engine", "agent", "tools", "app", "docs", "tests")


def say(msg: str) -> None:
    print(f"[product] {msg}", file=sys.stderr, flush=True)


class Peaks:
    """GPU memory used (nvidia-smi) and the serve process's resident memory, sampled."""

    def __init__(self, cuda: bool) -> None:
        self.cuda, self.gpu_mib, self.rss_kib = cuda, 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _gpu(self) -> int:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=5,
            ).stdout  # fmt: skip
            return int(out.split()[0])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return 0

    def _rss(self) -> int:
        best = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"serve" not in cmd or b"m3agent" not in cmd:
                    continue
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        best = max(best, int(line.split()[1]))
            except OSError:
                continue
        return best

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            if self.cuda:
                self.gpu_mib = max(self.gpu_mib, self._gpu())
            self.rss_kib = max(self.rss_kib, self._rss())

    def take(self) -> dict:
        out = {
            "gpu_peak_gib": round(self.gpu_mib / 1024, 2),
            "serve_rss_peak_gib": round(self.rss_kib / 2**20, 2),
        }
        self.gpu_mib, self.rss_kib = 0, 0
        return out

    def stop(self) -> None:
        self._stop.set()


def read_cold(path: Path) -> tuple[float, bool]:
    """GB/s reading `path` once, and whether the page cache could be dropped first."""
    dropped = True
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        dropped = False
    t0, n = time.perf_counter(), 0
    with path.open("rb", buffering=0) as f:
        buf = bytearray(64 << 20)
        while k := f.readinto(buf):
            n += k
    return n / (time.perf_counter() - t0) / GB, dropped


def source_repo(root: Path, dest: Path, chars: int) -> tuple[int, int]:
    """A committed git repository of `root`'s .py and .md files (copied again under copyN/
    until they hold `chars` characters); returns (characters, .py files)."""
    dest.mkdir(parents=True, exist_ok=True)
    sources = [
        f
        for top in _SOURCE_TOPS
        for f in sorted((root / top).rglob("*"))
        if f.suffix in (".py", ".md") and f.is_file() and "__pycache__" not in f.parts
    ]
    have, copy = 0, 0
    while have < chars:
        for f in sources:
            if have >= chars:
                break
            target = dest / (f"copy{copy}" if copy else "") / f.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = f.read_text(errors="replace")
            target.write_text(text)
            have += len(text)
        copy += 1
    git = ["git", "-c", "user.email=b@example.com", "-c", "user.name=bench"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "source"]):
        subprocess.run([*git, *args], cwd=dest, check=True)
    return have, sum(1 for _ in dest.rglob("*.py"))


def tui_turn(command: str, cwd: Path, timeout: float) -> dict:
    """Paint time and one prompt's turn time of the TUI that `command` starts in `cwd`."""
    from tmux_driver import Tmux

    with Tmux() as tmux:
        tmux.start(f"cd {cwd} && {command}", cols=140, rows=40)
        try:
            paint = tmux.wait_for("Ask m3agent", timeout=180, poll_s=0.25)
        except AssertionError:
            return {"paint_s": None, "turn_s": None, "screen": tmux.screen()[-2000:]}
        tmux.type("hello from the benchmark")
        tmux.press("Enter")
        t1 = time.perf_counter()
        turn = None
        while time.perf_counter() - t1 < timeout:  # the status bar fills in at the turn's end
            screen = tmux.screen()
            if re.search(r"ctx [\d.,]+k?/", screen) and re.search(r"[\d.]+ tok/s", screen):
                turn = time.perf_counter() - t1
                break
            time.sleep(0.25)
        return {
            "paint_s": round(paint, 2),
            "turn_s": round(turn, 2) if turn else None,
            "screen": tmux.screen()[-2000:],
        }


def serve_log(home: Path) -> dict:
    """From the newest background server log under the data home `home`: the expert
    conversion's last progress line, whether the weights finished loading, the log's tail;
    and the expert cache's size on disk."""
    logs = sorted(
        (home / ".local/share/m3agent/serve").glob("*.log"), key=lambda f: f.stat().st_mtime
    )
    if not logs:
        return {}
    text = logs[-1].read_text(errors="replace")
    out: dict = {"log_tail": text[-2500:], "weights_loaded": "loading weights 100% " in text}
    conv = re.findall(r"converting experts: layer (\d+)/(\d+) \(([\d.]+) GB, (\d+) s\)", text)
    if conv:
        layers, _total, gb, s = conv[-1]
        out.update(convert_layers=int(layers), convert_gb=float(gb), convert_s=int(s))
    cache = home / ".cache/m3agent/experts"
    if cache.exists():
        size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
        out["expert_cache_gb"] = round(size / GB, 2)
    return out
