source .gpu/gpu-env.sh >/dev/null
bash benchmarks/gpu_checks.sh none > /dev/null 2>&1
export PYTHONPATH="$PWD/src:/tmp/site:$PWD" PYTHONUNBUFFERED=1
for c in "128 128 64 4" "128 64 64 4" "64 128 64 4" "128 128 32 4"; do
  export TILESAFE_CACHE_DIR=/tmp/tcg19_$(echo $c | tr ' ' _)
  timeout 80 python3 .gpu/f8t.py $c 2>&1 | grep -v "^tilesafe: tuned" | tail -3; echo "[$c] rc=$?"
done
