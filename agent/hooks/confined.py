"""Where a hook command runs, and how it runs in the tool sandbox.

The one policy (docs/hooks.md, "What runs where"): a command whose definition came with the
repository (a project's hook or status line command, `HookCommand.sandboxed`) runs inside
the tool sandbox, under the session's policy, exactly as the shell tool's commands do: the
home directory's secrets hidden, the workspace writable, the network as the policy says,
the same layers and the same degraded run without bubblewrap. Trusting a project's hooks
covers their command lines and the files they name (pins.py), but not what those programs
go on to run (`make check` runs the Makefile, `pytest` the tests, `npm test` package.json's
script), and the sandboxed model can write all of that; in the sandbox, whatever it wrote
reaches no more than the model's own commands do. The user's own hooks run on the host
(their programs, from their own config), unless they ask for the sandbox (`"sandbox": true`).

The hook's contract is kept: its event JSON on stdin, its exit code and stdout as the answer,
its timeout, and the variables a Claude Code hook reads (CLAUDE_PROJECT_DIR,
M3AGENT_PROJECT_DIR, PYTHONSAFEPATH: set on the command line of `env`, inside the sandbox,
since the sandbox's allow-list passes no other name).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from m3agent.tools.sandbox.runner import Sandbox

# The hook's own variables (runner.hook_env sets them), which the sandbox's allow-list would drop.
HOOK_VARS = ("PYTHONSAFEPATH", "M3AGENT_PROJECT_DIR", "CLAUDE_PROJECT_DIR")


@dataclass(frozen=True, slots=True)
class Confined:
    """What the sandbox made of one command (runner.py turns it into a HookRun)."""

    exit_code: int | None  # None: it timed out, or the sandbox could not start it
    stdout: str
    stderr: str
    timed_out: bool = False
    refused: bool = False  # the sandbox refused to run anything (no layer, budget spent)


def default_sandbox(project: Path) -> Sandbox:
    """The sandbox for a caller that was given none: the default policy over the workspace
    (the one a tool context builds, tools/base.py), never no sandbox at all."""
    from m3agent.tools.sandbox.policy import SandboxPolicy
    from m3agent.tools.sandbox.runner import Sandbox

    return Sandbox(SandboxPolicy(workspace=project))


def read_only(sandbox: Sandbox) -> Sandbox:
    """SANDBOX's policy with nothing writable (plan mode), the same layers as probed."""
    from m3agent.tools.sandbox.policy import SandboxMode
    from m3agent.tools.sandbox.runner import Sandbox

    return Sandbox(sandbox.policy.with_(mode=SandboxMode.READ_ONLY), sandbox.report)


def sandboxed_argv(command: str, env: Mapping[str, str]) -> list[str]:
    """`/bin/sh -c COMMAND` as a hook runs, behind `env` setting the hook's own variables."""
    keep = [f"{name}={env[name]}" for name in HOOK_VARS if name in env]
    return ["/usr/bin/env", *keep, "/bin/sh", "-c", command]


async def run_confined(
    command: str,
    data: bytes,
    project: Path,
    env: Mapping[str, str],
    timeout_s: float,
    sandbox: Sandbox,
) -> Confined:
    """Run COMMAND in SANDBOX with DATA on its stdin, off the event loop (Sandbox.run blocks);
    cancelled, the command is stopped (its whole tree) before the cancellation goes on."""
    from m3agent.tools.sandbox.budget import WriteBudgetSpent
    from m3agent.tools.sandbox.runner import SandboxUnavailable

    cancel = threading.Event()
    job = asyncio.ensure_future(
        asyncio.to_thread(
            sandbox.run,
            sandboxed_argv(command, env),
            cwd=project,
            timeout_s=timeout_s,
            cancel=cancel,
            env=dict(env),
            stdin=data,
        )
    )
    try:
        r = await asyncio.shield(job)
    except asyncio.CancelledError:
        cancel.set()  # Sandbox.run sees it within its poll and kills the tree
        await asyncio.wait([job])
        raise
    except (SandboxUnavailable, WriteBudgetSpent) as e:
        return Confined(None, "", f"not run in the sandbox: {e}", refused=True)
    except OSError as e:
        return Confined(None, "", f"cannot start: {e}")
    if r.timed_out:
        return Confined(None, "", f"timed out after {timeout_s:g}s", timed_out=True)
    if not r.started:  # a layer failed: nothing of the hook ran
        return Confined(None, r.stdout, r.stderr or "the sandbox could not start it")
    return Confined(r.exit_code, r.stdout, r.stderr)
