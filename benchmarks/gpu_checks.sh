#!/usr/bin/env bash
# One call on the GPU machine: environment facts, the GPU test suite, the whole CPU suite's
# kernels on cuda:0, and the launch-mode sweep. Logs and CSVs go to $OUT (or ./gpu-out).
# Usage (from the repository root, with .gpu/ and .whl/ carried): bash benchmarks/gpu_checks.sh
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/gpu-env.sh
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PWD/src:/tmp/site"
fi
export TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; \
  python3 -m tilesafe info; } 2>&1 | tee "$OUT/env.txt"
stage=${1:-all}
if [ "$stage" = all ] || [ "$stage" = gpu ]; then
  timeout 300 python3 -m pytest tests/gpu -q -p no:cacheprovider -x -rf 2>&1 | tail -60 \
    | tee "$OUT/gpu_tests.log"
fi
if [ "$stage" = all ] || [ "$stage" = suite ]; then
  TILESAFE_DEVICE=cuda:0 timeout 420 python3 -m pytest tests -q -p no:cacheprovider -rf \
    -W ignore --ignore=tests/gpu --ignore=tests/tileir > "$OUT/suite_on_cuda.log" 2>&1
  grep -E "^FAILED|^ERROR| passed| failed" "$OUT/suite_on_cuda.log" | cut -c1-160 | tail -45
fi
if [ "$stage" = all ] || [ "$stage" = modes ]; then
  timeout 200 python3 benchmarks/execution_modes.py --device cuda:0 --out "$OUT" 2>&1 \
    | tee "$OUT/execution_modes.txt"
fi
