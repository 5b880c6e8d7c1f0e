#!/usr/bin/env bash
# One call on the GPU machine (repository root, .gpu carried): the stages named in $STAGES,
# consoles in $OUT.
set -uo pipefail
source benchmarks/gpu_setup.sh
R=benchmarks/results/h200-2026-12-02e
for stage in ${STAGES:-gpu}; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    gpu) timeout ${GPU_S:-300} python3 -m pytest -v -p no:cacheprovider -rf ${GPU_TESTS:-tests/gpu} \
           > $OUT/gpu_tests_${GPU_TAG:-all}.txt 2>&1
         grep -E "FAILED|ERROR|passed|failed" $OUT/gpu_tests_${GPU_TAG:-all}.txt | tail -${GPU_TAIL:-20} ;;
    f8) timeout ${F8_S:-240} python3 $R/f8_configs.py ${F8_N:-8192} 2>&1 | grep -v "^tileiras" \
          | tee $OUT/f8_configs_${F8_N:-8192}.txt | tail -12 ;;
  esac
done
echo "== end $(date -u +%T)"
