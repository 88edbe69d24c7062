"""Fixtures for the tools tests (they live in support.py, which test modules load too)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_support():
    name = "m3agent_tools_test_support"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("support.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


_support = load_support()
world = _support.world
servers = _support.servers
victim_process = _support.victim_process
