"""The approval modal: approve once; for a shell command, always allow its command prefix
(`pytest`, `git status`) rather than every command; for another tool, allow it for the
session; or deny with a note."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from m3agent.agent.events import ApprovalRequest
from m3agent.agent.ops import ApprovalDecision, Decision
from m3agent.agent.shell_prefixes import describe
from m3agent.tools.shell import Shell
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from ...safe_text import visible
from ..ports import ApprovalAnswer
from ..widgets.diff_view import DiffView
from ..widgets.tool_card import format_arguments

SHELL = Shell.name  # the tool whose calls get command-prefix approvals


class ApprovalScreen(ModalScreen[ApprovalAnswer]):
    CSS_PATH = "approval_screen.tcss"
    BINDINGS = [
        Binding("y", "approve", "approve once", show=False),
        Binding("a", "approve_session", "approve for session", show=False),
        # s: always, saved for later sessions too (docs/mcp.md); its button says "saved"
        Binding("s", "approve_always", "always allow (saved)", show=False),
        Binding("p", "approve_prefix", "allow this command prefix this session", show=False),
        Binding("n", "deny", "deny", show=False),
        Binding("escape", "deny_now", "deny", show=False),
    ]

    def __init__(
        self,
        request: ApprovalRequest,
        cwd: Path | None = None,
    ) -> None:
        super().__init__()
        self.request = request
        # shell: the prefix the gate offers to allow from now on (the request's amendment)
        self.prefix = request.amendment
        # The tool's own preview (Tool.preview, carried by the request): no diff is computed
        # here. `cwd` is no longer needed; kept so callers need not change.
        self.preview = request.preview

    def compose(self) -> ComposeResult:
        req = self.request
        with Vertical(id="approval-dialog"):
            yield Label(Text(visible(f"Allow {req.name}?")), id="approval-title")
            if req.reason:
                yield Static(visible(req.reason), markup=False, id="approval-reason")
            with VerticalScroll(id="approval-body"):
                yield Static(format_arguments(req.arguments), markup=False, id="approval-args")
                p = self.preview
                if p is not None and p.kind == "diff" and p.text and not p.is_error:
                    yield DiffView(p.text, id="approval-diff")
                elif p is not None and p.text:
                    head = "this call would fail: " if p.is_error else ""
                    yield Static(visible(head + p.text), markup=False, id="approval-preview")
                elif req.diff:  # a request built without a preview (older producers)
                    yield DiffView(req.diff, id="approval-diff")
                if p is not None and p.note:
                    yield Static(visible(p.note), markup=False, id="approval-preview-note")
            yield Input(placeholder="note to the model (why not, what instead)", id="deny-note")
            # Two rows: the answer for this call (approve, deny) stays whole at any width;
            # the longer "allow from now on" ones go below it.
            with Vertical(id="approval-buttons"):
                with Horizontal(classes="approval-row"):
                    yield Button("Approve once (y)", id="approve", variant="success")
                    yield Button("Deny… (n)", id="deny", variant="error")
                with Horizontal(classes="approval-row"):
                    yield from self._allow_buttons(req)

    def _allow_buttons(self, req: ApprovalRequest) -> Iterator[Button]:
        if req.name == SHELL:
            if self.prefix is not None:
                # It lasts this session (the gate keeps it), and says so.
                label = Text(visible(f"Allow `{describe(self.prefix)}` this session (p)"))
                yield Button(label, id="approve_prefix", variant="primary")
                saved = Text(visible(f"Always allow `{describe(self.prefix)}`, saved (s)"))
                yield Button(saved, id="approve_always", variant="warning")
        else:
            yield Button(
                Text(visible(f"Allow {req.name} for this session (a)")),
                id="approve_session",
                variant="primary",
            )
            yield Button(  # s had a key but no button: nobody found it
                Text(visible(f"Always allow {req.name}, saved (s)")),
                id="approve_always",
                variant="warning",
            )

    def on_mount(self) -> None:
        self.query_one("#deny-note", Input).display = False
        self.query_one("#approve", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        {
            "approve": self.action_approve,
            "approve_session": self.action_approve_session,
            "approve_always": self.action_approve_always,
            "approve_prefix": self.action_approve_prefix,
            "deny": self.action_deny,
        }[event.button.id or "deny"]()

    def _answer(self, decision: Decision, note: str = "") -> None:
        self.dismiss(ApprovalAnswer(ApprovalDecision(self.request.call_id, decision, note)))

    def action_approve(self) -> None:
        self._answer(Decision.APPROVE)

    def action_approve_session(self) -> None:
        # Every shell command for the rest of the session is too broad: prefixes instead.
        if self.request.name != SHELL:
            self._answer(Decision.APPROVE_SESSION)

    def action_approve_prefix(self) -> None:
        if self.prefix is not None:
            self._answer(Decision.APPROVE_PREFIX)

    def action_approve_always(self) -> None:
        # Saved for later sessions: never for shell as a whole, its prefix instead.
        if self.request.name != SHELL:
            self._answer(Decision.APPROVE_ALWAYS)
        elif self.prefix is not None:
            self._answer(Decision.APPROVE_PREFIX_ALWAYS)

    def action_deny(self) -> None:
        """First press opens the note field; Enter in it (or Deny again) sends the denial."""
        note = self.query_one("#deny-note", Input)
        if not note.display:
            note.display = True
            note.focus()
            return
        self._deny(note.value)

    def action_deny_now(self) -> None:
        self._deny(self.query_one("#deny-note", Input).value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._deny(event.value)

    def _deny(self, note: str) -> None:
        self._answer(Decision.DENY, note.strip())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # While the note field has focus, y/a/s/p/n are letters of the note, not shortcuts.
        if action in (
            "approve",
            "approve_session",
            "approve_always",
            "approve_prefix",
            "deny",
        ) and isinstance(self.focused, Input):
            return False
        return True
