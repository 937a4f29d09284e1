#!/usr/bin/env bash
# On the GPU machine, after scripts/device-cuda-test.sh has built build/: where a decode step's
# time goes, for a random-weight checkpoint of a released shape (QUANT=q4_k_m or another --quant:
# its GGUF, converted once). Two parts, both saved under OUT_DIR:
#  1. `kestrel bench --profile` (scripts/device-bench.sh or device-bench-gguf.sh): the replayed
#     rate and the phase profile of eager steps;
#  2. where Nsight Compute (ncu) is installed: every kernel of a short tg run, each alone with the
#     L2 flushed before it (so a small kernel carries its launch and a cold L2; the sum exceeds the
#     replayed step), summed per kernel name a step by scripts/ncu-kernel-sum.py — the steps
#     counted by the argmax kernel each step launches once — into ncu-NAME.txt (the CSV beside it).
# NCU_TIMEOUT (default 300 s) bounds part 2.
#   usage: scripts/device-profile-step.sh OUT_DIR PRESET NAME [BATCH]
#   e.g.   MODELS=/dev/shm scripts/device-profile-step.sh out Qwen3.5-35B-A3B q35b 1
set -uo pipefail
out=${1:?OUT_DIR}
preset=${2:?PRESET}
name=${3:?NAME}
batch=${4:-1}
here=$(dirname "$0")
source "$here/lib/random-model.sh"
mkdir -p "$out"
if [ -n "${QUANT:-}" ]; then
  "$here/device-bench-gguf.sh" "$out" "$preset" "$name" "$QUANT" -p 0 -n 64 -b "$batch" -r 2 --profile || exit 1
  model="$models/$name-$QUANT.gguf" tag="$name-$QUANT"
else
  "$here/device-bench.sh" "$out" "$preset" "$name" -p 0 -n 64 -b "$batch" -r 2 --profile || exit 1
  model="$models/$name" tag="$name"
fi
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then
  echo "no ncu on this machine: the per-kernel part is skipped"
  exit 0
fi
timeout "${NCU_TIMEOUT:-300}" "$ncu" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
  build/kestrel bench -m "$model" --device cuda -p 0 -n 4 -b "$batch" -r 1 >"$out/ncu-$tag.csv" 2>"$out/ncu-$tag.err"
echo "== ncu over kestrel bench -m $tag -p 0 -n 4 -b $batch -r 1 (exit $?)"
{
  echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), kestrel $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%F)"
  echo "# each kernel alone under Nsight Compute, L2 flushed before it; batch $batch"
  python3 "$here/ncu-kernel-sum.py" "$out/ncu-$tag.csv" per:argmax_kernel --grid
} >"$out/ncu-$tag.txt" 2>&1
cat "$out/ncu-$tag.txt"
