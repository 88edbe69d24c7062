#!/usr/bin/env bash
# One device call for issue 35: install the app (wheels carried in .whl/, built by
# `pip wheel --no-deps . -w .whl` beside its dependencies' wheels) into /tmp/site once, build
# the CPU expert kernel (in the background while a --tiny run needs none), then run
# bench/one_gpu_product.py with the arguments given. A background serve the run leaves behind
# (one cut short by `timeout`) is stopped, so the next run in the same call gets the whole GPU.
set -uo pipefail
# one kernel cache for the background build and the harness's own HOME
export M3AGENT_KERNEL_CACHE=${M3AGENT_KERNEL_CACHE:-/tmp/m3kernels}
if [ ! -x /tmp/site/bin/m3agent ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
  (python3 -m m3agent.engine.offload.cpu_kernel > /tmp/cpu_kernel.log 2>&1 &)
  nproc; free -g | head -2; df -h /tmp | tail -1
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
python3 bench/one_gpu_product.py --out "$OUT" "$@"
rc=$?
pkill -TERM -f "m3agent.app.cli serve" && sleep 3
exit $rc
