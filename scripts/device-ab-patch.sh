#!/usr/bin/env bash
# On the GPU machine, after scripts/device-cuda-test.sh has built build/ (its Debian libraries
# unpacked under /tmp/deps): measures a patch A/B in one call. Writes a random-weight checkpoint of
# a released shape (once, under $MODELS), runs `kestrel bench` on the tree as it is (A), applies
# PATCH (git apply; a docs/experiments patch), rebuilds, runs the GPU tests FILTER on the patched
# tree (gtest filter; "none" for none), benches again (B), and reverts the patch. The two tables
# and JSON files go to OUT_DIR (bench-NAME-a.*, bench-NAME-b.*). DEVICE=cpu runs the flow on the
# CPU backend (to try the script itself on a small preset).
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
source "$(dirname "$0")/lib/random-model.sh"
mkdir -p "$out"
[ -f "$patch" ] || { echo "no patch file $patch"; exit 1; }
git apply --check "$patch" || { echo "$patch does not apply to this tree"; exit 1; }
ensure_random_model "$preset" "$name" || exit 1
device=${DEVICE:-cuda}
bench() {  # bench LABEL [bench options...]
  local cmd="kestrel bench -m $name --device $device ${*:2}"
  build/kestrel bench -m "$models/$name" --device "$device" "${@:2}" --json "$out/bench-$name-$1.json" \
    --command-line "$cmd" >"$out/bench-$name-$1.txt" 2>&1
  echo "== $1: $cmd (exit $?)"
  grep -E '^(tg|pp)|copy bandwidth' "$out/bench-$name-$1.txt"
}
bench a "$@"
git apply "$patch" || exit 1
trap 'git apply -R "$patch"' EXIT
cmake --build build -j"$(nproc)" >"$out/build-patched.log" 2>&1 || { grep -m3 -A12 error "$out/build-patched.log"; exit 1; }
echo "patched build ok"
if [ "$filter" != none ]; then
  build/tests/kestrel_gpu_tests --gtest_filter="$filter" >"$out/tests-patched.log" 2>&1
  echo "patched tests exit $? ($(grep -E '^\[  (PASSED|FAILED)' "$out/tests-patched.log" | tr '\n' ' '))"
fi
bench b "$@"
