#!/usr/bin/env bash
# On the GPU machine, after scripts/device-cuda-test.sh has built build/ (its Debian libraries
# unpacked under /tmp/deps): writes a random-weight checkpoint of a released shape and runs
# `kestrel bench` on it (add --profile for the phase profile), saving the table and the JSON under
# OUT_DIR. DEVICE=cpu runs it on the CPU backend (default cuda).
#   usage: scripts/device-bench.sh OUT_DIR PRESET NAME [bench options...]
set -uo pipefail
out=${1:?OUT_DIR}
preset=${2:?PRESET}
name=${3:?NAME}
shift 3
source "$(dirname "$0")/lib/random-model.sh"
mkdir -p "$out"
ensure_random_model "$preset" "$name" || exit 1
device=${DEVICE:-cuda}
cmd="kestrel bench -m $name --device $device $*"
build/kestrel bench -m "$models/$name" --device "$device" "$@" --json "$out/bench-$name.json" --command-line "$cmd" \
  >"$out/bench-$name.txt" 2>&1
echo "== $cmd (exit $?)"
cat "$out/bench-$name.txt"
