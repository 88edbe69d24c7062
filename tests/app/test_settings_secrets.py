"""API keys read from the environment leave it: children and /proc/<agent>/environ lack them."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import os, subprocess, sys
from m3agent.app.settings import load_settings
s = load_settings()
assert s.api_key == "sk-test-SECRET-1", s.api_key
print("env", "OPENAI_API_KEY" in os.environ, "M3AGENT_API_KEY" in os.environ)
print("proc", b"SECRET-" in open("/proc/self/environ", "rb").read())
print("child", subprocess.run(["env"], capture_output=True, text=True).stdout.count("SECRET-"))
"""


def test_keys_are_taken_out_of_the_environment(tmp_path):
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-test-SECRET-2",
        "M3AGENT_API_KEY": "sk-test-SECRET-1",
        "M3AGENT_HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["env False False", "proc False", "child 0"], out.stdout


def test_control_the_keys_are_there_before(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-SECRET-2"}
    out = subprocess.run(
        [sys.executable, "-c", 'print(open("/proc/self/environ","rb").read().count(b"SECRET-"))'],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "1"
