#!/usr/bin/env bash
# CUDA checks on a GPU machine (the device tool): wheels from .whl/ (rl-sentinel built here plus
# the few packages that image lacks), then the fault corpus and isolation tests on cuda, and
# benchmarks/gpu_check.py (catalog cpu vs cuda, no state leak, timeouts). Prepare here with:
#   pip wheel --no-deps . -w .whl && pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl \
#     pydantic pydantic-core annotated-types typing-inspection gitpython gitdb smmap typing-extensions
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
SENTINEL_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_faults.py tests/test_isolation.py 2>&1 | tail -15
python3 benchmarks/gpu_check.py
