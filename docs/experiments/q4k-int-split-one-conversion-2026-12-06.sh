#!/usr/bin/env bash
# One device call (repository root, .device/debs carried; see scripts/device-cuda-test.sh): main (A)
# against the integer-dot GEMV's split patches on the 9B Q4_K_M, each applied alone to main, in order
# while the call has time: C, the split by FMAs alone (q4k-int-split-fma-only-2026-12-06.patch), then
# B, one conversion a value (q4k-int-split-one-conversion-2026-12-06.patch). Builds only the targets
# it runs (kestrel for A; kestrel and the GPU tests for each patch, which runs
# QuantGpuTest.MatmulQ4KT32 and the first also GpuBench.Q4kIntGemv); then compute-sanitizer memcheck
# and racecheck over QuantGpuTest.MatmulQ4KT32 on the last build (the patches change only the split's
# arithmetic, not its loads or shared memory), while time is left. ~400 s for A and C on an H100.
# BUDGET_S (default 600): the seconds the call may take; the later stages start only within it.
#   usage: bash docs/experiments/q4k-int-split-one-conversion-2026-12-06.sh OUT_DIR
set -uo pipefail
out=$1
export MODELS=/dev/shm
s=$(date +%s)
el() { echo "[$(( $(date +%s) - s )) s] $*"; }
budget=${BUDGET_S:-600}
left() { [ $(( $(date +%s) - s + $1 )) -lt "$budget" ]; }  # $1: the seconds the next stage needs
TARGETS=kestrel bash scripts/device-cuda-test.sh .device/debs "$out/a-build" none || exit 1
source scripts/lib/random-model.sh  # the Debian libraries' path, for the binaries
el "build A"
b() { bash scripts/device-bench-gguf.sh "$out/$1" Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8 -r 2 2>&1 | grep -E '^(tg|convert|random|measured|==)'; el "bench $1"; }
b a
# the patched files are noted in build/ (as scripts/device-ab-patch.sh does), so that a later call on
# this machine rebuilds them from its fresh copy of the tree (touch_reverted_sources)
applied=""
trap '[ -n "$applied" ] && git apply -R "$applied"; for p in docs/experiments/q4k-int-split-*-2026-12-06.patch; do git apply --numstat "$p" | cut -f3; done >>build/.kestrel-reverted' EXIT
filter='QuantGpuTest.MatmulQ4KT32:GpuBench.Q4kIntGemv'
for v in c:fma-only b:one-conversion; do
  name=${v%%:*} patch=docs/experiments/q4k-int-split-${v#*:}-2026-12-06.patch
  left 180 || { echo "no time left for $name"; break; }
  git apply "$patch" || exit 1
  applied=$patch
  cmake --build build -j16 --target kestrel kestrel_gpu_tests >"$out/build-$name.log" 2>&1 ||
    { grep -m3 -A12 error "$out/build-$name.log"; exit 1; }
  el "build $name ($patch)"
  b "$name"
  timeout 90 build/tests/kestrel_gpu_tests --gtest_filter="$filter" >"$out/tests-$name.log" 2>&1
  echo "tests $name exit $? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests-$name.log" | tr '\n' ' ')"
  grep -A4 'Failure$' "$out/tests-$name.log" | cut -c1-200 | head -20
  grep -E '^BENCH' "$out/tests-$name.log" | cut -c1-190
  filter=QuantGpuTest.MatmulQ4KT32
  git apply -R "$patch" && applied=""
done
for tool in memcheck racecheck; do
  left 80 || { echo "no time left for $tool"; continue; }
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/kestrel_gpu_tests \
    --gtest_filter=QuantGpuTest.MatmulQ4KT32 >"$out/sanitize-$tool.log" 2>&1
  echo "compute-sanitizer $tool exit $? ($(grep -E '(ERROR SUMMARY|RACECHECK SUMMARY)' "$out/sanitize-$tool.log" | tail -1))"
done
el done
