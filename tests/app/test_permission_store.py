"""<home>/permissions.json has one reader and writer (app/permission_store.py): each of its
three writers (an "always allow" answer, a saved shell prefix, a /permissions rule) keeps the
others' keys, through the public functions the app calls."""

from __future__ import annotations

import json

import pytest
from m3agent.app.permission_store import persist_allow, persisted_rules
from m3agent.app.prefix_rules import load_prefixes, save_prefix, save_user_rule, user_rules


def test_each_writer_keeps_the_other_keys(tmp_path):
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    persist_allow(home, "web_fetch")
    save_prefix(home, ("git", "status"))
    save_user_rule(home, "edit_file(src/**)", "allow")
    persist_allow(home, "grep")
    data = json.loads((home / "permissions.json").read_text())
    assert data == {
        "allow": ["web_fetch", "grep"],
        "shell_prefixes": [["git", "status"]],
        "rules": {"edit_file(src/**)": "allow"},
    }
    assert [r.tool for r in persisted_rules(home)] == ["web_fetch", "grep"]
    assert load_prefixes(home, ws)[0] == [("git", "status")]
    assert [(r.tool, r.action) for r in user_rules(home)] == [("edit_file(src/**)", "allow")]
    assert (home / "permissions.json").stat().st_mode & 0o777 == 0o600


def test_a_broken_file_is_never_replaced_by_an_always_answer(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "permissions.json").write_text("{not json")
    with pytest.raises(ValueError, match="remove it to start over"):
        persist_allow(home, "grep")
    with pytest.raises(ValueError, match="remove it to start over"):
        persisted_rules(home)  # settings say why, instead of dropping the answers silently
    assert (home / "permissions.json").read_text() == "{not json"
    save_prefix(home, ("pytest",))  # a saved prefix starts it over, as before
    assert json.loads((home / "permissions.json").read_text()) == {"shell_prefixes": [["pytest"]]}
