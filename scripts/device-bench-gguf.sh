#!/usr/bin/env bash
# On the GPU machine, after scripts/device-cuda-test.sh has built build/: writes a random-weight
# checkpoint of a released shape (if not there yet), converts it to a GGUF with `kestrel convert
# --quant QUANT` (if not there yet) and runs `kestrel bench --profile` on the GGUF, saving the
# table and the JSON under OUT_DIR.
#   usage: scripts/device-bench-gguf.sh OUT_DIR PRESET NAME QUANT [bench options...]
#   e.g.   scripts/device-bench-gguf.sh out Qwen3.5-9B qwen35-9b q4_k_m -p 512 -n 128 -b 1,8 -r 2
set -uo pipefail
out=${1:?OUT_DIR}
preset=${2:?PRESET}
name=${3:?NAME}
quant=${4:?QUANT}
shift 4
source "$(dirname "$0")/lib/random-model.sh"
mkdir -p "$out"
ensure_random_model "$preset" "$name" || exit 1
gguf="$models/$name-$quant.gguf"
if [ ! -f "$gguf" ]; then
  start=$(date +%s)
  build/kestrel convert -m "$models/$name" --quant "$quant" -o "$gguf" >"$out/convert-$name-$quant.txt" 2>&1 ||
    { cat "$out/convert-$name-$quant.txt"; exit 1; }
  echo "convert $quant: $(( $(date +%s) - start )) s, $(du -h "$gguf" | cut -f1)"
fi
build/kestrel info -m "$gguf" >"$out/info-$name-$quant.txt" 2>&1
cmd="kestrel bench -m $name-$quant.gguf --device cuda $*"
build/kestrel bench -m "$gguf" --device cuda "$@" --json "$out/bench-$name-$quant.json" --command-line "$cmd" \
  >"$out/bench-$name-$quant.txt" 2>&1
echo "== $cmd (exit $?)"
cat "$out/bench-$name-$quant.txt"
