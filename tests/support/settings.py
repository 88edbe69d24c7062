"""Settings for a test that builds a session itself: its own data home, no config file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from m3agent.app.settings import Settings


def isolated_settings(tmp_path: Path, **fields: Any) -> Settings:
    """Settings with the data home tmp_path/home and a config file that does not exist
    (tmp_path/none.toml), then FIELDS."""
    return Settings(home=tmp_path / "home", config_path=tmp_path / "none.toml", **fields)
