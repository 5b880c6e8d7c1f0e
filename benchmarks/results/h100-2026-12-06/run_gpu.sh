#!/usr/bin/env bash
# One call on the GPU machine (repository root, .gpu carried): the stages named in $STAGES,
# consoles in $OUT.
set -uo pipefail
source benchmarks/gpu_setup.sh
R=benchmarks/results/h100-2026-12-06
for stage in ${STAGES:-gpu}; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    gpu) timeout ${GPU_S:-300} python3 -m pytest -v -p no:cacheprovider -rf ${GPU_TESTS:-tests/gpu} \
           > $OUT/gpu_tests_${GPU_TAG:-all}.txt 2>&1
         grep -E "FAILED|ERROR|passed|failed" $OUT/gpu_tests_${GPU_TAG:-all}.txt | tail -${GPU_TAIL:-20} ;;
    checks) timeout ${CHECKS_S:-200} python3 -m benchmarks checks_cost --out $OUT 2>&1 \
              | grep -v "^tileiras" | tail -12 ;;
    f8) timeout ${F8_S:-240} python3 $R/f8_promoted.py ${F8_N:-8192} 2>&1 | grep -v "^tileiras" \
          | tee $OUT/f8_promoted_${F8_N:-8192}.txt | tail -14 ;;
    lifetime) for mode in on off; do
                timeout 60 python3 $R/lifetime_probe.py $mode 2>&1 | grep "^retention" \
                  | tee -a $OUT/lifetime_probe.txt
              done ;;
    histogram) timeout ${HIST_S:-150} python3 -m benchmarks histogram --quick --out $OUT 2>&1 \
                 | grep -v "^tileiras" | tail -14 ;;
    indexed) timeout ${INDEXED_S:-200} python3 -m benchmarks indexed --out $OUT 2>&1 \
               | grep -v "^tileiras" | tail -24 ;;
  esac
done
echo "== end $(date -u +%T)"
