"""Issue 35: the whole product on one GPU, measured as a user meets it.

Everything goes through the installed console script, as a user types it: a random M3
checkpoint in the release's layout (`m3agent model init-release`: MXFP8 experts, shards,
index, config, tokenizer, template), `m3agent model plan` and `doctor` on it, `m3agent run
--engine native --model DIR` in a git repository of real source (its snapshot the prompt),
which starts the background `serve` (first start: the experts converted into the host form);
a second turn with `-c` (the prefix cache); a long decode; four sessions at once; `serve
--stop` and a second start (the conversion cache); one TUI turn in tmux when tmux is there.
Measured in the same run: the host's read bandwidth, PCIe, the disk's read rate, GPU and host
peak memory (sampled every 0.2 s) against the plan. One JSON, written after every step so a
run cut short still reports what it got.

  python bench/one_gpu_product.py --out DIR [--width m3|small] [--moe-layers N|auto]
      [--repo-tokens N] [--expert-form auto|int8|int4|mxfp8] [--chat-template FILE] [--smoke]

--smoke: the CPU (no GPU), the small width, a small repository, to try the harness before
spending device time (~20 min on 2 cores: the first turn's ~21K-token prompt dominates; too
slow for CI, whose tests cover each command it drives).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "app" / "tui"))

from product_probes import GB, Peaks, read_cold, say, serve_log, source_repo, tui_turn  # noqa: E402
from tmux_driver import pane_command  # noqa: E402

TASK = "Read the repository snapshot and say in one line what this project is."


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.work)
        self.ckpt = self.work / "ckpt"
        self.repo = self.work / "repo"
        self.home = self.work / "home"
        self.cli = shutil.which("m3agent") or str(Path(sys.executable).parent / "m3agent")
        self.out = Path(args.out)
        self.result: dict = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "steps": {},
        }
        self.env = {**os.environ, "HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        self.env.pop("XDG_DATA_HOME", None)
        self.env.pop("XDG_CONFIG_HOME", None)
        # without bubblewrap (the GPU image): accept the documented gaps, for run and the TUI
        config = self.work / "config.toml"
        self.env["M3AGENT_CONFIG"] = str(config)
        self.config_text = "" if shutil.which("bwrap") else "accept_sandbox_gaps = true\n"

    # ---- plumbing --------------------------------------------------------------------------

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        tag = "smoke" if self.args.smoke else self.result.get("machine", {}).get("tag", "gpu")
        tag += "_tiny" if self.args.tiny else ""
        path = self.out / f"one_gpu_product_{tag}_{dt.date.today()}.json"
        path.write_text(json.dumps(self.result, indent=1))

    def cli_run(
        self,
        name: str,
        argv: list[str],
        cwd: Path | None = None,
        timeout: float = 600,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess:
        say(f"{name}: m3agent {' '.join(argv)}")
        t0 = time.perf_counter()
        try:
            r = subprocess.run(
                [self.cli, *argv],
                cwd=cwd or self.work,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
                input=stdin,
            )
        except subprocess.TimeoutExpired as e:
            self.result["steps"][name] = {
                "argv": argv,
                "timeout_s": timeout,
                "stderr_tail": str(e.stderr or "")[-2000:],
            }
            self.save()
            raise
        wall = time.perf_counter() - t0
        self.result["steps"][name] = {
            "argv": argv,
            "rc": r.returncode,
            "wall_s": round(wall, 3),
            "stderr_tail": r.stderr[-1500:],
        }
        say(f"{name}: rc {r.returncode} in {wall:.1f} s")
        self.save()
        return r

    def record(self, name: str, **fields: object) -> None:
        self.result["steps"].setdefault(name, {}).update(fields)
        self.save()

    # ---- the machine -----------------------------------------------------------------------

    def machine(self) -> None:
        import torch
        from m3agent.engine.offload.hardware import measure_host_read_bw

        cuda = torch.cuda.is_available() and not self.args.smoke
        m: dict = {
            "cpus": os.cpu_count(),
            "host_mem_gib": round(
                os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
            ),
            "disk_free_gib": round(shutil.disk_usage(self.work).free / 2**30, 1),
            "torch": torch.__version__,
            "cuda": cuda,
        }
        if cuda:
            p = torch.cuda.get_device_properties(0)
            m.update(
                gpu=p.name,
                gpu_mem_gib=round(p.total_memory / 2**30, 1),
                tag=p.name.split()[1].lower(),
            )
        m["host_read_gbs"] = round(
            measure_host_read_bw(1 << 30 if self.args.smoke else 4 << 30) / GB, 1
        )
        if cuda:
            from offload_e2e_model import pcie_bw

            m["pcie_gbs"] = round((pcie_bw(True, 1 << 30) or 0) / GB, 1)
        self.result["machine"] = m
        self.cuda = cuda
        self.save()

    def moe_layers(self) -> int:
        if self.args.moe_layers != "auto":
            return int(self.args.moe_layers)
        if self.args.width == "small":
            return 2
        # one MoE layer: 7.5 GB of MXFP8 on disk, its host form (int8: 7.3 GB) in the
        # conversion cache and in RAM; keep 12 GB of disk and 24 GB of RAM for the rest
        per_layer = 7.6
        disk = shutil.disk_usage(self.work).free / GB - 12 - 6.5  # embeddings, dense, vision
        ram = self.result["machine"]["host_mem_gib"] * 1.07 - 24
        return max(1, min(int(disk // (2 * per_layer)), int(ram // per_layer), 57))

    def disk_read(self) -> None:
        """The checkpoint's largest shard read cold (page cache dropped where allowed)."""
        shard = max(self.ckpt.glob("*.safetensors"), key=lambda f: f.stat().st_size)
        gbs, dropped = read_cold(shard)
        self.result["machine"].update(disk_read_gbs=round(gbs, 2), disk_read_cold=dropped)
        self.save()

    # ---- the steps -------------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        if self.args.tiny:
            self.cli_run("init_tiny", ["model", "init-tiny", str(self.ckpt)])
            return
        argv = [
            "model",
            "init-release",
            str(self.ckpt),
            "--width",
            self.args.width,
            "--moe-layers",
            str(self.moe_layers()),
        ]
        if self.args.chat_template:
            argv += ["--chat-template", self.args.chat_template]
        if self.args.smoke:
            argv += ["--device", "cpu"]
        r = self.cli_run("init_release", argv, timeout=1800)
        if r.returncode:
            raise SystemExit(f"init-release failed: {r.stderr[-500:]}")
        size = sum(f.stat().st_size for f in self.ckpt.iterdir())
        self.record(
            "init_release",
            bytes=size,
            write_gbs=round(size / GB / self.result["steps"]["init_release"]["wall_s"], 2),
        )

    def make_repo(self) -> None:
        chars, files = source_repo(ROOT, self.repo, int(self.args.repo_tokens * 3.2))
        self.record("repo", characters=chars, files=files)

    def engine_args(self) -> list[str]:
        a = ["--engine", "native", "--model", str(self.ckpt)]
        if not self.args.tiny:
            a += ["--offload-experts", "on", "--expert-form", self.args.expert_form]
        return a

    def run_argv(self, max_tokens: int) -> list[str]:
        return [
            "run",
            *self.engine_args(),
            "--max-tokens",
            str(max_tokens),
            "--output-format",
            "json",
        ]

    def turn(self, name: str, extra: list[str], max_tokens: int, prompt: str = TASK) -> dict:
        argv = [
            *self.run_argv(max_tokens),
            *extra,
            prompt,
        ]
        r = self.cli_run(name, argv, cwd=self.repo, timeout=self.args.turn_timeout)
        try:
            res = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.record(name, stdout_tail=r.stdout[-1500:])
            raise SystemExit(f"{name}: no JSON result (rc {r.returncode})") from None
        u = res.get("last_usage") or {}
        gen, ttft, total = (
            u.get("generated_tokens", 0),
            u.get("time_to_first_token_s"),
            u.get("total_time_s"),
        )
        row = {
            "exit_code": res.get("exit_code"),
            "prompt_tokens": u.get("prompt_tokens"),
            "cached_prompt_tokens": u.get("cached_prompt_tokens"),
            "cached_share": round(
                (u.get("cached_prompt_tokens") or 0) / max(1, u.get("prompt_tokens") or 1), 4
            ),
            "cache_miss_reason": u.get("cache_miss_reason"),
            "ttft_s": ttft,
            "generated_tokens": gen,
            # None where no token decoded to text before the last (the client's first-token
            # time is then the whole request's: no decode time to divide)
            "decode_ms_per_token": round((total - ttft) / (gen - 1) * 1e3, 2)
            if gen and gen > 1 and ttft is not None and total - ttft > 1e-3
            else None,
            "prefill_tokens_per_s": round(
                (u.get("prompt_tokens", 0) - (u.get("cached_prompt_tokens") or 0)) / ttft, 1
            )
            if ttft
            else None,
            **self.peaks.take(),
        }
        self.record(name, **row)
        return row

    def serve_log(self) -> dict:
        return serve_log(self.home)

    def concurrent(self, n: int, max_tokens: int) -> None:
        argv = self.run_argv(max_tokens)
        say(f"concurrent: {n} sessions")
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                [self.cli, *argv, f"{TASK} (session {i})"],
                cwd=self.repo,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(n)
        ]
        rows = []
        for p in procs:
            out, _err = p.communicate(timeout=self.args.turn_timeout)
            try:
                u = json.loads(out.strip().splitlines()[-1]).get("last_usage") or {}
            except (ValueError, IndexError):
                u = {}
            rows.append(u)
        wall = time.perf_counter() - t0
        gen = sum(u.get("generated_tokens", 0) for u in rows)
        decode = [
            ((u["total_time_s"] - u["time_to_first_token_s"]) / (u["generated_tokens"] - 1))
            for u in rows
            if u.get("generated_tokens", 0) > 1
            and u["total_time_s"] - (u["time_to_first_token_s"] or u["total_time_s"]) > 1e-3
        ]
        self.record(
            f"concurrent_{n}",
            wall_s=round(wall, 2),
            generated_tokens=gen,
            per_session_decode_ms=[round(d * 1e3, 2) for d in decode],
            aggregate_tokens_per_s=round(gen / wall, 2),
            **self.peaks.take(),
        )

    def tui_turn(self) -> None:
        if not shutil.which("tmux"):
            self.record("tui", skipped="tmux is not installed here")
            return
        env = f"HOME={self.home} M3AGENT_CONFIG={self.env['M3AGENT_CONFIG']}"
        cmd = pane_command(env, self.cli, " ".join([*self.engine_args(), "--max-tokens", "16"]))
        self.record("tui", **tui_turn(cmd, self.repo, self.args.turn_timeout))

    # ---- the whole run ---------------------------------------------------------------------

    def run(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.work / "config.toml").write_text(self.config_text)
        self.machine()
        self.peaks = Peaks(self.cuda)
        try:
            self.write_checkpoint()
            if self.args.tiny:  # the tiny model on a long snapshot: the engine's overheads
                self.make_repo()
                self.turn("first_turn", [], self.args.max_tokens)
                self.turn("second_turn_continue", ["-c"], self.args.max_tokens, "And the engine?")
                self.cli_run("serve_stop_end", ["serve", "--stop"])
                return
            self.disk_read()
            plan_args = [
                "model",
                "plan",
                str(self.ckpt),
                "--json",
                "--context",
                str(self.args.context),
            ]
            if not self.cuda:
                plan_args += ["--gpu-mem", "24", "--gpu-bw", "1000"]
            r = self.cli_run("plan", plan_args)
            try:
                self.record("plan", report=json.loads(r.stdout))
            except ValueError:
                self.record("plan", stdout_tail=r.stdout[-1500:])
            r = self.cli_run(
                "doctor",
                ["doctor", *self.engine_args()[:4], "--json"],
                cwd=self.repo if self.repo.exists() else None,
            )
            self.make_repo()
            first = self.turn("first_turn", [], self.args.max_tokens)
            self.record("first_turn", serve=self.serve_log())
            self.turn(
                "second_turn_continue",
                ["-c"],
                self.args.max_tokens,
                "And what does its engine folder hold?",
            )
            self.turn("decode_long", ["-c"], self.args.decode_tokens, "Write a long explanation.")
            self.concurrent(4, self.args.decode_tokens)
            self.cli_run("serve_stop", ["serve", "--stop"])
            self.turn("second_start", [], self.args.max_tokens)
            self.record("second_start", serve=self.serve_log())
            self.tui_turn()
            self.cli_run("serve_stop_end", ["serve", "--stop"])
            self.result["summary"] = {
                "first_turn_ttft_s": first["ttft_s"],
                "prompt_tokens": first["prompt_tokens"],
            }
        finally:
            self.peaks.stop()
            self.save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--work", default="/tmp/m3product")
    ap.add_argument("--width", default="m3", choices=("m3", "small"))
    ap.add_argument("--moe-layers", default="auto")
    ap.add_argument("--repo-tokens", type=int, default=160_000)
    ap.add_argument("--context", type=int, default=262_144)
    ap.add_argument("--expert-form", default="auto")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--turn-timeout", type=float, default=900)
    ap.add_argument("--chat-template", default=None)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="the tiny random M3 (init-tiny) instead")
    args = ap.parse_args()
    if args.smoke:
        args.width, args.repo_tokens, args.decode_tokens, args.max_tokens = "small", 3000, 8, 4
        args.moe_layers = "2" if args.moe_layers == "auto" else args.moe_layers
    Harness(args).run()


if __name__ == "__main__":
    main()
