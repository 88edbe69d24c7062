"""Settings precedence (defaults < file < env < flags) and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from m3agent.agent.config import ToolRule
from m3agent.app.settings import load_settings


def test_defaults_use_the_home_from_env(tmp_path):
    s = load_settings({"M3AGENT_HOME": str(tmp_path)})
    assert s.sessions_dir == tmp_path / "sessions"
    assert s.config_path == tmp_path / "config.toml"
    assert (s.engine, s.thinking, s.approval, s.sandbox) == (
        "native",
        "adaptive",
        "on-request",
        "workspace-write",
    )


def test_file_then_env_then_flags(tmp_path):
    (tmp_path / "config.toml").write_text(
        'engine = "remote"\nmodel = "m3"\nthinking = "enabled"\nmax_turns = 7\n'
        '[tools]\nshell = "ask"\n"*" = "allow"\n'
    )
    env = {"M3AGENT_HOME": str(tmp_path), "M3AGENT_THINKING": "disabled"}
    s = load_settings(env)
    assert (s.engine, s.model, s.thinking, s.max_turns) == ("remote", "m3", "disabled", 7)
    assert s.rules == (ToolRule("shell", "ask"), ToolRule("*", "allow"))
    f = s.override(thinking="adaptive", max_turns=None, engine="scripted")
    assert (f.thinking, f.max_turns, f.engine) == ("adaptive", 7, "scripted")
    cfg = f.agent_config()
    assert cfg.max_turns == 7 and cfg.thinking_default == "adaptive"


def test_explicit_config_path_and_api_key(tmp_path):
    cfg = tmp_path / "elsewhere.toml"
    cfg.write_text('base_url = "http://10.0.0.1:8000/v1"\n')
    s = load_settings({"M3AGENT_CONFIG": str(cfg), "OPENAI_API_KEY": "sk-1"})
    assert s.base_url == "http://10.0.0.1:8000/v1" and s.api_key == "sk-1"
    assert s.config_path == cfg


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour = 1\n", "unknown setting 'colour'"),
        ("engine = 'warp'\n", "unknown engine 'warp'"),
        ("approval = 'maybe'\n", "approval policy 'maybe'"),
        ("[tools]\nshell = 'perhaps'\n", "action 'perhaps'"),
        ("engine = \n", "not valid TOML"),
        ("max_turns = 0\n", "max_turns must be at least 1"),
    ],
)
def test_bad_config_is_one_clear_line(tmp_path: Path, text, message):
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(ValueError) as ei:
        load_settings({"M3AGENT_HOME": str(tmp_path)})
    assert message in str(ei.value) and "\n" not in str(ei.value).strip()


def test_save_settings_keeps_the_tables_and_replaces_the_keys(tmp_path):
    from m3agent.app.settings import load_settings, save_settings

    path = tmp_path / "config.toml"
    path.write_text('engine = "native"\napproval = "untrusted"\n[tools]\nshell = "ask"\n')
    save_settings(path, {"engine": "remote", "base_url": "http://h:1/v1", "model": "m\\"})
    settings = load_settings({"M3AGENT_CONFIG": str(path), "M3AGENT_HOME": str(tmp_path)})
    assert (settings.engine, settings.base_url, settings.model) == (
        "remote",
        "http://h:1/v1",
        "m\\",
    )
    assert settings.approval == "untrusted" and [r.tool for r in settings.rules] == ["shell"]
    assert path.stat().st_mode & 0o777 == 0o600
