"""The config's [sandbox] path rules, enforced by the layers and the file tools.

Each rule is tried by a real command (with and without bubblewrap) and a file tool, and
asserted on the outside effect (the file read, written or left alone); each control is the
same attempt without the rule, which must go the other way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.sandbox.rules import SandboxRules
from m3agent.tools.toolset import default_toolset
from sandbox_support import CONFIGS, make_sandbox


def _sb(config, world, **rules):
    fields = SandboxRules(**rules).policy_fields(home=world.home) if rules else {}
    return make_sandbox(config, world, fields)


def _sh(sb, script: str, cwd: Path):
    return sb.run(["sh", "-c", script], cwd=cwd, timeout_s=30)


@pytest.fixture
def scene(world):
    (world.ws / "private").mkdir()
    (world.ws / "private" / "notes.txt").write_text("PRIVATE-NOTES\n")
    (world.ws / "vendor").mkdir()
    (world.ws / "vendor" / "lib.py").write_text("v = 1\n")
    (world.home / "datasets").mkdir()
    (world.home / "datasets" / "d.csv").write_text("DATASET-ROW\n")
    return world


@pytest.mark.parametrize("ruled", [True, False], ids=["rule", "control"])
@pytest.mark.parametrize("config", CONFIGS)
def test_deny_read(scene, config, ruled):
    rules = {"deny_read": [str(scene.ws / "private")]} if ruled else {}
    sb = _sb(config, scene, **rules)
    r = _sh(sb, "cat private/notes.txt", scene.ws)
    assert ("PRIVATE-NOTES" in r.stdout) is not ruled, (r.stdout, r.stderr)
    t = default_toolset().dispatch(
        "read_file", {"path": "private/notes.txt"}, ToolContext(cwd=scene.ws, sandbox=sb)
    )
    assert ("PRIVATE-NOTES" in t.output) is not ruled, t.output


@pytest.mark.parametrize("ruled", [True, False], ids=["rule", "control"])
@pytest.mark.parametrize("config", CONFIGS)
def test_deny_write(scene, config, ruled):
    rules = {"deny_write": [str(scene.ws / "vendor")]} if ruled else {}
    sb = _sb(config, scene, **rules)
    _sh(sb, "echo 'v = 2' > vendor/lib.py; echo new > vendor/new.py", scene.ws)
    changed = (scene.ws / "vendor" / "lib.py").read_text() != "v = 1\n"
    assert changed is not ruled
    assert (scene.ws / "vendor" / "new.py").exists() is not ruled
    t = default_toolset().dispatch(
        "write_file",
        {"path": "vendor/lib.py", "content": "v = 3\n"},
        ToolContext(cwd=scene.ws, sandbox=sb),
    )
    assert t.is_error is ruled, t.output
    if ruled:
        assert (
            "deny_write" in t.output and (scene.ws / "vendor" / "lib.py").read_text() == "v = 1\n"
        )


@pytest.mark.parametrize("ruled", [True, False], ids=["rule", "control"])
@pytest.mark.parametrize("config", CONFIGS)
def test_allow_read_under_hidden_home(scene, config, ruled):
    rules = {"allow_read": ["~/datasets"]} if ruled else {}
    sb = _sb(config, scene, **rules)
    r = _sh(sb, f"cat {scene.home}/datasets/d.csv; echo x > {scene.home}/datasets/w", scene.ws)
    assert ("DATASET-ROW" in r.stdout) is ruled, (r.stdout, r.stderr)
    assert not (scene.home / "datasets" / "w").exists()  # read-only either way


@pytest.mark.parametrize("ruled", [True, False], ids=["rule", "control"])
@pytest.mark.parametrize("config", CONFIGS)
def test_allow_write_outside(scene, config, ruled):
    rules = {"allow_write": [str(scene.outside)]} if ruled else {}
    sb = _sb(config, scene, **rules)
    _sh(sb, f"echo changed > {scene.outside}/victim.txt", scene.ws)
    assert ((scene.outside / "victim.txt").read_text() == "changed\n") is ruled


def test_secrets_stay_secret_under_allow_read(scene):
    sb = _sb("bwrap", scene, allow_read=["~/.ssh"])
    r = _sh(sb, f"cat {scene.home}/.ssh/id_rsa", scene.ws)
    assert "TOP-SECRET" not in r.stdout


@pytest.mark.parametrize(
    "table, message",
    [
        ({"network": "sometimes"}, "network"),
        ({"network": "allowlist"}, "allowed_domains"),
        ({"allowed_domains": ["not a domain"]}, "not a domain name"),
        ({"deny_read": ["relative/path"]}, "absolute"),
        ({"allow_write": "/one"}, "list of strings"),
        ({"colour": "blue"}, "unknown setting"),
    ],
)
def test_bad_tables_are_one_line_errors(table, message):
    with pytest.raises(ValueError, match=message) as e:
        SandboxRules.from_table(table)
    assert "\n" not in str(e.value)


def test_config_table_reaches_doctor(tmp_path, scene):
    home = tmp_path / "m3home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[sandbox]\nmode = "workspace-write"\n'
        f'deny_read = ["{scene.ws}/private"]\ndeny_write = ["{scene.ws}/vendor"]\n'
        'network = "allowlist"\nallowed_domains = ["pypi.org"]\n'
    )
    env = dict(os.environ, M3AGENT_HOME=str(home))
    env.pop("M3AGENT_CONFIG", None)
    exe = Path(sys.executable).with_name("m3agent")
    r = subprocess.run(
        [str(exe), "doctor", "--json", "--cwd", str(scene.ws)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = json.loads(r.stdout)
    rules = out["sandbox_rules"]
    assert "network allowlist (pypi.org) through the host's proxy" in rules
    assert f"deny_read {scene.ws}/private" in rules and f"deny_write {scene.ws}/vendor" in rules


def test_load_settings_reads_the_table_and_keeps_the_old_key(tmp_path):
    from m3agent.app.settings import load_settings

    cfg = tmp_path / "config.toml"
    env = {"M3AGENT_HOME": str(tmp_path), "M3AGENT_CONFIG": str(cfg)}
    cfg.write_text('sandbox = "read-only"\n')
    assert load_settings(env).sandbox == "read-only" and load_settings(env).sandbox_rules is None
    cfg.write_text('[sandbox]\nmode = "full-access"\nallow_unix_sockets = true\n')
    s = load_settings(env)
    assert s.sandbox == "full-access" and s.sandbox_rules.allow_unix_sockets is True
    cfg.write_text('[sandbox]\nnetwork = "allowlist"\n')
    with pytest.raises(ValueError, match="needs allowed_domains") as e:
        load_settings(env)
    assert str(cfg) in str(e.value) and "\n" not in str(e.value)
