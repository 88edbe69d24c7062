"""web_fetch end to end: the installed console script, a config with a [web_fetch] table or
Claude Code's WebFetch(domain:...) rules, a scripted model emitting M3 tool-call markup, and a
real HTTP server on 127.0.0.1."""

from __future__ import annotations

import http.server
import threading

import pytest

from ..support.cli import CONSOLE_SCRIPT, run_cli, scripted_run


class _Page(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.path)
        body = b"<html><title>Notes</title><body><h2>Release</h2><p>Version 4.2 is out.</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def site():
    handler = type("P", (_Page,), {"seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    yield handler, f"http://127.0.0.1:{srv.server_port}/notes"
    srv.shutdown()
    srv.server_close()


def _run(cli, repo, home, m3, url, config: str, *flags: str):
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(config)
    script = cli.script(
        m3.calls(m3.invoke("web_fetch", url=url), reasoning="Read the release notes."),
        m3.answer("Version 4.2 is out."),
    )
    r = run_cli(
        home,
        *scripted_run("what is new?", script, repo, "--output-format", "stream-json", *flags),
        command=CONSOLE_SCRIPT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    evs = m3.events(r.stdout)
    (done,) = [e for e in evs if e["type"] == "tool_call_finished"]
    return done, evs


LOCAL = '[web_fetch]\nallowed_domains = ["127.0.0.1"]\nallow_private = ["127.0.0.1"]\n'


def test_fetch_an_allowed_page(cli, repo, home, m3, site):
    handler, url = site
    done, evs = _run(cli, repo, home, m3, url, LOCAL)
    assert not done["is_error"], done
    assert (
        "Title: Notes" in done["output"] and "## Release\n\nVersion 4.2 is out." in done["output"]
    )
    assert handler.seen == ["/notes"]


def test_the_tool_is_offered_only_with_an_allowed_domain(tmp_path, home):
    """In process, through the factory's build_toolset (what run and the TUI call)."""
    from m3agent.app.factory import build_toolset
    from m3agent.app.settings import load_settings

    home.mkdir(exist_ok=True)
    config = home / "config.toml"

    def fetcher(text: str):
        config.write_text(text)
        tools = build_toolset(load_settings(), tmp_path)
        return tools.get("web_fetch") if "web_fetch" in tools else None

    assert fetcher("") is None  # deny by default: nothing to fetch, no tool in the prompt
    assert fetcher('[tools]\n"WebFetch(domain:docs.python.org)" = "deny"\n') is None
    tool = fetcher('[tools]\n"WebFetch(domain:docs.python.org)" = "allow"\n')
    assert tool.policy.allowed_domains == ("docs.python.org",)
    tool = fetcher('[tools]\n"WebFetch(domain:evil.example)" = "deny"\n' + LOCAL)
    assert tool.policy.allowed_domains == ("127.0.0.1",)
    assert tool.policy.denied_domains == ("evil.example",)
    with pytest.raises(ValueError, match=r"rule WebFetch\(domain:bad name\): 'bad name' is not"):
        fetcher('[tools]\n"WebFetch(domain:bad name)" = "allow"\n')
    # the user's saved rules count too; a broken one there is left out, not fatal
    (home / "permissions.json").write_text(
        '{"rules": {"WebFetch(domain:pypi.org)": "allow", "WebFetch(domain:x y)": "allow"}}'
    )
    assert fetcher("").policy.allowed_domains == ("pypi.org",)


def test_claude_code_rules_allow_and_deny_a_domain(cli, repo, home, m3, site):
    handler, url = site
    private_only = '[web_fetch]\nallow_private = ["127.0.0.1"]\n'
    done, _ = _run(
        cli, repo, home, m3, url, private_only, "--allowedTools", "WebFetch(domain:127.0.0.1)"
    )
    assert not done["is_error"] and "Version 4.2 is out." in done["output"], done
    done, _ = _run(
        cli, repo, home, m3, url, LOCAL, "--disallowedTools", "WebFetch(domain:127.0.0.1)"
    )
    assert done["is_error"] and done["output"].startswith("not run: "), done
    assert handler.seen == ["/notes"]  # the denied call never reached the server


def test_a_bad_web_fetch_table_is_one_line(cli, repo, home, m3):
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[web_fetch]\nallowed_domains = ["not a domain"]\n')
    r = run_cli(home, *scripted_run("x", cli.script(m3.answer("x")), repo), command=CONSOLE_SCRIPT)
    assert r.returncode == 2, r.stderr
    assert "[web_fetch] 'not a domain' is not a domain name or address" in r.stderr
    assert "Traceback" not in r.stderr
