#!/usr/bin/env bash
# One device call (repository root, .device/debs carried; see scripts/device-cuda-test.sh): main
# against docs/experiments/q4k-int-split-one-conversion-2026-12-06.patch on the 9B Q4_K_M, building
# only the targets it runs (kestrel for A; kestrel and the GPU tests for B): ~400 s on an H100; then
# compute-sanitizer memcheck and racecheck over QuantGpuTest.MatmulQ4KT32 while the call has time.
#   usage: bash docs/experiments/q4k-int-split-one-conversion-2026-12-06.sh OUT_DIR
set -uo pipefail
out=$1
export MODELS=/dev/shm
patch=docs/experiments/q4k-int-split-one-conversion-2026-12-06.patch
s=$(date +%s)
el() { echo "[$(( $(date +%s) - s )) s] $*"; }
TARGETS=kestrel bash scripts/device-cuda-test.sh .device/debs "$out/a-build" none || exit 1
source scripts/lib/random-model.sh  # the Debian libraries' path, for the binaries
el "build A"
b() { bash scripts/device-bench-gguf.sh "$out/$1" Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8 -r 2 2>&1 | grep -E '^(tg|convert|random|measured|==)'; el "bench $1"; }
b a
git apply "$patch" || exit 1
# the patched files noted in build/ (as scripts/device-ab-patch.sh does), so that a later call on this
# machine rebuilds them from its fresh copy of the tree (touch_reverted_sources)
trap 'git apply --numstat "$patch" | cut -f3 >>build/.kestrel-reverted' EXIT
cmake --build build -j16 --target kestrel kestrel_gpu_tests >"$out/build-b.log" 2>&1 || { grep -m3 -A12 error "$out/build-b.log"; exit 1; }
el "build B"
b b
timeout 90 build/tests/kestrel_gpu_tests --gtest_filter='QuantGpuTest.MatmulQ4KT32:GpuBench.Q4kIntGemv' >"$out/tests.log" 2>&1
echo "tests exit $? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests.log" | tr '\n' ' ')"
grep -A4 'Failure$' "$out/tests.log" | cut -c1-200 | head -20
grep -E '^BENCH' "$out/tests.log" | cut -c1-190
# compute-sanitizer over the integer-dot GEMV's test (its loads and shared memory are the same with
# or without the patch, which changes only the split's arithmetic), if the call has time left
for tool in memcheck racecheck; do
  [ $(( $(date +%s) - s )) -lt 470 ] || { echo "no time left for $tool"; continue; }
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/kestrel_gpu_tests \
    --gtest_filter=QuantGpuTest.MatmulQ4KT32 >"$out/sanitize-$tool.log" 2>&1
  echo "compute-sanitizer $tool exit $? ($(grep -E '(ERROR SUMMARY|RACECHECK SUMMARY)' "$out/sanitize-$tool.log" | tail -1))"
done
git apply -R "$patch"
el done
