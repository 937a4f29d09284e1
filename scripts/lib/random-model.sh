# Sourced by the device benchmark scripts (run on the GPU machine after scripts/device-cuda-test.sh
# has built build/ and unpacked its Debian libraries under /tmp/deps): the library path, and a
# random-weight checkpoint of a released shape under $MODELS (default /tmp/models), written once.
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
models=${MODELS:-/tmp/models}
mkdir -p "$models"

# touch_reverted_sources: the files scripts/device-ab-patch.sh reverted after building a patch
# (listed in build/.kestrel-reverted) are touched, so that the next build replaces the patched
# binary even where a fresh copy of the tree gave the sources times older than build/'s objects.
touch_reverted_sources() {
  [ -f build/.kestrel-reverted ] || return 0
  while read -r f; do [ -f "$f" ] && touch "$f"; done <build/.kestrel-reverted
  rm -f build/.kestrel-reverted
}

# ensure_random_model PRESET NAME: $models/NAME holds `kestrel random-model --like PRESET`.
ensure_random_model() {
  local preset=$1 name=$2 start
  [ -f "$models/$name/config.json" ] && return 0
  start=$(date +%s)
  build/kestrel random-model --like "$preset" --out "$models/$name" --quiet || return 1
  echo "random-model $preset: $(( $(date +%s) - start )) s"
}
