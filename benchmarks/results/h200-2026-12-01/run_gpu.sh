#!/usr/bin/env bash
# One call on the GPU machine (repository root, .gpu and .whl carried): the embedding tests on
# cuda:0, the embedding benchmark (whole vs clamped columns, first config for both), its
# tuning and export, the GEMV stage sweep, and the 4b step A/B. Consoles land in $OUT.
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
R=benchmarks/results/h200-2026-12-01
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u;
  python3 -m tilesafe info; } > $OUT/env.txt 2>&1
for stage in ${STAGES:-tests bench tune micro engine4}; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    gpu) timeout 200 python3 -m pytest -q -p no:cacheprovider -rf tests/gpu 2>&1 | tail -8 \
           | tee $OUT/gpu_tests.txt ;;
    tests) TILESAFE_DEVICE=cuda:0 timeout 120 python3 -m pytest -q -p no:cacheprovider \
             tests/kernels/test_kernels_embedding.py 2>&1 | tail -5 | tee $OUT/embedding_tests.txt ;;
    bench) TILESAFE_AUTOTUNE=0 timeout 150 python3 $R/embedding/embedding_whole_columns.py \
             $OUT/embedding > $OUT/embedding_console.txt 2>&1; tail -30 $OUT/embedding_console.txt ;;
    tune) timeout 150 python3 $R/embedding/embedding_tune.py > $OUT/embedding_tune.txt 2>&1
          python3 -m tilesafe tune --export $OUT/tuned_sm_90.json --arch sm_90 >> $OUT/embedding_tune.txt 2>&1
          tail -3 $OUT/embedding_tune.txt ;;
    micro) timeout 300 python3 $R/gemv_stages/gemv_stages.py micro ${MODELS:-} 2>&1 \
             | tee $OUT/gemv_micro.txt | grep -E "best|copy|FAIL" ;;
    engine4|engine8) model=qwen3-${stage#engine}b
            timeout ${ENGINE_S:-200} python3 $R/gemv_stages/gemv_stages.py engine $model \
              ${ROUNDS:-8} ${TOKENS:-512} 2>&1 | tee $OUT/engine_ab_$model.txt | tail -4 ;;
    marginal4|marginal8) model=qwen3-${stage#marginal}b
            timeout 150 python3 $R/gemv_stages/gemv_stages.py marginal $model 2>&1 \
              | tee $OUT/marginal_$model.txt | grep "#" ;;
    copy) timeout 90 python3 $R/copy_rate/copy_rates.py 2>&1 | tee $OUT/copy_rates.txt ;;
  esac
done
echo "== end $(date -u +%T)"
