#!/usr/bin/env bash
# On the GPU machine, after scripts/device-cuda-test.sh has built build/ (its Debian libraries
# unpacked under /tmp/deps): measures a patch A/B in one call. Builds the tree as it is and runs
# scripts/device-bench.sh on it (A, into OUT_DIR/a), applies PATCH (git apply; a docs/experiments
# patch), rebuilds, runs the GPU tests FILTER on the patched tree (gtest filter; "none" for none),
# runs device-bench.sh again (B, into OUT_DIR/b), and reverts the patch (build/ keeps B's
# binary). DEVICE=cpu runs the flow on the CPU backend (to try the script itself on a small
# preset). QUANT=q4_k_m (or any --quant) benches the preset's GGUF at that quant instead
# (scripts/device-bench-gguf.sh, converted once, by A).
#   usage: scripts/device-ab-patch.sh OUT_DIR PATCH FILTER PRESET NAME [bench options...]
#   e.g.   MODELS=/dev/shm scripts/device-ab-patch.sh out docs/experiments/qk-norm-rope-2026-12-04.patch \
#            'GpuTest.QkNorm*:GpuTest.Rope*' Qwen3.5-35B-A3B q35b -p 0 -n 64 -b 1,8 -r 2
set -uo pipefail
out=${1:?OUT_DIR}
patch=${2:?PATCH}
filter=${3:?FILTER}
preset=${4:?PRESET}
name=${5:?NAME}
shift 5
here=$(dirname "$0")
source "$here/lib/random-model.sh"  # the Debian libraries' path, for the test binary
mkdir -p "$out"
[ -f "$patch" ] || { echo "no patch file $patch"; exit 1; }
git apply --check "$patch" || { echo "$patch does not apply to this tree"; exit 1; }
bench() {
  if [ -n "${QUANT:-}" ]; then "$here/device-bench-gguf.sh" "$1" "$preset" "$name" "$QUANT" "${@:2}"
  else "$here/device-bench.sh" "$1" "$preset" "$name" "${@:2}"; fi
}
# A is the tree as it is: build it first, since a warm machine's build/ may still hold the binary
# of a patch an earlier call applied and reverted (reverting the sources does not rebuild, and
# the next call's copy of the tree gives them back their older times: touch_reverted_sources).
touch_reverted_sources
cmake --build build -j"$(nproc)" >"$out/build-a.log" 2>&1 || { grep -m3 -A12 error "$out/build-a.log"; exit 1; }
bench "$out/a" "$@" || exit 1
git apply "$patch" || exit 1
# On exit the sources go back to A, and the files the patch touched are noted in build/ so that
# the next build (this script's or device-cuda-test.sh's, in this call or a later one) rebuilds
# them: build/ holds B's binary until then.
trap 'git apply -R "$patch"; git apply --numstat "$patch" | cut -f3 >build/.kestrel-reverted' EXIT
cmake --build build -j"$(nproc)" >"$out/build-patched.log" 2>&1 || { grep -m3 -A12 error "$out/build-patched.log"; exit 1; }
echo "patched build ok"
if [ "$filter" != none ]; then
  build/tests/kestrel_gpu_tests --gtest_filter="$filter" >"$out/tests-patched.log" 2>&1
  echo "patched tests exit $? ($(grep -E '^\[  (PASSED|FAILED)' "$out/tests-patched.log" | tr '\n' ' '))"
fi
bench "$out/b" "$@"
