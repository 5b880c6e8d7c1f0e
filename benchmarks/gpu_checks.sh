#!/usr/bin/env bash
# One call on the GPU machine runs any of these stages, in order:
#   gpu    the GPU test suite (tests/gpu)
#   suite  the whole CPU suite's kernels on cuda:0
#   modes  the launch-mode sweep (benchmarks/execution_modes.py)
#   modes_python  the same sweep with TILESAFE_COMPILED_PATH=0 (launch path in Python)
#   quick  the benchmark suite on a few sizes      full  the whole benchmark suite
# Everything lands in $OUT/results.tar.gz (the device tool returns at most 8 files) plus the
# console. Usage, from the repository root with .gpu/ and .whl/ carried:
#   bash benchmarks/gpu_checks.sh gpu modes quick
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
WORK=/tmp/gpu-results; rm -rf "$WORK"; mkdir -p "$WORK"
source .gpu/gpu-env.sh
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PWD/src:/tmp/site:$PWD"
fi
export TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
# The compiled modules (git ignores built ones): build each here from the current source unless
# a carried build is newer than its source; without them their Python equivalents run.
INCLUDE="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
SUFFIX="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
for module in driver/_launcher:.abi3.so driver/_ledger:.abi3.so launch/_hotpath:"$SUFFIX"; do
  source_file="src/tilesafe/${module%%:*}.c" built="src/tilesafe/${module%%:*}${module#*:}"
  if ! [ "$built" -nt "$source_file" ]; then
    cc -shared -fPIC -O2 -I"$INCLUDE" "$source_file" -o "$built" \
      > "$WORK/build_$(basename "${module%%:*}").log" 2>&1 \
      || echo "$built not built (see build_$(basename "${module%%:*}").log): Python runs instead"
  fi
done
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; \
  python3 -m tilesafe info; } 2>&1 | tee "$WORK/env.txt"
for stage in "${@:-gpu modes}"; do
  case "$stage" in
    gpu) timeout 180 python3 -m pytest tests/gpu -p no:cacheprovider -rf 2>&1 \
           | tail -40 | tee "$WORK/gpu_tests.log" ;;
    suite) TILESAFE_DEVICE=cuda:0 timeout 420 python3 -m pytest tests -p no:cacheprovider \
             -rf -W ignore --ignore=tests/gpu --ignore=tests/tileir > "$WORK/suite_on_cuda.log" 2>&1
           grep -E "^FAILED|^ERROR| passed| failed" "$WORK/suite_on_cuda.log" | cut -c1-160 | tail -30 ;;
    modes|modes_python)  # a repeated stage writes to the next numbered folder
           runs=$((${runs:-0} + 1)); dir="$WORK/${stage}_$runs"; mkdir -p "$dir"
           if [ "$stage" = modes_python ]; then export TILESAFE_COMPILED_PATH=0; fi
           timeout 150 python3 -m benchmarks modes --out "$dir" 2>&1 | tee "$dir/modes.txt"
           unset TILESAFE_COMPILED_PATH ;;
    quick) timeout 250 python3 -m benchmarks elementwise gemm --quick --out "$WORK" 2>&1 \
             | tee "$WORK/bench_quick.txt" ;;
    full) timeout 575 python3 -m benchmarks all --out "$WORK" 2>&1 | tee "$WORK/bench.txt" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
tar -czf "$OUT/results.tar.gz" -C "$WORK" .
