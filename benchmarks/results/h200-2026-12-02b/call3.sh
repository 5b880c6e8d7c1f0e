set -uo pipefail
export VARIANTS="shipped shipped@100 static@100 static"
STAGES="engine" ENGINE_S=240 ROUNDS=3 bash benchmarks/results/h200-2026-12-02b/run_gpu.sh
export VARIANTS="shipped shipped@100 static@100"
STAGES="smarginal" MARGINAL_S=200 bash benchmarks/results/h200-2026-12-02b/run_gpu.sh 2>&1 | grep -v "^== end"
