#!/usr/bin/env bash
# Runs the whole test suite: the main build's tests, then the loader tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer. GPU tests skip where no GPU is present.
# Usage: scripts/test.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake --build build
(cd build && ctest --output-on-failure -j "$jobs" --timeout 1200)

# Sanitized build of the engine library and the unit tests (loaders, parsers, tokenizer, ...).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKESTREL_SANITIZE=ON -DKESTREL_CUDA=OFF >/dev/null
cmake --build build-asan --target kestrel_unit_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build-asan/tests/kestrel_unit_tests --gtest_brief=1 --gtest_filter="${KESTREL_ASAN_FILTER:-*Loader*:*Safetensors*:*Gguf*:*Quant*:*Config*:*Tokenizer*:*Jinja*}"
