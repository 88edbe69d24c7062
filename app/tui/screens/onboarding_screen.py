"""First run: pick an engine (a server, a model directory, a running `m3agent serve`, or the
scripted demo). The checks and the saving happen in app/tui/onboarding.py, off the UI thread."""

from __future__ import annotations

from dataclasses import replace

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from ...safe_text import visible
from ..onboarding import KeyNeeded, SetupChoice
from ..ports import SetupPort, SetupResult

CHOICES = (
    ("server", "A server: vLLM or any OpenAI-compatible endpoint (probed via /v1/models)"),
    ("model", "A local model directory (the native engine loads it)"),
    ("serve", "A running `m3agent serve` on this machine"),
    ("demo", "The scripted demo: no model, nothing saved"),
)
PLACEHOLDERS = {"server": "http://gpu-box:8000/v1", "model": "/path/to/MiniMax-M3"}


class OnboardingScreen(Screen[SetupResult]):
    CSS_PATH = "onboarding_screen.tcss"
    BINDINGS = [Binding("escape", "back", "back", show=False)]

    def __init__(self, setup: SetupPort) -> None:
        super().__init__()
        self.setup = setup
        self.kind: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="setup-dialog"):
            yield Static("Set up m3agent", id="setup-title")
            yield Static(
                "No engine is configured yet. Which model should answer? "
                "(↑/↓ and Enter; ctrl+q quits)",
                id="setup-intro",
            )
            yield OptionList(*(Option(text, id=key) for key, text in CHOICES), id="setup-choices")
            yield Input(id="setup-input")
            # Shown when the server answers 401/403; the key is saved with the choice (0600).
            yield Input(id="setup-key", password=True, placeholder="API key")
            yield Static("", id="setup-status", markup=False)

    def on_mount(self) -> None:
        self.query_one("#setup-input").display = False
        self.query_one("#setup-key").display = False
        self.query_one("#setup-choices").focus()

    def say(self, text: str) -> None:
        self.query_one("#setup-status", Static).update(visible(text))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.kind = event.option.id
        field = self.query_one("#setup-input", Input)
        key = self.query_one("#setup-key", Input)
        key.display, key.value = False, ""
        if self.kind in PLACEHOLDERS:
            field.placeholder = PLACEHOLDERS[self.kind]
            field.display = True
            field.value = ""
            field.focus()
            self.say("Enter checks it; Esc goes back.")
        elif self.kind == "serve":
            self.find_server()
        else:
            self.finish(SetupChoice("demo"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        key = self.query_one("#setup-key", Input)
        typed = key.value.strip() if key.display else ""
        self.check(self.kind or "", self.query_one("#setup-input", Input).value, typed)

    @work(thread=True, exclusive=True, group="setup")
    def check(self, kind: str, value: str, key: str = "") -> None:
        self.app.call_from_thread(self.say, "checking…")
        try:
            if kind == "server":
                choice = replace(self.setup.probe(value, key or None), api_key=key)
            else:
                choice = self.setup.check_dir(value)
        except KeyNeeded as e:
            self.app.call_from_thread(self._ask_key, str(e))
            return
        except ValueError as e:
            self.app.call_from_thread(self.say, str(e))
            return
        self._complete(choice)

    def _ask_key(self, why: str) -> None:
        field = self.query_one("#setup-key", Input)
        field.display = True
        field.focus()
        self.say(f"{why}; Enter checks it again (it is saved to the config file, 0600).")

    @work(thread=True, exclusive=True, group="setup")
    def find_server(self) -> None:
        servers = self.setup.servers()
        if not servers:
            self.app.call_from_thread(
                self.say,
                "No m3agent serve is running here. Start one with "
                "`m3agent serve --model DIR --detach`, then choose this again.",
            )
            return
        self._complete(servers[0])

    @work(thread=True, exclusive=True, group="setup")
    def finish(self, choice: SetupChoice) -> None:
        self._complete(choice)

    def _complete(self, choice: SetupChoice) -> None:
        """In the worker thread: save the choice and build its session factory."""
        try:
            result = self.setup.complete(choice)
        except (OSError, ValueError) as e:
            self.app.call_from_thread(self.say, f"could not save the setting: {e}")
            return
        # The choice goes along: the status bar names its engine while it loads.
        self.app.call_from_thread(self.dismiss, (*result, choice))

    def action_back(self) -> None:
        field = self.query_one("#setup-input", Input)
        field.display = False
        self.query_one("#setup-key", Input).display = False
        self.kind = None
        self.say("")
        self.query_one("#setup-choices").focus()
