"""Helpers shared by test areas, imported relatively (`from ..support.cli import run_cli`):
with --import-mode=importlib a conftest.py is not importable, and these are plain functions."""
