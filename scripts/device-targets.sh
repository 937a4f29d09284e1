#!/usr/bin/env bash
# One device call that measures the issues' decode targets on whatever GPU is lent (repository
# root, .device/debs carried; see scripts/device-cuda-test.sh): builds kestrel only (ninja reuses a
# warm machine's build/), then benches the random-weight Qwen3.5-9B bf16 (batch 1 and 8), its
# q4_k_m GGUF (batch 1 and 8) and the Qwen3.5-35B-A3B bf16 (batch 1), each `-p 0 -n 64 -r 2`;
# q4km-prefill: the GGUF's 8192-token prefill at the default precision (bf16x3) and at bf16;
# pp-profile: the phase profiles of a 512-token prefill step of the GGUF and of the bf16
# checkpoint, both at bf16 (the GGUF also with KESTREL_CUDA_Q4K_INT=0, its Q4_K row-major); and
# prints the tables. q4km-bf16: the GGUF's decode at --matmul-precision bf16. q8-ab: the q8_0
# GGUF's decode and 512-token prefill with its Q8_0 row-major and in the integer-dot GEMV's layout;
# q6-ab: the q4_k_m GGUF's decode and 512-token prefill with its Q6_K matrices row-major
# (KESTREL_CUDA_Q6K_INT=0) and in the T32 layout; wide-ab: the q4_k_m GGUF's decode with its T32
# matrices in 8 slices (KESTREL_CUDA_GEMV_WIDE=0) and in 16 (=1000000 groups: every matrix of
# 4096-wide rows or wider, the default; WIDE="0 128 1000000" adds the fortieth session's rule, 16
# for at most 128 groups); head-ab: the q4_k_m and q8_0 GGUFs'
# decode (batch 1, 8, 64) with the output head in its stored layout (KESTREL_HEAD_MATMUL_LAYOUT=0)
# and in the integer-dot GEMV's (=1, the default); rows-ab: the q4_k_m GGUF's decode at batch 1 to
# 64 with the T32 rows past 8 in 8-row passes or passes of the rows GEMV (KESTREL_CUDA_INT_ROWS),
# the head in either layout; patch-ab: the q4_k_m GGUF's decode at batch 1 to 64 built without and
# with the diff PATCH names (the tree restored after). Its logs and JSON go under OUT_DIR; a device
# call brings back at most 8 files, so run it through scripts/device-call.sh, which keeps the
# output and JSON:
#   scripts/device-call.sh $OUT scripts/device-targets.sh .device/debs WORK 9b q4km
# Models go to $MODELS (default /dev/shm), written once a machine. TARGETS="kestrel …" builds more
# targets (default kestrel).
#   usage: scripts/device-targets.sh DEBS_DIR OUT_DIR [9b|q4km|q4km-bf16|35b|q4km-prefill|pp-profile|q8-ab|q6-ab|wide-ab|head-ab|rows-ab|pp-trace|patch-ab ...]
#          (default: 9b q4km 35b)
set -uo pipefail
debs=${1:?DEBS_DIR}
out=${2:?OUT_DIR}
shift 2
which=${*:-9b q4km 35b}
export MODELS=${MODELS:-/dev/shm}
s=$(date +%s)
el() { echo "[$(( $(date +%s) - s )) s] $*"; }
TARGETS=${TARGETS:-kestrel} bash scripts/device-cuda-test.sh "$debs" "$out/build" none || exit 1
el "build"
show() { grep -E '^(tg|pp|measured|random|convert|==)' || true; }
for w in $which; do
  case $w in
    9b) bash scripts/device-bench.sh "$out/9b" Qwen3.5-9B qwen35-9b -p 0 -n 64 -b 1,8 -r 2 2>&1 | show ;;
    q4km) bash scripts/device-bench-gguf.sh "$out/q4km" Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8 -r 2 2>&1 | show ;;
    q4km-bf16)  # the same at --matmul-precision bf16 (the integer-dot GEMVs' two terms of x)
      bash scripts/device-bench-gguf.sh "$out/q4km-bf16" Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8 -r 2 \
        --matmul-precision bf16 2>&1 | show ;;
    q4km-prefill)
      for p in bf16x3 bf16; do
        bash scripts/device-bench-gguf.sh "$out/q4km-pp-$p" Qwen3.5-9B qwen35-9b q4_k_m -p 8192 -n 0 -b 1 -r 2 \
          --matmul-precision $p 2>&1 | show
      done ;;
    pp-profile)  # where a 512-token prefill step's time goes: the q4_k_m GGUF and the bf16 checkpoint, at bf16
      bash scripts/device-bench-gguf.sh "$out/pp-prof-q4km" Qwen3.5-9B qwen35-9b q4_k_m -p 512 -n 0 -b 1 -r 2 --profile \
        --matmul-precision bf16 2>&1 | grep -vE '^(ggml|weights|model|loaded)'
      KESTREL_CUDA_Q4K_INT=0 bash scripts/device-bench-gguf.sh "$out/pp-prof-q4km-rowmajor" Qwen3.5-9B qwen35-9b q4_k_m \
        -p 512 -n 0 -b 1 -r 2 --profile --matmul-precision bf16 2>&1 | grep -vE '^(ggml|weights|model|loaded)'
      bash scripts/device-bench.sh "$out/pp-prof-bf16" Qwen3.5-9B qwen35-9b -p 512 -n 0 -b 1 -r 2 --profile \
        --matmul-precision bf16 2>&1 | grep -vE '^(weights|model|loaded)' ;;
    q8-ab)  # the q8_0 GGUF, its Q8_0 row-major (KESTREL_CUDA_Q8_0_INT=0: the unit GEMV) and in the T32 layout
      for v in 0 1; do
        KESTREL_CUDA_Q8_0_INT=$v bash scripts/device-bench-gguf.sh "$out/q8-int$v" Qwen3.5-9B qwen35-9b q8_0 -p 512 \
          -n 64 -b 1,8 -r 2 2>&1 | sed "s/^==/== KESTREL_CUDA_Q8_0_INT=$v/" | show
      done ;;
    q6-ab)  # the q4_k_m GGUF, its Q6_K matrices row-major (KESTREL_CUDA_Q6K_INT=0) and in the T32 layout
      for v in 0 1; do
        KESTREL_CUDA_Q6K_INT=$v bash scripts/device-bench-gguf.sh "$out/q6-int$v" Qwen3.5-9B qwen35-9b q4_k_m -p 512 \
          -n 64 -b 1,8 -r 2 2>&1 | sed "s/^==/== KESTREL_CUDA_Q6K_INT=$v/" | show
      done ;;
    wide-ab)  # the q4_k_m GGUF's decode, its T32 matrices in 8 slices or 16
      for v in ${WIDE:-0 1000000}; do
        KESTREL_CUDA_GEMV_WIDE=$v bash scripts/device-bench-gguf.sh "$out/wide$v" \
          Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8 -r 2 2>&1 |
          sed "s/^==/== KESTREL_CUDA_GEMV_WIDE=$v/" | show
      done ;;
    head-ab)  # the q4_k_m (Q6_K head) and q8_0 GGUFs' decode, the head in its stored layout or the T32 one
      for q in q4_k_m q8_0; do
        for v in 0 1; do
          KESTREL_HEAD_MATMUL_LAYOUT=$v bash scripts/device-bench-gguf.sh "$out/head-$q-$v" Qwen3.5-9B qwen35-9b $q \
            -p 0 -n 64 -b 1,8,64 -r 2 2>&1 | sed "s/^==/== KESTREL_HEAD_MATMUL_LAYOUT=$v/" | show
        done
      done ;;
    rows-ab)  # the q4_k_m GGUF's decode at batch 1 to 64: T32 rows past 8 in 8-row passes
      # (KESTREL_CUDA_INT_ROWS=8, before the rows GEMV) or in passes of 16 or 32 (the default), the head in
      # its stored layout (=0) or the T32 one (=1, the default); ROWS_AB="rows:head ..." picks the pairs
      for vh in ${ROWS_AB:-32:1 8:1 8:0}; do
        v=${vh%:*} h=${vh#*:}
        KESTREL_CUDA_INT_ROWS=$v KESTREL_HEAD_MATMUL_LAYOUT=$h bash scripts/device-bench-gguf.sh "$out/rows-$v-$h" \
          Qwen3.5-9B qwen35-9b q4_k_m -p 0 -n 64 -b 1,8,32,64 -r 2 2>&1 |
          sed "s/^==/== KESTREL_CUDA_INT_ROWS=$v KESTREL_HEAD_MATMUL_LAYOUT=$h/" | show
      done ;;
    patch-ab)  # PATCH=FILE (a diff of the tree): the q4_k_m GGUF's decode at batch 1 to 64 built without the
      # patch and with it, on one machine; the tree is restored after (the build is then stale, and the
      # next target's build makes it whole again). PATCH_BENCH="..." replaces the bench's options (e.g.
      # "-p 8192 -n 0 -b 1 -r 2" for the prefill)
      [ -f "${PATCH:-}" ] || { echo "patch-ab: PATCH=FILE names no file ('${PATCH:-}')"; exit 2; }
      apply() { git apply "$@" "$PATCH" 2>/dev/null || patch -s -p1 "$@" <"$PATCH"; }
      for v in main patched; do
        if [ $v = patched ]; then
          apply || { echo "patch-ab: $PATCH does not apply"; exit 1; }
          cmake --build build -j16 --target kestrel >"$out/build-patched.log" 2>&1 ||
            { grep -B2 -A12 -m3 error "$out/build-patched.log"; apply -R; exit 1; }
        fi
        bash scripts/device-bench-gguf.sh "$out/patch-$v" Qwen3.5-9B qwen35-9b q4_k_m \
          ${PATCH_BENCH:--p 0 -n 64 -b 1,8,32,64 -r 2} 2>&1 |
          sed "s/^==/== $v/" | show
      done
      apply -R ;;
    pp-trace)  # where an 8192-token prefill's device time goes, kernel by kernel (ktrace, summed by
      # scripts/trace-kernel-sum.py): the q4_k_m GGUF at chunks of 512 and 2048 and the bf16 checkpoint at 512,
      # at PRECISION (default bf16x3); needs TARGETS="kestrel kestrel_ktrace"
      [ -f build/libkestrel_ktrace.so ] || { echo "pp-trace: build/libkestrel_ktrace.so not built (TARGETS)"; exit 2; }
      # (a short bench first, which writes the checkpoint and converts the GGUF where they are missing)
      bash scripts/device-bench-gguf.sh "$out/pp-trace" Qwen3.5-9B qwen35-9b q4_k_m -p 512 -n 0 -b 1 -r 1 2>&1 | show
      for mc in qwen35-9b-q4_k_m.gguf:512 qwen35-9b-q4_k_m.gguf:2048 qwen35-9b:512; do
        m=${mc%:*} c=${mc#*:}
        echo "== kestrel bench -m $m --device cuda -p 8192 -n 0 -r 1 --chunk $c --matmul-precision ${PRECISION:-bf16x3} (ktrace)"
        KTRACE_OUT="$out/pp-trace/$m-$c.csv" LD_PRELOAD=build/libkestrel_ktrace.so \
          build/kestrel bench -m "$MODELS/$m" \
          --device cuda -p 8192 -n 0 -r 1 --chunk "$c" --matmul-precision "${PRECISION:-bf16x3}" 2>&1 | show
        python3 scripts/trace-kernel-sum.py "$out/pp-trace/$m-$c.csv" --top "${TOP:-22}"
      done ;;
    35b) bash scripts/device-bench.sh "$out/35b" Qwen3.5-35B-A3B qwen35-35b-a3b -p 0 -n 64 -b 1 -r 2 2>&1 | show ;;
    *) echo "unknown target $w (expected 9b, q4km, q4km-bf16, 35b, q4km-prefill, pp-profile, q8-ab, q6-ab, wide-ab, head-ab, rows-ab, pp-trace or patch-ab)"; exit 2 ;;
  esac
  el "$w"
done
