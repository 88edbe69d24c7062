"""Fixtures for the tools tests. They live in sandbox_support.py (importable because pytest puts
tests/tools on sys.path, see pyproject.toml), which the test modules import too."""

from __future__ import annotations

from sandbox_support import servers, victim_process, world  # noqa: F401  (fixtures)
