#!/usr/bin/env bash
# The second GPU call of 2026-12-02 (repository root, .gpu and .whl carried): the GPU tests,
# then `tilesafe generate` twice per model over one fresh kernel cache (cold, then warm) for
# the start-up and compile report. Consoles in $OUT.
set -uo pipefail
source .gpu/gpu-env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH="$PWD/src:/tmp/site:$PWD"
INCLUDE="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
SUFFIX="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
for m in driver/_launcher driver/_ledger; do
  cc -shared -fPIC -O2 -I"$INCLUDE" src/tilesafe/$m.c -o src/tilesafe/$m.abi3.so; done
cc -shared -fPIC -O2 -I"$INCLUDE" src/tilesafe/fastpath/*.c -o src/tilesafe/_fastpath$SUFFIX
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u;
  python3 -m tilesafe info; } > $OUT/env.txt 2>&1
echo "== gpu tests $(date -u +%T)"
TILESAFE_CACHE_DIR=/tmp/tilesafe-tests timeout ${GPU_S:-240} python3 -m pytest -q \
  -p no:cacheprovider -rf ${GPU_TESTS:-tests/gpu} 2>&1 | tail -15 | tee $OUT/gpu_tests.txt
for model in ${MODELS:-qwen3-0.6b qwen3-4b}; do
  for pass in cold warm; do
    echo "== generate $model $pass $(date -u +%T)"
    TILESAFE_CACHE_DIR=/tmp/tilesafe-gen timeout ${GEN_S:-150} python3 -m tilesafe generate \
      --random $model --tokens ${TOKENS:-256} --quiet 2>&1 | tee $OUT/generate_${model}_$pass.txt
  done
done
echo "== end $(date -u +%T)"
