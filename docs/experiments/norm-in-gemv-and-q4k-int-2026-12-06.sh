#!/usr/bin/env bash
# One device call (from the repository root on the GPU machine, .device/debs carried; see
# scripts/device-cuda-test.sh): the tree with two experiment patches applied, the residual add and
# norm run inside the next one-row GEMV launch (norm-in-gemv-2026-12-06.patch) and the
# integer-dot Q4_K GEMV (q4k-int-gemv-engine-2026-12-06.patch); their new tests; A/B benches by
# their environment switches in one build (KESTREL_CUDA_Q4K_INT, KESTREL_CUDA_NORM_FUSE,
# KESTREL_CUDA_NORM_PERSIST); the Qwen-line fixtures' parity; the longer tests last.
#   usage: bash docs/experiments/norm-in-gemv-and-q4k-int-2026-12-06.sh OUT_DIR
set -uo pipefail
out=${1:?OUT}
export MODELS=/dev/shm
patches="docs/experiments/norm-in-gemv-2026-12-06.patch docs/experiments/q4k-int-gemv-engine-2026-12-06.patch"
for p in $patches; do
  git apply "$p" || { echo "$p does not apply"; exit 1; }
done
# As scripts/device-ab-patch.sh does: the patched files are noted in build/, so that a later call
# on this machine (a fresh copy of the tree, older file times) rebuilds them (touch_reverted_sources).
trap 'mkdir -p build; for p in $patches; do git apply --numstat "$p" | cut -f3; done >>build/.kestrel-reverted' EXIT
bash scripts/device-cuda-test.sh .device/debs "$out/build" none || exit 1
source scripts/lib/random-model.sh
t() {
  timeout "$1" build/tests/kestrel_gpu_tests --gtest_filter="$2" >"$out/$3.log" 2>&1
  echo "tests $3 exit $? $(grep -E '^\[  (PASSED|FAILED)' "$out/$3.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED' "$out/$3.log" | head -20
  grep -A4 'Failure$' "$out/$3.log" | cut -c1-220 | head -30
}
t 120 'GpuTest.Norm*:GpuTest.GatedMlp*:GpuTest.MatmulMulti*:GpuTest.AddRmsNorm:QuantGpuTest.MatmulQ4KT32' quick
KESTREL_CUDA_NORM_PERSIST=1 t 60 'GpuTest.Norm*' quick-persist
for i in 0 1; do
  KESTREL_CUDA_Q4K_INT=$i bash scripts/device-bench-gguf.sh "$out/q4km-int$i" Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8 -r 2 |
    head -14
done
for f in 0 1 p; do
  KESTREL_CUDA_NORM_FUSE=${f/p/1} KESTREL_CUDA_NORM_PERSIST=$([ $f = p ] && echo 1 || echo 0) \
    bash scripts/device-bench.sh "$out/bf16-fuse$f" Qwen3.5-9B qwen35-9b -p 0 -n 64 -b 1,8 -r 2 | head -14
done
for m in qwen3_5 qwen3_5_moe qwen3_next qwen3; do
  build/kestrel parity -m tests/data/fixtures/$m --device cuda 2>&1 | grep -E '^(PASS|FAIL)' | sed "s/^/$m /"
done
t "${LONG_TIMEOUT:-130}" '*StepGraphs*:*ModelStepsGguf*:*Deterministic*:QuantGpuTest.*-*Bench*' long
