#!/usr/bin/env bash
# One device call (repository root, .device/debs carried; see scripts/device-cuda-test.sh): main (A)
# against the integer-dot GEMV's split patches on the 9B Q4_K_M, each applied alone to main, in order
# while the call has time: C, the split by FMAs alone (q4k-int-split-fma-only-2026-12-06.patch), then
# B, one conversion a value (q4k-int-split-one-conversion-2026-12-06.patch). Each build is kestrel
# alone: `kestrel bench -p 0 -n 64 -b 1,8 -r 2`, and `kestrel run --prompt-ids` (8 prompt tokens: the
# 8-row kernel once, then 48 one-row steps), whose ids must equal A's (the patches keep the bits).
# Then, while time is left, C again with the GPU tests: QuantGpuTest.MatmulQ4KT32 and
# GpuBench.Q4kIntGemv, then compute-sanitizer memcheck and racecheck over the former (the patches
# change only the split's arithmetic, not its loads or shared memory). ~350 s for A and C.
# BUDGET_S (default 600): the seconds the call may take; the later stages start only within it.
# Measured on 7d21d70 (thirty-seventh session); main holds C since b82427b, so C no longer applies.
#   usage: bash docs/experiments/q4k-int-split-one-conversion-2026-12-06.sh OUT_DIR
set -uo pipefail
out=$1
export MODELS=/dev/shm
s=$(date +%s)
budget=${BUDGET_S:-600}
el() { echo "[$(( $(date +%s) - s )) s] $*"; }
left() { [ $(( $(date +%s) - s + $1 )) -lt "$budget" ]; }  # $1: the seconds the next stage needs
TARGETS=kestrel bash scripts/device-cuda-test.sh .device/debs "$out/a-build" none || exit 1
source scripts/lib/random-model.sh  # the Debian libraries' path, for the binaries
el "build A"
gguf=$MODELS/qwen35-9b-q4_k_m.gguf
b() {
  bash scripts/device-bench-gguf.sh "$out/$1" Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8 -r 2 2>&1 |
    grep -E '^(tg|convert|random|measured|==)'
  build/kestrel run -m "$gguf" --device cuda --prompt-ids 11,22,33,44,55,66,77,88 -n 48 --ignore-eos \
    >"$out/ids-$1.json" 2>"$out/run-$1.log" || { echo "run $1 failed"; tail -3 "$out/run-$1.log"; }
  [ "$1" = a ] || { cmp -s "$out/ids-a.json" "$out/ids-$1.json" && echo "ids $1 = ids a" || echo "ids $1 DIFFER from a"; }
  el "bench $1"
}
b a
# the patched files are noted in build/ (as scripts/device-ab-patch.sh does), so that a later call on
# this machine rebuilds them from its fresh copy of the tree (touch_reverted_sources)
applied=""
trap '[ -n "$applied" ] && git apply -R "$applied"; for p in docs/experiments/q4k-int-split-*-2026-12-06.patch; do git apply --numstat "$p" | cut -f3; done >>build/.kestrel-reverted' EXIT
stage() {  # stage NAME PATCH TARGETS...: apply and build
  git apply "$2" || exit 1
  applied=$2
  cmake --build build -j16 --target "${@:3}" >"$out/build-$1.log" 2>&1 || { grep -m3 -A12 error "$out/build-$1.log"; exit 1; }
  el "build $1 ($2: ${*:3})"
}
c=docs/experiments/q4k-int-split-fma-only-2026-12-06.patch
for v in c:$c b:docs/experiments/q4k-int-split-one-conversion-2026-12-06.patch; do
  left 120 || { echo "no time left for ${v%%:*}"; break; }
  stage "${v%%:*}" "${v#*:}" kestrel
  b "${v%%:*}"
  git apply -R "$applied" && applied=""
done
left 240 || { echo "no time left for C's GPU tests"; exit 0; }
stage c-tests "$c" kestrel_gpu_tests
timeout 90 build/tests/kestrel_gpu_tests --gtest_filter='QuantGpuTest.MatmulQ4KT32:GpuBench.Q4kIntGemv' \
  >"$out/tests-c.log" 2>&1
echo "tests c exit $? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests-c.log" | tr '\n' ' ')"
grep -A4 'Failure$' "$out/tests-c.log" | cut -c1-200 | head -20
grep -E '^BENCH' "$out/tests-c.log" | cut -c1-190
for tool in memcheck racecheck; do
  left 70 || { echo "no time left for $tool"; continue; }
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/kestrel_gpu_tests \
    --gtest_filter=QuantGpuTest.MatmulQ4KT32 >"$out/sanitize-$tool.log" 2>&1
  echo "compute-sanitizer $tool exit $? ($(grep -E '(ERROR SUMMARY|RACECHECK SUMMARY)' "$out/sanitize-$tool.log" | tail -1))"
done
el done
