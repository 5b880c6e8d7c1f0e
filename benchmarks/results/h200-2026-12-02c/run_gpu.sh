#!/usr/bin/env bash
# One call on the GPU machine (repository root, .gpu and .whl carried): the stages named in
# $STAGES, consoles in $OUT.
set -uo pipefail
source .gpu/gpu-env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH="$PWD/src:/tmp/site:$PWD"
export TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
INCLUDE="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
SUFFIX="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
for m in driver/_launcher driver/_ledger; do
  cc -shared -fPIC -O2 -I"$INCLUDE" src/tilesafe/$m.c -o src/tilesafe/$m.abi3.so; done
cc -shared -fPIC -O2 -I"$INCLUDE" src/tilesafe/fastpath/*.c -o src/tilesafe/_fastpath$SUFFIX
R=benchmarks/results/h200-2026-12-02c
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u;
  python3 -m tilesafe info; } > $OUT/env.txt 2>&1
for stage in ${STAGES:-gpu flash gelu}; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    gpu) timeout ${GPU_S:-200} python3 -m pytest -q -p no:cacheprovider -rf ${GPU_TESTS:-tests/gpu} 2>&1 \
           | tail -8 | tee $OUT/gpu_tests_${GPU_TAG:-all}.txt ;;
    some) TILESAFE_DEVICE=cuda:0 timeout ${SOME_S:-200} python3 -m pytest ${TESTS:-} -q -p no:cacheprovider \
            -rf -W ignore 2>&1 | tail -8 | tee $OUT/some_on_cuda_${GPU_TAG:-all}.txt ;;
    flash) timeout ${FLASH_S:-300} python3 $R/flash_fma.py $OUT 2>&1 | tee $OUT/flash_fma.txt ;;
    lazy) timeout ${FLASH_S:-300} python3 $R/flash_fma.py $OUT lazy 2>&1 | tee $OUT/flash_lazy.txt ;;
    pipelined) timeout ${FLASH_S:-300} python3 $R/flash_fma.py $OUT pipelined 2>&1 | tee $OUT/flash_pipelined.txt ;;
    silu) timeout ${SILU_S:-120} python3 $R/silu_gemv.py 2>&1 | tee $OUT/silu_gemv.txt | tail -14 ;;
    embed) timeout ${EMBED_S:-150} python3 $R/embed_check.py $OUT 2>&1 | tee $OUT/embed.txt | tail -20 ;;
    gelu) timeout ${GELU_S:-150} python3 $R/gelu_check.py $OUT 2>&1 | tee $OUT/gelu.txt | tail -25 ;;
    tune) cp src/tilesafe/kernels/tuned/sm_90.json $OUT/sm_90.json
          timeout ${TUNE_S:-300} python3 -m tilesafe tune $R/tune_flash.py --device cuda:0 \
            --export $OUT/sm_90.json --arch sm_90 2>&1 | tee $OUT/tune.txt | tail -20 ;;
    bench) timeout ${BENCH_S:-200} python3 -m benchmarks.kernels_attention --device cuda:0 \
             --out $OUT/attention ${BENCH_ARGS:---quick} 2>&1 | tee $OUT/attention_console.txt | tail -20 ;;
  esac
done
echo "== end $(date -u +%T)"
