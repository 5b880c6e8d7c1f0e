#!/usr/bin/env bash
# One call on the GPU machine (repository root, .gpu and .whl carried): the stages named in
# $STAGES (micro, engine, marginal, gpu, ncu, activations, positional, embedding, decode), consoles in
# $OUT.
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
R=benchmarks/results/h200-2026-12-01b; H=benchmarks/results/h200-2026-12-02
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u;
  python3 -m tilesafe info; } > $OUT/env.txt 2>&1
for stage in ${STAGES:-micro engine}; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    gpu) timeout ${GPU_S:-200} python3 -m pytest -q -p no:cacheprovider -rf ${GPU_TESTS:-tests/gpu} 2>&1 \
           | tail -8 | tee $OUT/gpu_tests.txt ;;
    micro) timeout ${MICRO_S:-200} python3 $R/pdl/pdl_step.py micro 2>&1 | tee $OUT/micro.txt \
             | grep -E "copy|FAIL|us" ;;
    engine) timeout ${ENGINE_S:-240} python3 $R/pdl/pdl_step.py engine ${ROUNDS:-4} ${TOKENS:-512} \
              2>&1 | tee $OUT/engine_ab.txt | tail -12 ;;
    marginal) timeout ${MARGINAL_S:-150} python3 -m benchmarks.decode_marginal --model ${MODEL:-qwen3-4b} \
                --device cuda:0 2>&1 | tee $OUT/marginal.txt | head -30 ;;
    positional) timeout ${POS_S:-240} python3 -m benchmarks.kernels_positional --device cuda:0 \
                  --out $OUT/positional 2>&1 | tee $OUT/positional_console.txt | grep -E "embedding|kv_update" ;;
    activations) timeout ${ACT_S:-200} python3 -m benchmarks.kernels_activations --device cuda:0 \
                   --out $OUT/activations --quick 2>&1 | tee $OUT/activations_console.txt | grep gelu ;;
    ncu) { which ncu nsys; ls /usr/local/cuda/bin | head -50; } > $OUT/profilers.txt 2>&1
         NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
         if [ -n "$NCU" ]; then timeout ${NCU_S:-150} $NCU --clock-control none -k regex:gelu -c 2 \
             --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
             --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
             python3 $R/gelu_probe.py > $OUT/ncu_gelu.txt 2>&1; tail -5 $OUT/ncu_gelu.txt; fi
         timeout 60 python3 $R/gelu_probe.py time 2>&1 | tee $OUT/gelu_time.txt ;;
    embedding) timeout ${EMB_S:-150} python3 $H/embedding_tuned.py $OUT/embedding 2>&1 | tee $OUT/embedding_console.txt | grep -E "embedding|Error" ;;
    decode) timeout ${DECODE_S:-200} python3 -m benchmarks.decode --models ${MODELS:-qwen3-4b} \
              --lengths 1024 --references "" --device cuda:0 --out $OUT/decode 2>&1 \
              | tee $OUT/decode_console.txt | tail -6 ;;
  esac
done
echo "== end $(date -u +%T)"
