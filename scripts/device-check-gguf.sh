#!/usr/bin/env bash
# One device call's worth of checking for a change to the block-format kernels, on the GPU
# machine: builds (scripts/device-cuda-test.sh), runs QuantGpuTest.* (its BENCH lines: the GEMV's
# hot and DRAM figures), the rest of the GPU suite without the timing benches, `kestrel parity
# --device cuda` on every fixture, and then the 9B Q4_K_M decode and prefill with a phase profile
# (scripts/device-bench-gguf.sh). Stops after the quant tests if they fail. Prints a summary;
# the logs and the bench JSON are left in OUT_DIR.
#   usage: scripts/device-check-gguf.sh DEBS_DIR OUT_DIR
set -uo pipefail
debs=${1:?DEBS_DIR}
out=${2:?OUT_DIR}
start=$(date +%s)
elapsed() { echo "[$(($(date +%s) - start)) s] $*"; }
scripts/device-cuda-test.sh "$debs" "$out" 'QuantGpuTest.*' >"$out/quant.txt" 2>&1
grep -E 'build ok|FAILED|gpu tests exit|BENCH q(gemv|prefill)_Q[468]|Q[46]K K=|^(PASS|FAIL) ' "$out/quant.txt" | head -90
grep -B2 -A6 'Failure$' "$out/gpu_tests.log" 2>/dev/null | head -30
elapsed "quant tests and parity"
grep -q 'gpu tests exit 0' "$out/quant.txt" || exit 1
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout 200 build/tests/kestrel_gpu_tests --gtest_filter='-GpuBench.*:QuantGpuTest.*' >"$out/suite.log" 2>&1
echo "gpu suite without the timing benches: exit $?, $(grep -E '^\[  (PASSED|FAILED) ' "$out/suite.log" | tr '\n' ' ')"
elapsed "suite"
timeout 240 scripts/device-bench-gguf.sh "$out" Qwen3.5-9B qwen35-9b q4_k_m -p 512 -n 128 -b 1,8 -r 2 --profile 2>&1 |
  grep -E '^(pp|tg)|graphs|head  |ops: matmul|profile of|^convert|exit'
elapsed "bench"
