"""The bundled M3 tokenizer (repositories come from tests/conftest.py's make_repo)."""

from __future__ import annotations

import pytest
from m3agent.engine.m3.tokenizer import M3Tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> M3Tokenizer:
    return M3Tokenizer.default()
