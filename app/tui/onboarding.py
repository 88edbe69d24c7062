"""First run: with no engine configured, the TUI asks for one instead of failing.

Four ways: an OpenAI-compatible server (probed with GET /v1/models), a local model directory
(the native engine), a `m3agent serve` already running here, or the scripted demo. The first
three are written to the config file; the demo writes nothing. Plain functions and one
frozen choice: the onboarding screen only asks and shows.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.tools.list_dir import ListDir

from ..missing_extra import EXTRAS, torch_installed
from ..serve.lock import all_locks, pid_alive

if TYPE_CHECKING:
    from ..settings import Settings

NS = "]<]minimax[>["
DEMO_SCRIPT = (
    "<mm:think>A first look: list the workspace.</mm:think>I will look around first.\n"
    f'{NS}<tool_call>\n{NS}<invoke name="{ListDir.name}">{NS}<path>.{NS}</path>{NS}</invoke>\n'
    f"{NS}</tool_call>",
    "This is the **scripted demo**: recorded model text replayed through the real parsers, "
    "tools and sandbox (above, a real `list_dir` of this workspace). No model answered.\n\n"
    "To work with a real model, quit (ctrl+q) and start `m3agent` again to pick a server or "
    "a model directory, or see `m3agent -h`.",
)
# Every later prompt of the demo gets this answer: a replay has no reply of its own to give,
# and "the script has no reply left" on the second prompt read as a crash.
DEMO_AGAIN = (
    "<mm:think>The demo has no model to answer this.</mm:think>Still the **scripted demo**: "
    "no model reads your prompts here. Quit (ctrl+q) and start `m3agent` again to choose a "
    "server or a model directory."
)
DEMO_PROMPTS = 500  # more prompts than anyone types in a demo


def demo_script() -> list[str]:
    return [*DEMO_SCRIPT, *[DEMO_AGAIN] * DEMO_PROMPTS]


@dataclass(frozen=True, slots=True)
class SetupChoice:
    kind: str  # "remote" | "native" | "demo"
    base_url: str = ""
    model: str = ""
    api_key: str = ""  # typed on the screen for a server that wants one (saved, 0600)
    max_tokens: int | None = None  # saved too when set: a development model's bound

    def settings(self) -> dict[str, str | int]:
        """The config keys this choice writes (none for the demo)."""
        bound = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        if self.kind == "remote":
            key = {"api_key": self.api_key} if self.api_key else {}
            return {"engine": "remote", "base_url": self.base_url, "model": self.model, **key}
        if self.kind == "native":
            return {"engine": "native", "model": self.model, **bound}
        return {}

    def describe(self) -> str:
        if self.kind == "remote":
            return f"the server {self.base_url} (model {self.model})"
        if self.kind == "native" and self.max_tokens:
            return (
                f"the model directory {self.model} (native engine; a development model, "
                f"not M3's weights: max_tokens = {self.max_tokens}, as it may never stop)"
            )
        if self.kind == "native":
            return f"the model directory {self.model} (native engine)"
        return "the scripted demo (nothing saved)"


class KeyNeeded(ValueError):
    """The server answered 401/403: it wants an API key (another one than we sent)."""


def probe_server(url: str, api_key: str | None = None, timeout_s: float = 5.0) -> SetupChoice:
    """GET <url>/models (and <url>/v1/models for a bare host): a remote choice with the
    server's first model; ValueError with one line when it does not answer like one
    (KeyNeeded when it wants an API key)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url or 'the URL'}: give an http:// or https:// URL")
    candidates = [url] if url.endswith("/v1") else [url, url + "/v1"]
    last = ""
    for base in candidates:
        request = urllib.request.Request(base + "/models", headers={"Accept": "application/json"})
        if api_key:
            request.add_header("Authorization", f"Bearer {api_key}")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                body = json.loads(response.read(1_000_000) or b"{}")
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                said = "refused the API key" if api_key else "wants an API key"
                raise KeyNeeded(f"{base} {said} (HTTP {e.code}): enter it below") from None
            last = f"{base}/models answered HTTP {e.code}"
            continue
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ValueError(f"cannot reach {base}: {reason}") from None
        except ValueError:
            last = f"{base}/models did not answer JSON"
            continue
        ids = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]
        models = [m for m in ids if isinstance(m, str) and m]
        if not models:
            last = f"{base}/models lists no model"
            continue
        return SetupChoice("remote", base_url=base, model=models[0])
    raise ValueError(f"not an OpenAI-compatible server: {last}")


def check_model_dir(raw: str) -> SetupChoice:
    """A native choice for a checkpoint directory (config.json and weights), else ValueError."""
    path = Path(raw.strip()).expanduser()
    if not raw.strip():
        raise ValueError("give the model directory")
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: no config.json (not a Hugging Face checkpoint directory)")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.gguf")):
        raise ValueError(f"{path}: no *.safetensors weights")

    if not torch_installed():  # saved now, every later start would fail on the import
        raise ValueError(f"the native engine needs torch, not installed here: {EXTRAS['torch']}")
    bound = DEV_MAX_TOKENS if _vocab_size(path) < M3_VOCAB else None
    return SetupChoice("native", model=str(path.resolve()), max_tokens=bound)


# M3's vocabulary (SPEC: vocab_size 200064). A checkpoint with a smaller one is a development
# model (`m3agent model init-tiny`): random weights that never write their end token, so each
# model call would run to max_tokens (8192 by default: minutes on a CPU). Its saved config
# bounds a call instead, as README's commands do with --max-tokens.
M3_VOCAB = 200_064
DEV_MAX_TOKENS = 256


def _vocab_size(path: Path) -> int:
    """config.json's vocabulary size (text_config's for a VL checkpoint); M3's when unsaid."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        text = config.get("text_config", config)
        return int(text.get("vocab_size", M3_VOCAB))
    except (OSError, ValueError, TypeError, AttributeError):
        return M3_VOCAB


def running_servers(home: Path) -> list[SetupChoice]:
    """The `m3agent serve` processes ready on this machine, as native choices of their model
    directory: run and the TUI attach to the server while it runs, and load it otherwise."""
    out = []
    for lock in all_locks(home):
        if lock.state == "ready" and pid_alive(lock.pid) and Path(lock.model).is_dir():
            out.append(SetupChoice("native", model=lock.model))
    return out


def needs_setup(settings: Settings, flags: dict[str, Any], script: Path | None) -> bool:
    """Nothing chose an engine that can start: the default native engine without a model."""
    chosen = flags.get("engine") is not None or script is not None
    return not chosen and settings.engine in ("native", "vllm") and not settings.model
