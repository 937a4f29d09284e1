#!/usr/bin/env bash
# Runs a device script so that its results survive the device's return limits (at most 8 files
# come back from $OUT, and 12,000 characters of output): the script writes into a work folder
# instead of OUT_DIR (its WORK argument), its output is also kept in OUT_DIR/summary.txt, and the
# bench JSON files it wrote are copied into OUT_DIR at the end, the first 7 by name (folder-name
# prefixed, so equal names in different folders stay apart).
#   usage: scripts/device-call.sh OUT_DIR COMMAND [ARGS...]   (the word WORK in ARGS becomes the
#          work folder, /tmp/kestrel-work)
#   e.g.   scripts/device-call.sh $OUT scripts/device-check-gguf.sh .device/debs WORK
# NEED_GPU=TEXT (e.g. H200): run only on a GPU whose name holds TEXT; on another, print its name
# and exit 3 at once, so a machine of the wrong kind costs seconds, not a build.
set -uo pipefail
out=${1:?OUT_DIR}
shift
[ $# -gt 0 ] || { echo "usage: scripts/device-call.sh OUT_DIR COMMAND [ARGS...]"; exit 2; }
if [ -n "${NEED_GPU:-}" ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$gpu" in
    *"$NEED_GPU"*) ;;
    *) echo "device-call: NEED_GPU=$NEED_GPU but this machine has '${gpu:-no GPU}'; nothing run"; exit 3 ;;
  esac
fi
work=/tmp/kestrel-work
rm -rf "$work"  # this call's files only (the models live under $MODELS)
mkdir -p "$out" "$work"
args=()
for a in "$@"; do [ "$a" = WORK ] && args+=("$work") || args+=("$a"); done
"${args[@]}" 2>&1 | tee "$out/summary.txt"
rc=${PIPESTATUS[0]}
n=0
while IFS= read -r f; do
  [ $n -lt 7 ] || { echo "device-call: more bench JSON than come back; left in $work: $f"; continue; }
  cp "$f" "$out/$(basename "$(dirname "$f")")-$(basename "$f")" && n=$((n + 1))
done < <(find "$work" -name 'bench-*.json' | sort)
echo "device-call: exit $rc, $n JSON file(s) in $out" | tee -a "$out/summary.txt"
exit "$rc"
