set -uo pipefail
export VARIANTS="shipped static static_nopdl static_all_but_lm"
STAGES="smarginal" MARGINAL_S=200 bash benchmarks/results/h200-2026-12-02b/run_gpu.sh
export VARIANTS="shipped static_nopdl static_all_but_lm"
STAGES="engine" ENGINE_S=200 ROUNDS=3 bash benchmarks/results/h200-2026-12-02b/run_gpu.sh 2>&1 | grep -v "^== end"
