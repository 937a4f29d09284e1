#!/usr/bin/env bash
# Builds kestrel with CUDA and runs the GPU tests and the CUDA parity of the Qwen-line fixtures,
# on a GPU machine whose image lacks the build's Debian dependencies. Those travel as .deb files
# (apt-get download libgtest-dev nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0
# libpcre2-32-0 libpcre2-posix3 pkgconf pkgconf-bin libpkgconf3 libcpp-httplib-dev
# libcpp-httplib0.11 libbrotli1 libbrotli-dev libssl-dev zlib1g-dev) in DEBS_DIR and are unpacked
# under /tmp/deps, never over /.
#   usage: scripts/device-cuda-test.sh DEBS_DIR OUT_DIR [gtest filter, or "none" to build only]
#   (PARITY=0: no fixture parity; SANITIZE=1: compute-sanitizer over the kernel tests, below;
#   TARGETS="kestrel ...": build only those targets, for a short call that runs only them)
set -uo pipefail
debs=${1:?DEBS_DIR}
out=${2:?OUT_DIR}
filter=${3:-*}
deps=/tmp/deps
mkdir -p "$deps" "$out"
for f in "$debs"/*.deb; do dpkg -x "$f" "$deps"; done
lib=$deps/usr/lib/x86_64-linux-gnu
export PATH=$deps/usr/bin:$PATH
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_LIBDIR=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$deps
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S . -B build -G Ninja -DKESTREL_CUDA=ON -DCMAKE_PREFIX_PATH=$deps/usr >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
source "$(dirname "$0")/lib/random-model.sh"  # touch_reverted_sources
touch_reverted_sources
cmake --build build -j16 ${TARGETS:+--target $TARGETS} >"$out/build.log" 2>&1 || { grep -B2 -A12 -m3 'error' "$out/build.log"; exit 1; }
echo "build ok"
[ "$filter" = none ] && exit 0
build/tests/kestrel_gpu_tests --gtest_filter="$filter" >"$out/gpu_tests.log" 2>&1
rc=$?
grep -E '^(BENCH|MATMUL|PARITY|  qwen)|^\[  (FAILED|PASSED|SKIPPED)|Failure$' "$out/gpu_tests.log" | head -150
grep -A3 'Failure$' "$out/gpu_tests.log" | cut -c1-200 | head -40
echo "gpu tests exit $rc"
# PARITY=0 skips the fixtures' parity (a second call over the same tree).
if [ "${PARITY:-1}" != 0 ]; then
  for m in qwen3 qwen3_moe qwen3_5 qwen3_5_tied qwen3_5_moe qwen3_next gemma4_text gemma4_text_moe \
      gemma4_text_kvshared gemma4_text_keqv qwen4_exp; do
    echo "== kestrel parity -m tests/data/fixtures/$m --device cuda"
    build/kestrel parity -m tests/data/fixtures/$m --device cuda 2>&1
  done >"$out/parity.log"
  grep -E '^==|^(PASS|FAIL) ' "$out/parity.log"
fi
# Optional: compute-sanitizer over the kernel parity tests (SANITIZE=1), each tool time-boxed.
if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  kernels='GpuTest.Embed:GpuTest.RmsNorm:GpuTest.HeadAndGatedRmsNorm:GpuTest.AddGatesSoftcap:GpuTest.GatherRows'
  kernels+=':GpuTest.MatmulRowSliceInputs:GpuTest.Rope:GpuTest.Attention:GpuTest.Conv1dSilu:DeltaRuleTest.SmallHeads'
  kernels+=':DeltaRuleTest.UnevenDims:DeltaRuleTest.Qwen35Heads:DeltaRuleTest.BatchedEqualsAlone:DeltaRuleTest.ManyDecodeSeqs*'
  kernels+=':GpuTest.MoeRoute*:GpuTest.MoeExperts*:GpuTest.AddMulSigmoid:GpuTest.MatmulGated*'
  kernels+=':GpuTest.GeluMulScaleActivationMul:GpuTest.SliceCols:GpuTest.GroupRmsNorm:GpuTest.EmbedRows'
  kernels+=':GpuTest.StreamsExpandMixInject:GpuTest.StreamGate:GpuTest.RopeWholeHeadPairs:GpuTest.KvWrite'
  kernels+=':GpuTest.DilatedConv1dSilu:AttentionGeneral.*:QsaSelect.*:MoeGemma.*'
  kernels+=':GpuTest.AddRmsNorm:*AttentionPrefill.VsCpu*:*AttentionPrefill.SharpScores*'
  kernels+=':QuantGpuTest.MatmulEveryFormatAgainstReference:QuantGpuTest.MatmulMultiMixedFormatsEqualsSeparate'
  kernels+=':QuantGpuTest.MoeExperts:QuantGpuTest.EmbedAndEmbedRows:DeltaRuleTest.Bf16PrecisionOnTensorCores'
  # kernels added since the 2026-12-03 sanitizer run (one-row GEMVs, fused decode kernels, n-grams)
  kernels+=':GpuTest.Argmax:GpuTest.Conv1dSiluDecodeFused:GpuTest.MatmulMulti*:GpuTest.MatmulGemvRows*'
  kernels+=':GpuTest.NormRopeAttention*:GpuTest.QkNormRope*:DeltaRuleTest.RecurrenceFusedEqualsParts'
  kernels+=':DeltaRuleTest.TiledValueHeads:QuantGpuTest.MatmulQ4KGeometries:QuantGpuTest.MatmulQ6KGeometries'
  kernels+=':QuantGpuTest.MatmulCopyEngineManyBlocks:QuantGpuTest.NgramEmbedBlockFormats:GpuTest.TokenWindows*'
  kernels+=':GpuTest.NgramEmbed*:SampleCandidatesTest.*:GpuTest.MatmulGatedAndRoute*:Deterministic.*'
  # kernels changed since the 2026-12-05 run (few-row tensor-core and per-format dequantization
  # matmuls, Q4_K 8-row passes, the gated MLP's epilogue, early weight loads before the PDL wait)
  kernels+=':GpuTest.Matmul:GpuTest.GatedMlpEqualsItsParts:QuantGpuTest.MatmulTensorCoresFewRows'
  kernels+=':QuantGpuTest.MatmulPrefillAcrossDequantTiles:QuantGpuTest.MatmulRowsBitIdenticalToAlone'
  # the embedding fused with the first norm (2026-12-06; the one-launch argmax is GpuTest.Argmax above)
  kernels+=':GpuTest.EmbedRmsNorm*'
  # the integer-dot Q4_K GEMV over kQ4_K_T32 (landed 2026-12-06, thirty-sixth session)
  kernels+=':QuantGpuTest.MatmulQ4KT32:QuantGpuTest.MatmulQ8T32:QuantGpuTest.MatmulQ6KT32'
  # SANITIZE_TESTS replaces the list (a gtest filter); SANITIZE_TIMEOUT the time box of each tool.
  kernels="${SANITIZE_TESTS:-$kernels}"
  for tool in memcheck racecheck; do
    timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool $tool --error-exitcode 9 build/tests/kestrel_gpu_tests \
      --gtest_filter="$kernels" >"$out/sanitize-$tool.log" 2>&1
    echo "compute-sanitizer $tool exit $? ($(grep -E '(ERROR SUMMARY|RACECHECK SUMMARY)' "$out/sanitize-$tool.log" | tail -1))"
  done
fi
