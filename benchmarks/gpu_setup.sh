#!/usr/bin/env bash
# The set-up of a command on the GPU machine, for a results directory's run script to source
# from the repository root (with .gpu/ and .whl/ carried, $OUT set by the device tool):
#   source benchmarks/gpu_setup.sh
# It sources .gpu/gpu-env.sh (the tileiras toolchain), installs the carried wheels under
# /tmp/site, points the cache at /tmp/tilesafe-cache, builds the compiled modules from the
# checkout's sources (without them their Python equivalents run) and writes $OUT/env.txt (the
# GPU, the driver, the date and `tilesafe info`). benchmarks/gpu_checks.sh is the fuller
# version, with stages of its own and builds of an older checkout.
source .gpu/gpu-env.sh
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PWD/src:/tmp/site:$PWD"
fi
export TILESAFE_CACHE_DIR=${TILESAFE_CACHE_DIR:-/tmp/tilesafe-cache}
_include="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
_suffix="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
for _module in driver/_launcher driver/_ledger; do
  cc -shared -fPIC -O2 -I"$_include" "src/tilesafe/$_module.c" -o "src/tilesafe/$_module.abi3.so" \
    || echo "src/tilesafe/$_module not built: its Python definition runs"
done
cc -shared -fPIC -O2 -I"$_include" src/tilesafe/fastpath/*.c -o "src/tilesafe/_fastpath$_suffix" \
  || echo "the fast path not built: the Python launch path runs"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u;
  python3 -m tilesafe info; } > "${OUT:-.}/env.txt" 2>&1
