#!/usr/bin/env bash
# One call on the GPU machine runs any of these stages, in order:
#   gpu    the GPU test suite (tests/gpu)
#   suite  the whole CPU suite's kernels on cuda:0
#   some   the CPU test files named in $TESTS (space-separated) on cuda:0
#   modes  the launch-mode sweep (benchmarks/execution_modes.py)
#   modes_python  the same sweep with TILESAFE_COMPILED_PATH=0 (launch path in Python)
#   modes_old  the sweep of an earlier checkout placed at .old/ (see below), to compare
#   quick  the benchmark suite on a few sizes (about 5 minutes: the GEMM search compiles 32
#          configurations)      full  the whole benchmark suite
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
# a carried build is newer than its sources; without them their Python equivalents run.
INCLUDE="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
SUFFIX="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
build() {  # build OUTPUT SOURCE... (C files are compiled, the others only dated)
  local out=$1 source stale=0; shift
  for source in "$@"; do [ "$out" -nt "$source" ] || stale=1; done
  [ "$stale" = 1 ] || return 0
  cc -shared -fPIC -O2 -I"$INCLUDE" $(printf '%s\n' "$@" | grep '\.c$') -o "$out" \
    > "$WORK/build_$(basename "$out").log" 2>&1 \
    || echo "$out not built (see build_$(basename "$out").log): Python runs instead"
}
build_tree() {  # the compiled modules of the checkout at $1 (this one, or an older one)
  local root=$1/src/tilesafe module
  for module in driver/_launcher:.abi3.so driver/_ledger:.abi3.so \
                runtime/_launcher:.abi3.so runtime/_ledger:.abi3.so exec/_hotpath:"$SUFFIX"; do
    if [ -f "$root/${module%%:*}.c" ]; then
      build "$root/${module%%:*}${module#*:}" "$root/${module%%:*}.c"
    fi
  done
  if [ -d "$root/fastpath" ]; then build "$root/_fastpath$SUFFIX" "$root"/fastpath/*.[ch]; fi
}
build_tree .
# .old/ may hold a checkout of an earlier commit (e.g. `git archive <commit> src benchmarks |
# tar -x -C .old`, ignored by git, carried): the stage modes_old runs its sweep in the same
# call, to compare.
if [ -d .old/src/tilesafe ]; then build_tree .old; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; \
  python3 -m tilesafe info; } 2>&1 | tee "$WORK/env.txt"
for stage in "${@:-gpu modes}"; do
  case "$stage" in
    gpu) timeout 180 python3 -m pytest tests/gpu -p no:cacheprovider -rf 2>&1 \
           | tail -40 | tee "$WORK/gpu_tests.log"
         TILESAFE_COMPILED_PATH=0 timeout 180 python3 -m pytest tests/gpu -p no:cacheprovider \
           -rf 2>&1 | tail -20 | tee "$WORK/gpu_tests_python_path.log" ;;
    suite) TILESAFE_DEVICE=cuda:0 timeout 420 python3 -m pytest tests -p no:cacheprovider \
             -rf -W ignore --ignore=tests/gpu --ignore=tests/tileir > "$WORK/suite_on_cuda.log" 2>&1
           grep -E "^FAILED|^ERROR| passed| failed" "$WORK/suite_on_cuda.log" | cut -c1-160 | tail -30 ;;
    some) TILESAFE_DEVICE=cuda:0 timeout 300 python3 -m pytest ${TESTS:-} -p no:cacheprovider \
            -rf -W ignore > "$WORK/some_on_cuda.log" 2>&1
          grep -E "^FAILED|^ERROR| passed| failed" "$WORK/some_on_cuda.log" | cut -c1-160 | tail -30 ;;
    modes|modes_python)  # a repeated stage writes to the next numbered folder
           runs=$((${runs:-0} + 1)); dir="$WORK/${stage}_$runs"; mkdir -p "$dir"
           if [ "$stage" = modes_python ]; then export TILESAFE_COMPILED_PATH=0; fi
           timeout 150 python3 -m benchmarks modes --out "$dir" 2>&1 | tee "$dir/modes.txt"
           unset TILESAFE_COMPILED_PATH ;;
    modes_old)  # the sweep of the checkout at .old/, in this same call
           runs=$((${runs:-0} + 1)); dir="$WORK/${stage}_$runs"; mkdir -p "$dir"
           (cd .old && PYTHONPATH="$PWD/src:/tmp/site:$PWD" timeout 150 python3 -m benchmarks \
              modes --out "$dir") 2>&1 | tee "$dir/modes.txt" ;;
    quick) timeout 500 python3 -m benchmarks elementwise gemm --quick --out "$WORK" 2>&1 \
             | tee "$WORK/bench_quick.txt" ;;
    full) timeout 575 python3 -m benchmarks all --out "$WORK" 2>&1 | tee "$WORK/bench.txt" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
tar -czf "$OUT/results.tar.gz" -C "$WORK" .
