"""The everyday commands Claude Code and Codex users type: /clear and /new (a new session:
the old prompt is never rewritten, so its prefix cache stays valid for a resume), /status,
/cost and /usage, /exit, /init, /permissions, /tasks and /ps (app/tui/tasks.py), and `!cmd`
(a shell command under the session's sandbox; its output goes to the model with the next
prompt, at the end of the conversation). Kept apart from slash.py and slash_actions.py so
other commands merge."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.agent.instructions import NAMES, find_instructions
from m3agent.tools.base import ToolContext
from m3agent.tools.host_programs import host_argv
from m3agent.tools.shell import Shell, ShellArgs

from ..prefix_rules import load_prefixes, project_entries, save_user_rule, trust_project
from ..safe_text import one_line
from .hosts import ScreenHelper
from .screens.confirm_screen import ConfirmScreen
from .tasks import tasks

if TYPE_CHECKING:
    from m3agent.tools.base import ToolResult

    from .ports import SessionLike

SHELL_ESCAPE = "!"  # `!git status`: the shell mode of Claude Code's prompt
OUTPUT_LIMIT = 16_000  # characters of a `!cmd` output handed to the model

INIT_PROMPT = (
    "Write an AGENTS.md at the repository root for coding agents working here: what the "
    "project is, how it is laid out, how to build, test and lint it (the exact commands), and "
    "the conventions the code follows. Read the repository first; keep it short and concrete. "
    "{existing}"
)


class DailyActions(ScreenHelper):
    """The everyday commands (/clear, /status, ...) of the main screen."""

    async def do_clear(self, arg: str) -> None:
        await self._new_session()

    async def do_new(self, arg: str) -> None:
        await self._new_session()

    async def _new_session(self) -> None:
        if self.controller.busy:
            await self.transcript.error("a turn is running: Esc stops it first", "usage")
            return
        session = self.controller.session
        old = session.id if session is not None else None
        await self.app.new_session()
        if old:
            await self.transcript.notice(f"new session; the last one: m3agent resume {old}")

    async def do_status(self, arg: str) -> None:
        c, st = self.config, self.view.status
        session = self.controller.session
        rows = {
            "session": session.id if session is not None else "(loading)",
            "workspace": str(c.cwd),
            # the scripted engine's model is "scripted" too: said once
            "engine": " ".join(dict.fromkeys(w for w in (st.engine, st.model) if w)),
            "thinking": self.controller.thinking,
            "approval": c.approval,
            "sandbox": f"{c.sandbox} ({'+'.join(st.sandbox_layers) or 'no layers'})",
            "context": f"{st.context_used if st.context_used is not None else '-'}"
            f" of {st.context_max or '?'} tokens",
        }
        mode = self.controller.mode
        if mode:
            rows["mode"] = mode
        if session is None:
            rows["state"] = st.state
        width = max(map(len, rows))
        await self.transcript.notice("\n".join(f"{k.ljust(width)}  {v}" for k, v in rows.items()))

    async def do_cost(self, arg: str) -> None:
        await self.transcript.notice(self.controller.usage.render())

    async def do_usage(self, arg: str) -> None:
        await self.do_cost(arg)

    async def do_exit(self, arg: str) -> None:
        await self.app.shutdown()

    async def do_init(self, arg: str) -> None:
        existing = Path(self.config.cwd) / "AGENTS.md"
        note = (
            "An AGENTS.md exists already: improve it rather than starting over."
            if existing.is_file()
            else "Create the file with write_file."
        )
        await self.view.send_text(INIT_PROMPT.format(existing=note))

    async def do_permissions(self, arg: str) -> None:
        if arg.strip() == "trust":
            await self._trust()
            return
        verb, _, rule = arg.strip().partition(" ")
        if verb in ("allow", "ask", "deny", "remove"):
            await self._edit_rule(verb, rule.strip())
            return
        if arg.strip():
            await self.transcript.error(
                "usage: /permissions [trust | allow RULE | ask RULE | deny RULE | remove RULE]",
                "usage",
            )
            return
        session = self.controller.session
        gate = session.gate if session is not None else None
        lines = [f"approval policy: {self.config.approval}"]
        rules = gate.rules if gate is not None else ()
        lines.append("rules (config, then saved 'always' answers; deny wins over ask over allow):")
        # a trusted project's rules are its text: each on its own line, escaped (safe_text)
        lines += [f"  {one_line(r.tool)} = {r.action}" for r in rules] or ["  none"]
        allowed = gate.session_allowed if gate is not None else ()
        lines.append("allowed for this session: " + (", ".join(allowed) or "none"))
        prefixes = [" ".join(p) for p in self.controller.allowed_prefixes]
        lines.append("shell prefixes for this session: " + (", ".join(prefixes) or "none"))
        if self.controller.prefix_note:
            lines.append(self.controller.prefix_note)
        lines += self.controller.rule_notes
        lines.append(
            "edit them: /permissions allow|ask|deny|remove RULE (saved for you), [tools] in the "
            "config file, shell_prefixes in <home>/permissions.json, the project's "
            ".m3agent/settings.json or permissions.json (docs/tui.md); `s` in an approval saves one"
        )
        await self.transcript.notice("\n".join(lines))

    async def do_tasks(self, arg: str) -> None:
        try:
            await self.transcript.notice(await tasks(self.controller.session, arg))
        except ValueError as e:
            await self.transcript.error(str(e), "usage")

    async def do_ps(self, arg: str) -> None:
        await self.do_tasks(arg)

    async def do_memory(self, arg: str) -> None:
        """Lists the instruction files (AGENTS.md / CLAUDE.md found when the session opened);
        `edit` / `user` opens the workspace's or the user's file in $EDITOR. An edit counts
        from the next session (/new): the prompt already sent is never rewritten."""
        if arg.strip() in ("edit", "user"):
            await self._edit_memory(arg.strip())
            return
        if not self.config.instructions:  # --no-context: not even listed (nothing is read)
            await self.transcript.notice("instruction files: none read (--no-context)")
            return

        user = Path("~/.m3agent/AGENTS.md").expanduser()
        lines = ["instruction files (read when the session opened):"]
        own = next(
            (Path(self.config.cwd) / n for n in NAMES if (Path(self.config.cwd) / n).is_file()),
            None,
        )
        if own is not None:
            lines.append(f"  workspace: {own} (in the repository snapshot)")
        found = await asyncio.to_thread(find_instructions, Path(self.config.cwd), user)
        lines += [f"  {f.scope}: {f.path}" for f in found]
        if len(lines) == 1:
            lines.append("  none")
        lines.append("/memory edit opens ./AGENTS.md, /memory user ~/.m3agent/AGENTS.md")
        await self.transcript.notice("\n".join(lines))

    async def _edit_memory(self, which: str) -> None:
        path = (
            Path("~/.m3agent/AGENTS.md").expanduser()
            if which == "user"
            else Path(self.config.cwd) / "AGENTS.md"
        )
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            await self.transcript.error(f"set $EDITOR to edit {path} from here", "usage")
            return
        try:
            ready_for_editor(path, repository=which != "user")
        except (OSError, ValueError) as e:
            await self.transcript.error(str(e), "usage")
            return
        try:
            with self.app.suspend():  # the editor gets the terminal, then the TUI comes back
                # the editor runs as the user: found outside the workspace only
                argv = host_argv([*shlex.split(editor), str(path)], (self.config.cwd,))
                code = subprocess.call(argv)
        except Exception as e:  # no real terminal to hand over (tests, some drivers)
            await self.transcript.error(f"cannot open an editor here ({e}); edit {path}", "usage")
            return
        note = "" if code == 0 else f" (the editor exited with {code})"
        await self.transcript.notice(f"edited {path}{note}; /new starts a session that reads it")

    async def _edit_rule(self, verb: str, rule: str) -> None:
        home = self.config.state_dir
        try:
            if not rule:
                raise ValueError(f"usage: /permissions {verb} RULE (e.g. edit_file(src/**))")
            if home is None:
                raise ValueError("no data home to keep the rule in")
            said = save_user_rule(home, rule, None if verb == "remove" else verb)
        except (OSError, ValueError) as e:
            await self.transcript.error(str(e), "usage")
            return
        self.controller.apply_saved_rules()
        await self.transcript.notice(f"saved: {said} (from now on, and in later sessions)")

    async def _trust(self) -> None:
        """Shows what the project's files would let count (escaped), as `m3agent permissions
        trust` does, and trusts them on yes."""
        entries = await asyncio.to_thread(project_entries, Path(self.config.cwd))
        shown = "".join(f"\n  {line}" for line in entries or ["(no rules)"])

        async def answered(yes: bool | None) -> None:
            if yes:
                await self._trusted()
            else:
                await self.transcript.notice("not trusted: nothing changed")

        question = f"The project's permission files say:{shown}\nTrust them as they are now?"
        self.app.push_screen(ConfirmScreen(question), answered)

    async def _trusted(self) -> None:
        home = self.config.state_dir
        try:
            if home is None:
                raise ValueError("no data home to keep the trust in")
            said = await asyncio.to_thread(trust_project, home, Path(self.config.cwd))
        except (OSError, ValueError) as e:
            await self.transcript.error(str(e), "usage")
            return
        saved, self.controller.prefix_note = load_prefixes(home, Path(self.config.cwd))
        if self.controller.session is not None:  # they count from now on: the gate's
            self.controller.session.gate.prefixes.extend(saved)
        self.controller.apply_saved_rules()
        await self.transcript.notice(f"{said}; its shell prefixes and rules count from now on")

    async def shell_escape(self, command: str) -> None:
        """`!cmd`: runs under the session's sandbox, as the shell tool would; the output is
        shown now and handed to the model with the next prompt."""
        session = self.controller.session
        if not command.strip():
            await self.transcript.error("usage: !COMMAND (e.g. !git status)", "usage")
            return
        if session is None:
            await self.transcript.error("the engine is still loading", "usage")
            return
        result = await asyncio.to_thread(run_shell, session, command)
        await self.transcript.notice(f"$ {command}\n{result.output.rstrip()}")
        self.controller.add_context(shell_context(command, result.output))


def ready_for_editor(path: Path, repository: bool) -> None:
    """PATH made (empty) when missing, for /memory's editor. The workspace's AGENTS.md is the
    repository's: one that is a symlink (a clone can commit one) is refused, or the editor
    would open, and creating it would make, the file it names outside the workspace."""
    if repository and path.is_symlink():
        raise ValueError(f"{path} is a symlink (to {os.readlink(path)}): not opened from here")
    path.parent.mkdir(parents=True, exist_ok=True)
    nofollow = os.O_NOFOLLOW if repository else 0  # the user's own may be a dotfiles link
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | nofollow, 0o666))


def run_shell(session: SessionLike, command: str) -> ToolResult:
    ctx = ToolContext(cwd=Path(session.cwd), sandbox=session.sandbox)
    args = ShellArgs(command=command, timeout_s=None, workdir=None, run_in_background=False)
    return Shell().run(args, ctx)


def shell_context(command: str, output: str) -> str:
    if len(output) > OUTPUT_LIMIT:
        output = output[:OUTPUT_LIMIT] + f"\n[… {len(output) - OUTPUT_LIMIT} more characters]"
    return f"<shell_command>\n$ {command}\n{output.rstrip()}\n</shell_command>"
