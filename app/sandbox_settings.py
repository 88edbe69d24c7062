"""The session's sandbox policy from its settings: the mode, --add-dir and --network, and the
config's [sandbox] rules (tools/sandbox/rules.py), as one SandboxPolicy.

Its own module because more than the composition root needs it: the factory builds the
session's Sandbox from it, app/extensions.py reads skills, commands and instruction files
under it (host_reader), and the status line shows it. It stood in app/factory.py, and
extensions.py importing the factory made a cycle (extensions -> factory -> session_context ->
extensions); here it depends on the settings alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from m3agent.tools.sandbox.policy import SandboxPolicy

from .settings import Settings


def sandbox_policy(settings: Settings, cwd: Path) -> SandboxPolicy:
    """The session's sandbox policy: what its commands, file tools and host reads obey."""
    extra = extra_dirs(settings)
    rules = _rule_fields(settings)
    return SandboxPolicy(
        workspace=cwd,
        mode=settings.sandbox,
        **{
            **rules,
            "network": settings.network or rules.get("network", False),
            "extra_writable": (*extra, *rules.get("extra_writable", ())),
        },
        dangerously_no_sandbox=settings.dangerously_no_sandbox,
    )


def extra_dirs(settings: Settings) -> tuple[Path, ...]:
    """The --add-dir directories, resolved; ValueError names one that is not a directory."""
    extra = tuple(Path(d).expanduser().resolve() for d in settings.add_dirs)
    for d in extra:
        if not d.is_dir():
            raise ValueError(f"--add-dir {d}: not a directory")
    return extra


def _rule_fields(settings: Settings) -> dict[str, Any]:
    """The config's [sandbox] rules as SandboxPolicy fields (tools/sandbox/rules.py)."""
    return settings.sandbox_rules.policy_fields() if settings.sandbox_rules else {}
