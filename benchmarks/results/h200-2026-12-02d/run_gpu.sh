#!/usr/bin/env bash
# One call on the GPU machine (repository root, .gpu and .whl carried): the stages named in
# $STAGES, consoles in $OUT.
set -uo pipefail
source benchmarks/gpu_setup.sh
R=benchmarks/results/h200-2026-12-02d
for stage in ${STAGES:-gpu}; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    gpu) timeout ${GPU_S:-200} python3 -m pytest -q -p no:cacheprovider -rf ${GPU_TESTS:-tests/gpu} 2>&1 \
           | tail -8 | tee $OUT/gpu_tests_${GPU_TAG:-all}.txt ;;
    some) TILESAFE_DEVICE=cuda:0 timeout ${SOME_S:-200} python3 -m pytest ${TESTS:-} -q -p no:cacheprovider \
            -rf -W ignore 2>&1 | tail -8 | tee $OUT/some_on_cuda_${GPU_TAG:-all}.txt ;;
    tune) cp src/tilesafe/kernels/tuned/sm_90.json $OUT/sm_90.json
          timeout ${TUNE_S:-300} python3 -m tilesafe tune ${TUNE_TARGET:-$R/tune_activations.py} \
            --device cuda:0 --export $OUT/sm_90.json --arch sm_90 2>&1 | tee $OUT/tune.txt | tail -12 ;;
    export) cp src/tilesafe/kernels/tuned/sm_90.json $OUT/sm_90.json
            python3 -m tilesafe tune --export $OUT/sm_90.json --arch sm_90 2>&1 | tail -2 ;;
    ab) timeout ${AB_S:-300} python3 $R/engine_ab.py ${ROUNDS:-4} ${TOKENS:-512} 2>&1 \
          | tee $OUT/engine_ab_variants.txt | tail -10 ;;
    early) for round in 1 2; do TS_EARLY=w_early timeout ${EARLY_S:-150} python3 $R/early_micro.py 2>&1 \
             | grep -v "^tileiras" | tee -a $OUT/early_micro.txt | grep -E "early /|copy rate"; done ;;
    kv) mkdir -p /tmp/kv && timeout ${KV_S:-200} python3 $R/kv_check.py /tmp/kv 2>&1 \
          | tee $OUT/kv_check.txt | grep -v "^tileiras" | tail -24; cp /tmp/kv/*.csv $OUT/ ;;
    marginal) timeout ${MARGINAL_S:-200} python3 -m benchmarks.decode_marginal --model ${MODEL:-qwen3-4b} \
                2>&1 | grep -v Warn | tail -16 | tee $OUT/marginal_${MODEL:-qwen3-4b}_${TAG:-a}.txt ;;
    gelu) timeout ${GELU_S:-150} python3 benchmarks/results/h200-2026-12-02c/gelu_check.py $OUT 2>&1 \
            | tee $OUT/gelu.txt | tail -20 ;;
    micro) timeout ${MICRO_S:-240} python3 $R/gemv_sweep.py micro 2>&1 | tee $OUT/gemv_sweep.txt \
             | grep -E "best|copy rate|FAIL" ;;
    engine) timeout ${ENGINE_S:-240} python3 $R/gemv_sweep.py engine ${ROUNDS:-6} ${TOKENS:-512} 2>&1 \
              | tee $OUT/engine_ab.txt | tail -4 ;;
    generate) for pass in ${PASSES:-cold warm}; do
                timeout ${GEN_S:-200} python3 -m tilesafe generate --random ${MODEL:-qwen3-4b} \
                  --tokens ${TOKENS:-1024} 2>&1 | tr '\r' '\n' | grep -v "it/s\]$" \
                  | tail -14 > $OUT/generate_${MODEL:-qwen3-4b}_${TAG:-a}_$pass.txt
                grep "decode\|roofline" $OUT/generate_${MODEL:-qwen3-4b}_${TAG:-a}_$pass.txt; done ;;
    bench) timeout ${BENCH_S:-200} python3 -m benchmarks.${BENCH:-kernels_activations} --device cuda:0 \
             --out $OUT/${BENCH:-kernels_activations} ${BENCH_ARGS:---quick} 2>&1 \
             | tee $OUT/${BENCH:-kernels_activations}_console.txt | tail -20 ;;
  esac
done
echo "== end $(date -u +%T)"
