"""OAuth for HTTP MCP servers, through the installed console script: `m3agent mcp login`
against a real authorization server and MCP servers on 127.0.0.1 (oauth_servers.py), the
browser step done by an HTTP client following the redirect, then `m3agent run` using the
stored token. The attacks come first, each with its control."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from m3agent.tools.mcp import mcp_hub
from mcp_support import answer, calls, invoke

M3AGENT = str(Path(sys.executable).parent / "m3agent")
SERVERS = Path(__file__).with_name("oauth_servers.py")
URL_LINE = re.compile(r"^\s+(http://127\.0\.0\.1:\d+/authorize\?\S+)$", re.M)


class World:
    """The servers of one test, their event log, and m3agent's home and config."""

    def __init__(self, tmp: Path, **settings) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.repo = tmp / "repo"
        self.repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(self.repo)], check=True)
        self.events_path = tmp / "events.jsonl"
        self.events_path.touch()
        cfg = tmp / "servers.json"
        cfg.write_text(json.dumps({"events": str(self.events_path), **settings}))
        ports_file = tmp / "ports.json"
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVERS), str(cfg), str(ports_file)],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "servers.err", "w"),
        )
        self.ports = self._wait(ports_file)
        self.mcp_url = f"http://127.0.0.1:{self.ports['mcp_port']}/mcp"
        self.plain_url = f"http://127.0.0.1:{self.ports['plain_port']}/mcp"
        self.config = tmp / "mcp.json"
        self.write_config(secure=self.mcp_url, plain=self.plain_url)

    def _wait(self, ports_file: Path) -> dict[str, int]:
        """The ports the servers listen on, once they all do (they pick them themselves)."""
        deadline = time.monotonic() + 120  # importing uvicorn+mcp on a loaded machine
        while time.monotonic() < deadline:
            if ports_file.exists():
                return json.loads(ports_file.read_text())
            if self.proc.poll() is not None:
                raise RuntimeError((self.tmp / "servers.err").read_text())
            time.sleep(0.05)
        raise RuntimeError("the OAuth test servers did not start")

    def write_config(self, **urls: str) -> None:
        servers = {name: {"type": "http", "url": url} for name, url in urls.items()}
        self.config.write_text(json.dumps({"mcpServers": servers}))

    def env(self) -> dict[str, str]:
        env = {**os.environ, "M3AGENT_HOME": str(self.home)}
        env.pop("M3AGENT_CONFIG", None)
        env.pop("DISPLAY", None)
        env.pop("WAYLAND_DISPLAY", None)
        return env

    def events(self, **match) -> list[dict]:
        rows = [json.loads(line) for line in self.events_path.read_text().splitlines()]
        return [r for r in rows if all(r.get(k) == v for k, v in match.items())]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    # ---- m3agent ------------------------------------------------------------------------

    def start_login(self, name: str = "secure", *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            [M3AGENT, "mcp", "login", name, "--mcp-config", str(self.config), "--no-browser"]
            + ["--timeout", "120", *extra],
            cwd=self.repo,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def authorization_url(self, login: subprocess.Popen) -> str:
        seen = ""
        while True:
            line = login.stderr.readline()
            if not line:
                out, err = login.communicate(timeout=30)
                raise AssertionError(f"no URL printed: {seen}{err} (rc {login.returncode})")
            seen += line
            m = URL_LINE.match(line.rstrip("\n"))
            if m:
                return m.group(1)

    def login(self, name: str = "secure") -> subprocess.CompletedProcess:
        """The whole login, the test acting as the browser."""
        proc = self.start_login(name)
        url = self.authorization_url(proc)
        redirect = browser_step(url)
        assert httpx.get(redirect, timeout=10).status_code == 200
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def run(self, *tools: str) -> subprocess.CompletedProcess:
        if self.proc.poll() is not None:  # else every server reads as unreachable
            raise RuntimeError((self.tmp / "servers.err").read_text())
        script = self.tmp / "script.json"
        script.write_text(
            json.dumps([calls(*(invoke(f"mcp__{t}__hello") for t in tools)), answer("done")])
        )
        return subprocess.run(
            [M3AGENT, "run", "--engine", "scripted", "--script", str(script)]
            + ["--mcp-config", str(self.config), "--approval", "never", "-t", "enabled"]
            + ["--output-format", "stream-json", "hello"],
            cwd=self.repo,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def token_file(self, name: str = "secure") -> Path:
        return self.home / "mcp-oauth" / f"{name}.json"


def browser_step(url: str) -> str:
    """GET the authorization URL like a browser and return where it redirects."""
    r = httpx.get(url, follow_redirects=False, timeout=10)
    assert r.status_code == 302, r.text
    return r.headers["location"]


def tool_outputs(run: subprocess.CompletedProcess) -> dict[str, str]:
    out = {}
    for line in run.stdout.splitlines():
        e = json.loads(line)
        if e.get("type") == "tool_call_finished":
            out[e["name"]] = e.get("output", "")
    return out


@pytest.fixture
def world(tmp_path):
    made = []

    def make(**settings) -> World:
        w = World(tmp_path / f"w{len(made)}", **settings)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


# ---- attacks, each with its control ------------------------------------------------------


def test_a_redirect_with_a_wrong_state_is_refused_and_the_login_keeps_waiting(world):
    w = world()
    login = w.start_login()
    url = w.authorization_url(login)
    redirect = browser_step(url)
    port = re.match(r"http://127\.0\.0\.1:(\d+)/callback", redirect).group(1)
    # an attacker's page aims its own code at the listener: wrong state, then no state
    forged = f"http://127.0.0.1:{port}/callback?code=code-forged&state=not-the-state"
    r = httpx.get(forged, timeout=10)
    assert r.status_code == 400 and "state does not match" in r.text
    assert httpx.get(f"http://127.0.0.1:{port}/callback?code=x", timeout=10).status_code == 400
    assert login.poll() is None  # still waiting for the real redirect
    # control: the real redirect completes the login
    assert httpx.get(redirect, timeout=10).status_code == 200
    out, err = login.communicate(timeout=120)
    assert login.returncode == 0, err
    assert "logged in to MCP server secure: 1 tools" in out
    grants = w.events(at="as", what="token")
    assert [g["code"] for g in grants] != [] and "code-forged" not in {g["code"] for g in grants}


def test_a_token_endpoint_on_another_origin_gets_no_code(world):
    w = world(token_endpoint_origin="evil")
    login = w.start_login()
    url = w.authorization_url(login)
    httpx.get(browser_step(url), timeout=10)
    _, err = login.communicate(timeout=120)
    assert login.returncode == 6
    assert "would send the token request to http://127.0.0.1:" in err and "refused" in err
    assert "Traceback" not in err and err.count("error:") == 1
    assert w.events(at="evil") == []  # neither the code nor the PKCE verifier went there
    assert not w.token_file().exists()
    # control: the same flow with the token endpoint on the AS's origin logs in
    ok = world()
    assert ok.login().returncode == 0


def test_a_server_that_names_another_resource_gets_no_login(world):
    # secure's metadata claims another server's resource: a token for that server would be
    # minted and handed to secure, which could replay it there
    w = world(resource="http://127.0.0.1:9/other/mcp")
    login = w.start_login()
    _, err = login.communicate(timeout=120)
    assert login.returncode == 6 and "does not match" in err, err
    assert w.events(at="as", what="authorize") == [] and w.events(at="as", what="token") == []
    # control: its own resource
    assert world().login().returncode == 0


def test_token_file_is_private_and_never_written_through_a_symlink(world):
    w = world()
    w.token_file().parent.mkdir(parents=True)
    target = w.tmp / "stolen.json"
    w.token_file().symlink_to(target)
    r = w.login()
    assert r.returncode == 0, r.stderr
    assert not target.exists()  # the link was replaced, not followed
    assert not w.token_file().is_symlink()
    # control: the file m3agent wrote is 0600 in a 0700 directory, even under umask 000
    os.unlink(w.token_file())
    old = os.umask(0)
    try:
        r = w.login()
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(w.token_file().stat().st_mode) == 0o600
    assert stat.S_IMODE(w.token_file().parent.stat().st_mode) == 0o700
    # a copy an older tool left readable is made private again when it is read
    os.chmod(w.token_file(), 0o644)
    assert w.run("secure").returncode == 0
    assert stat.S_IMODE(w.token_file().stat().st_mode) == 0o600


def test_the_token_for_one_server_never_reaches_another(world):
    w = world()
    assert w.login().returncode == 0
    run = w.run("secure", "plain")
    assert run.returncode == 0, run.stderr
    outs = tool_outputs(run)
    assert "hello from secure" in outs["mcp__secure__hello"]
    assert "hello from plain" in outs["mcp__plain__hello"]
    (issued,) = w.events(at="as", what="issued")
    bearer = f"Bearer {issued['access_token']}"
    assert bearer in {e["authorization"] for e in w.events(at="secure")}  # control
    assert {e["authorization"] for e in w.events(at="plain")} == {None}
    # the config re-points `secure` at the plain server: the stored token is for the old URL
    w.write_config(secure=w.plain_url)
    assert w.run("secure").returncode == 0
    assert {e["authorization"] for e in w.events(at="plain")} == {None}
    # never in the repository, the session logs or the output
    token = issued["access_token"]
    for root in (w.repo, w.home):
        for p in root.rglob("*"):
            if p.is_file() and p != w.token_file():
                assert token not in p.read_text(errors="replace"), p
    assert token not in run.stdout + run.stderr


# ---- the flow ----------------------------------------------------------------------------


def test_headless_run_says_how_to_log_in_then_works_after_login(world):
    w = world()
    before = w.run("secure")
    assert before.returncode == 6
    assert "MCP server secure needs a login: run `m3agent mcp login secure`" in before.stderr
    assert w.events(at="as") == []  # a session never registers a client or opens a browser
    (w.home / "config.toml").write_text(f'[mcp_servers.secure]\nurl = "{w.mcp_url}"\n')
    doctor = subprocess.run(
        [M3AGENT, "doctor", "--json", "--engine", "scripted"],
        cwd=w.repo,
        env=w.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    (row,) = [r for r in json.loads(doctor.stdout)["mcp"] if r["name"] == "secure"]
    assert row["state"] == "failed" and "run `m3agent mcp login secure`" in row["detail"]
    r = w.login()
    assert r.returncode == 0, r.stderr
    assert f"token in {w.token_file()}" in r.stdout
    (reg,) = w.events(at="as", what="register")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/callback", reg["redirect_uris"][0])
    (auth,) = w.events(at="as", what="authorize")
    assert auth["resource"] == w.mcp_url
    after = w.run("secure")
    assert after.returncode == 0, after.stderr
    assert "hello from secure" in tool_outputs(after)["mcp__secure__hello"]


def test_an_expired_token_is_refreshed_without_a_browser(world):
    w = world(expires_in=1)
    assert w.login().returncode == 0
    time.sleep(1.5)
    run = w.run("secure")
    assert run.returncode == 0, run.stderr
    assert "hello from secure" in tool_outputs(run)["mcp__secure__hello"]
    grants = [e["grant_type"] for e in w.events(at="as", what="token")]
    assert grants == ["authorization_code", "refresh_token"]
    assert w.events(at="secure", path="/token") == []  # the refresh went to the AS it came from
    stored = json.loads(w.token_file().read_text())
    assert stored["tokens"]["access_token"] == w.events(at="as", what="issued")[-1]["access_token"]


def test_a_refused_refresh_asks_for_a_login_in_one_line(world):
    w = world(expires_in=1)
    assert w.login().returncode == 0
    record = json.loads(w.token_file().read_text())
    record["tokens"]["refresh_token"] = "rt-revoked"
    w.token_file().write_text(json.dumps(record))
    time.sleep(1.5)
    run = w.run("secure")
    assert run.returncode == 6
    assert "MCP server secure needs a login: run `m3agent mcp login secure`" in run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("error:") == 1, run.stderr


def test_get_shows_the_login_and_logout_forgets_the_token(world):
    w = world()
    assert w.login().returncode == 0
    (w.home / "config.toml").write_text(f'[mcp_servers.secure]\nurl = "{w.mcp_url}"\n')
    got = subprocess.run(
        [M3AGENT, "mcp", "get", "secure", "--json"], env=w.env(), capture_output=True, text=True
    )
    oauth = json.loads(got.stdout)["oauth"]
    assert oauth["logged_in"] and oauth["refreshable"] and oauth["expires_at"] > time.time()
    assert "at-" not in got.stdout  # no token in what it prints
    r = subprocess.run(
        [M3AGENT, "mcp", "logout", "secure"], env=w.env(), capture_output=True, text=True
    )
    assert r.returncode == 0 and not w.token_file().exists()
    assert w.run("secure").returncode == 6


def test_an_interactive_session_goes_on_without_the_server_and_says_why(
    world, open_session, drive, monkeypatch
):
    # the TUI's path (build_session without mcp_login_fatal): one line, the other server stays
    from m3agent.app.settings import load_settings

    w = world()
    monkeypatch.setenv("M3AGENT_HOME", str(w.home))
    monkeypatch.delenv("M3AGENT_CONFIG", raising=False)
    settings = load_settings().override(mcp_config_files=(str(w.config),))
    session = open_session(settings, w.repo, [calls(invoke("mcp__plain__hello")), answer("ok")])
    states = {s.name: s for s in mcp_hub(session.toolset).statuses()}
    assert states["secure"].state.value == "failed"
    assert "needs a login: run `m3agent mcp login secure`" in states["secure"].detail
    assert states["plain"].state.value == "ready"
    events, done = drive(session, "hi")
    assert done.reason == "done"
    assert w.events(at="as") == []
