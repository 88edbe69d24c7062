"""Settings: the only place that reads config files and environment variables (the file's
format, read and written: app/config_file.py).

The data home is private (0700; session logs and config 0600: tools/private_fs.py); an
existing one is fixed when settings are loaded.

Precedence, lowest first: built-in defaults < config.toml < environment < command-line flags
(`Settings.override`). Paths:
- data home: $M3AGENT_HOME, else platformdirs.user_data_dir("m3agent"); sessions live in
  <home>/sessions, checkpoints in <home>/checkpoints;
- config file: $M3AGENT_CONFIG, else <home>/config.toml when $M3AGENT_HOME is set (so a test
  or a sandboxed run never reads the user's real config), else
  platformdirs.user_config_dir("m3agent")/config.toml.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import platformdirs
from m3agent.agent.config import AgentConfig, ApprovalPolicy, ToolRule
from m3agent.engine.api import EngineName, SamplingParams, ThinkingMode
from m3agent.tools.private_fs import fix_mode
from m3agent.tools.sandbox.policy import SandboxMode
from m3agent.tools.sandbox.selfguard import forget_environ

from .config_file import read_config, write_keys
from .notify import METHODS, resolve
from .permission_store import persisted_rules

if TYPE_CHECKING:
    from m3agent.tools.diagnostics import DiagnosticsConfig
    from m3agent.tools.mcp.config import McpConfig, McpServerConfig
    from m3agent.tools.sandbox.rules import SandboxRules
    from m3agent.tools.web_fetch import FetchPolicy


SECRET_ENV = ("M3AGENT_API_KEY", "OPENAI_API_KEY")  # read once, then taken out of the env
_ENV = {
    "M3AGENT_ENGINE": "engine",
    "M3AGENT_MODEL": "model",
    "M3AGENT_BASE_URL": "base_url",
    "M3AGENT_API_KEY": "api_key",
    "M3AGENT_THINKING": "thinking",
    "M3AGENT_APPROVAL": "approval",
    "M3AGENT_SANDBOX": "sandbox",
}


E = TypeVar("E", bound=StrEnum)


def _member(kind: type[E], value: str, what: str) -> E:
    """VALUE as a member of the string enum KIND; ValueError naming WHAT and the choices."""
    choices = tuple(kind)
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r} (use one of {', '.join(choices)})")
    return kind(value)


@dataclass(frozen=True, slots=True)
class Settings:
    home: Path
    config_path: Path
    engine: EngineName = EngineName.NATIVE
    model: str | None = None  # a model directory (native/vllm) or the served model name
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key: str | None = None
    request_timeout_s: float = 600.0
    retries: int = 3
    thinking: ThinkingMode = ThinkingMode.ADAPTIVE
    approval: ApprovalPolicy = ApprovalPolicy.ON_REQUEST
    sandbox: SandboxMode = SandboxMode.WORKSPACE_WRITE
    network: bool = False  # shell commands may use the network
    add_dirs: tuple[str, ...] = ()  # writable roots besides the workspace
    dangerously_no_sandbox: bool = False  # run the shell even when no sandbox layer works
    accept_sandbox_gaps: bool = False  # without bubblewrap: chmod/utime outside the workspace
    allow_home: bool = False  # start even in $HOME, / or a directory holding them
    max_turns: int = 50
    max_tool_calls: int = 200
    max_wall_time_s: float = 3600.0
    tool_timeout_s: float = 120.0
    system_prompt: str | None = None
    max_tokens: int = 8192  # per model call
    device: str | None = None  # native: "cuda", "cpu" (default: cuda when available)
    dtype: str | None = None  # native: "bfloat16", "float32" (default: bf16 on cuda, else fp32)
    # native M3: routed experts in host memory, computed on the CPU (docs/offload.md):
    # auto (when the weights do not fit the GPU) | on | off; their form auto | int8 | bf16;
    # hot experts per MoE layer cached on the GPU (None or 0: none)
    offload_experts: str = "auto"
    expert_form: str = "auto"
    hot_experts: int | None = None
    prefill_stream_tokens: int = 1024  # prefill chunks this long stream experts to the GPU
    # native on a GPU: the most of its free memory the KV cache may take (it takes only what
    # the context needs; lower it to leave room for other work); vllm: its share of the GPU
    gpu_memory_utilization: float = 0.9
    # native (docs/kv-cache.md): the disk tier's budget over every model, LRU (0: off), and its
    # folder (None: <home>/kv-cache); the host-memory tier: auto (when the KV does not fit the
    # GPU), on, off
    kv_disk_cache_gb: float = 32.0
    kv_disk_cache_dir: str | None = None
    kv_host_tier: str = "auto"
    # native/vllm from `run` and the TUI: start (or reuse) a background `m3agent serve` and
    # attach to it, so the prefix cache outlives the process (app/warm.py); false: in-process.
    warm: bool = True
    # A server started by run/the TUI stops after this long without a request (0: never).
    server_idle_timeout_s: float = 1800.0
    # TUI notifications (app/notify.py): auto (bell, off inside tmux), bell, osc9, osc777, off
    notify: str = "auto"
    rules: tuple[ToolRule, ...] = ()
    # Repository snapshot (agent/context.py): on/off, an explicit token budget (else the
    # model's context minus the reserve), extra skip patterns (gitignore syntax), file size cap.
    context: bool = True
    context_budget: int | None = None
    context_reserve: int = 32768
    context_skip: tuple[str, ...] = ()
    context_max_file_bytes: int = 512_000
    # MCP servers (app/mcp/settings.py): the user config's [mcp_servers] tables, and the
    # command line's --mcp-config files, --strict-mcp-config, --trust-project-mcp.
    mcp_servers: tuple[McpServerConfig, ...] = ()
    mcp_config_files: tuple[str, ...] = ()
    strict_mcp_config: bool = False
    trust_project_mcp: bool = False
    # The config's [sandbox] table: path rules, network mode (tools/sandbox/rules.py).
    sandbox_rules: SandboxRules | None = None
    # The config's [web_fetch] table: the domains web_fetch may fetch (tools/web_fetch), with
    # the WebFetch(domain:...) rules added when the session starts (app/web_fetch_settings.py).
    web_fetch: FetchPolicy | None = None
    # The config's [diagnostics] table: a checker run on the files each call changed.
    diagnostics: DiagnosticsConfig | None = None
    # Hooks, commands, skills and agents of the user (app/extensions.py): ~/.m3agent, or the
    # data home when $M3AGENT_HOME is set (a test never reads the user's real ones).
    user_dir: Path | None = None

    def __post_init__(self) -> None:
        # Strings from the file, the environment or a flag become the members (equal to them).
        object.__setattr__(self, "engine", _member(EngineName, self.engine, "engine"))
        object.__setattr__(self, "sandbox", _member(SandboxMode, self.sandbox, "sandbox mode"))
        if not isinstance(self.add_dirs, (list, tuple)):
            raise ValueError("add_dirs must be a list of directories")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")

        if self.notify not in METHODS:
            raise ValueError(f"notify must be one of {', '.join(METHODS)}, got {self.notify!r}")
        if self.server_idle_timeout_s < 0:
            raise ValueError(
                f"server_idle_timeout_s must be 0 or more, got {self.server_idle_timeout_s}"
            )
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, got {self.retries}")
        if self.context_budget is not None and self.context_budget < 1:
            raise ValueError(f"context_budget must be positive, got {self.context_budget}")
        if self.context_reserve < 0:
            raise ValueError(f"context_reserve must be 0 or more, got {self.context_reserve}")
        if not isinstance(self.context_skip, (list, tuple)):
            raise ValueError("context_skip must be a list of gitignore-style patterns")
        for name in ("offload_experts", "kv_host_tier"):
            if getattr(self, name) not in ("auto", "on", "off"):
                raise ValueError(f"{name} must be auto, on or off, got {getattr(self, name)!r}")
        if self.expert_form not in ("auto", "int8", "int4", "mxfp8", "bf16"):
            raise ValueError(
                f"expert_form must be auto, int8, int4, mxfp8 or bf16, got {self.expert_form!r}"
            )
        if self.hot_experts is not None and self.hot_experts < 0:
            raise ValueError(f"hot_experts must be 0 or more, got {self.hot_experts}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.prefill_stream_tokens < 0:
            raise ValueError("prefill_stream_tokens must be 0 (never) or more")
        if not isinstance(self.kv_disk_cache_gb, int | float) or self.kv_disk_cache_gb < 0:
            raise ValueError(
                f"kv_disk_cache_gb must be 0 (off) or more, got {self.kv_disk_cache_gb!r}"
            )
        self.agent_config()  # validates thinking, approval and limits with their own messages
        object.__setattr__(self, "thinking", ThinkingMode(self.thinking))
        object.__setattr__(self, "approval", ApprovalPolicy(self.approval))

    @property
    def kv_cache_dir(self) -> Path:
        """The native engine's disk tier (kv_disk_cache_dir, else <home>/kv-cache)."""
        if self.kv_disk_cache_dir:
            return Path(self.kv_disk_cache_dir).expanduser()
        return self.home / "kv-cache"

    @property
    def kv_cache_bytes(self) -> int:
        """The disk tier's budget in bytes (0: the tier is off)."""
        return int(self.kv_disk_cache_gb * (1 << 30))

    @property
    def sessions_dir(self) -> Path:
        return self.home / "sessions"

    def notify_method(self, env: Mapping[str, str] | None = None) -> str:
        """`notify` resolved for this terminal ($TMUX: auto is off)."""
        return resolve(self.notify, os.environ if env is None else env)

    @property
    def user_instructions_file(self) -> Path:
        """~/.m3agent/AGENTS.md: the user's instructions for every workspace (agent/instructions.py)."""
        return Path.home() / ".m3agent" / "AGENTS.md"

    @property
    def checkpoints_dir(self) -> Path:
        return self.home / "checkpoints"

    def mcp_config(self, cwd: Path, env: Mapping[str, str] | None = None) -> McpConfig:
        """The MCP servers a session in `cwd` starts (McpConfig), trust applied."""
        from .mcp.settings import resolve

        return resolve(
            home=self.home,
            cwd=cwd,
            user=self.mcp_servers,
            files=self.mcp_config_files,
            strict=self.strict_mcp_config,
            trust_project=self.trust_project_mcp,
            env=env,
        )

    def override(self, **values: Any) -> Settings:
        """Settings by name; None means "not given" and keeps the current value (the command
        line's flags come through Overrides.apply)."""
        given = {k: v for k, v in values.items() if v is not None}
        return replace(self, **given)

    def agent_config(self) -> AgentConfig:
        extra = {"system_prompt": self.system_prompt} if self.system_prompt else {}
        return AgentConfig(
            max_turns=self.max_turns,
            max_tool_calls=self.max_tool_calls,
            max_wall_time_s=self.max_wall_time_s,
            thinking_default=self.thinking,
            approval_policy=self.approval,
            rules=self.rules,
            tool_timeout_s=self.tool_timeout_s,
            sampling=SamplingParams(max_tokens=self.max_tokens),
            **extra,
        )


@dataclass(frozen=True, slots=True)
class Overrides:
    """The settings flags of `m3agent run` and the TUI, one field per flag, named as the flag
    is (`--add-dir` is add_dir, `--no-context` no_context). None, False or empty: not given,
    the config's value stays. `apply` turns them into settings."""

    engine: str | None = None
    model: str | None = None
    base_url: str | None = None
    thinking: str | None = None
    approval: str | None = None
    sandbox: str | None = None
    allow_home: bool = False
    max_tokens: int | None = None
    # run only (the TUI has no such flags)
    max_turns: int | None = None
    network: bool = False
    add_dir: tuple[Path, ...] = ()
    dangerously_no_sandbox: bool = False
    accept_sandbox_gaps: bool = False
    context_budget: int | None = None
    no_context: bool = False
    in_process: bool = False
    mcp_config: tuple[Path, ...] = ()
    strict_mcp_config: bool = False
    trust_project_mcp: bool = False
    offload_experts: str | None = None
    expert_form: str | None = None

    def given(self) -> dict[str, Any]:
        """The settings these flags set, by setting name (only those given)."""
        values: dict[str, Any] = {
            "engine": self.engine,
            "model": self.model,
            "base_url": self.base_url,
            "thinking": self.thinking,
            "approval": self.approval,
            "sandbox": self.sandbox,
            "allow_home": self.allow_home or None,
            "max_tokens": self.max_tokens,
            "max_turns": self.max_turns,
            "network": self.network or None,
            "add_dirs": tuple(str(d) for d in self.add_dir) or None,
            "dangerously_no_sandbox": self.dangerously_no_sandbox or None,
            "accept_sandbox_gaps": self.accept_sandbox_gaps or None,
            "context_budget": self.context_budget,
            "context": False if self.no_context else None,
            "warm": False if self.in_process else None,
            "mcp_config_files": tuple(str(p) for p in self.mcp_config) or None,
            "strict_mcp_config": self.strict_mcp_config or None,
            "trust_project_mcp": self.trust_project_mcp or None,
            "offload_experts": self.offload_experts,
            "expert_form": self.expert_form,
        }
        return {k: v for k, v in values.items() if v is not None}

    def apply(self, settings: Settings) -> Settings:
        """`settings` with these flags on top (ValueError for a bad value, in its own words)."""
        return settings.override(**self.given())


def _paths(env: Mapping[str, str]) -> tuple[Path, Path]:
    home_env = env.get("M3AGENT_HOME")
    home = Path(home_env) if home_env else Path(platformdirs.user_data_dir("m3agent"))
    if env.get("M3AGENT_CONFIG"):
        config = Path(env["M3AGENT_CONFIG"])
    elif home_env:
        config = home / "config.toml"
    else:
        config = Path(platformdirs.user_config_dir("m3agent")) / "config.toml"
    return home, config


def _file_keys() -> set[str]:
    """The top-level keys config.toml may set (the others are derived or come from tables)."""
    return {f.name for f in fields(Settings)} - {
        "home",
        "config_path",
        "rules",
        "api_key",
        "mcp_config_files",
        "strict_mcp_config",
        "trust_project_mcp",
        "sandbox_rules",
        "user_dir",
        "web_fetch",
        "diagnostics",
    }


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Defaults < config file < environment. Raises ValueError with one clear line."""
    env = os.environ if env is None else env
    home, config = _paths(env)
    fix_mode(home)  # sessions and checkpoints live there: 0700 (an older version made 0755)
    fix_mode(config)  # 0600: it names the user's models, servers and tool rules
    values = read_config(config, _file_keys())
    if "mcp_servers" in values:  # parsed with the environment (${VAR}, bearer_token_env_var)
        from .mcp.settings import user_servers

        values["mcp_servers"] = user_servers(values["mcp_servers"], config, env)
    # "Always allow" answers: allow rules after the config's own (a config deny still wins).
    values["rules"] = (*values.get("rules", ()), *persisted_rules(home))
    for var, key in _ENV.items():
        if env.get(var):
            values[key] = env[var]
    if "api_key" not in values and env.get("OPENAI_API_KEY"):
        values["api_key"] = env["OPENAI_API_KEY"]
    if env is os.environ:
        # Held in memory from here on: no child (commands, MCP servers) inherits the keys, and
        # /proc/<agent>/environ no longer shows them (issue 13: the agent's own secrets).
        forget_environ([name for name in SECRET_ENV if name in env])
    values["user_dir"] = home if env.get("M3AGENT_HOME") else Path.home() / ".m3agent"
    try:
        return Settings(home=home, config_path=config, **values)
    except TypeError as e:  # a value of the wrong type in the file
        raise ValueError(f"{config}: {e}") from e


def save_settings(path: Path, values: Mapping[str, str | int]) -> None:
    """Writes top-level keys into the config file (first-run setup): config_file.write_keys."""
    write_keys(path, values, {f.name for f in fields(Settings)})
