#!/usr/bin/env bash
# One call on the GPU machine (repository root, .gpu and .whl carried): the stages named in
# $STAGES (gpu, micro, engine, smarginal, marginal, decode), consoles in $OUT.
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
R=benchmarks/results/h200-2026-12-02b
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u;
  python3 -m tilesafe info; } > $OUT/env.txt 2>&1
for stage in ${STAGES:-gpu micro engine}; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    gpu) timeout ${GPU_S:-200} python3 -m pytest -q -p no:cacheprovider -rf ${GPU_TESTS:-tests/gpu} 2>&1 \
           | tail -8 | tee $OUT/gpu_tests.txt ;;
    micro) timeout ${MICRO_S:-200} python3 $R/static_shape.py micro ${MODEL:-qwen3-4b} 2>&1 \
             | tee $OUT/micro_${MODEL:-qwen3-4b}.txt | grep -E "copy|FAIL|us" ;;
    engine) timeout ${ENGINE_S:-200} python3 $R/static_shape.py engine ${MODEL:-qwen3-4b} ${ROUNDS:-3} \
              ${TOKENS:-512} 2>&1 | tee $OUT/engine_ab_${MODEL:-qwen3-4b}.txt | tail -6 ;;
    smarginal) timeout ${MARGINAL_S:-150} python3 $R/static_shape.py marginal ${MODEL:-qwen3-4b} 2>&1 \
                 | tee $OUT/marginal_${MODEL:-qwen3-4b}.txt | grep -E "^#|gemv" ;;
    marginal) timeout ${MARGINAL_S:-150} python3 -m benchmarks.decode_marginal --model ${MODEL:-qwen3-4b} \
                --device cuda:0 2>&1 | tee $OUT/marginal_${MODEL:-qwen3-4b}.txt | head -30 ;;
    decode) timeout ${DECODE_S:-200} python3 -m benchmarks.decode --models ${MODELS:-qwen3-4b} \
              --lengths 1024 --references "" --device cuda:0 --out $OUT/decode 2>&1 \
              | tee $OUT/decode_console.txt | tail -6 ;;
  esac
done
echo "== end $(date -u +%T)"
