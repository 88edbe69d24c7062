#!/usr/bin/env bash
# One device call for issue 35: install the app (wheels carried in .whl/, built by
# `pip wheel --no-deps . -w .whl` beside its dependencies' wheels) into /tmp/site, build the
# CPU expert kernel, then run bench/one_gpu_product.py with the arguments given.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
command -v m3agent && command -v tmux && command -v bwrap && command -v rg
nproc; free -g | head -2; df -h /tmp | tail -1; nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
python3 -m m3agent.engine.offload.cpu_kernel || echo "cpu kernel: not built"
python3 bench/one_gpu_product.py --out "$OUT" "$@"
