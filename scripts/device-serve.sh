#!/usr/bin/env bash
# On the GPU machine, after scripts/device-cuda-test.sh has built build/: serves a checkpoint
# (random weights from scripts/device-bench.sh, with the Qwen3 tokenizer copied in) on the GPU
# and drives it with bench/serve_load.py at 1, 16 and 64 concurrent streaming clients.
#   usage: scripts/device-serve.sh OUT_DIR MODEL_DIR NAME TOKENIZER_DIR [kestrel serve options...]
# TOKENIZER_DIR holds qwen3.json.xz (tokenizer.json, compressed to travel) and tokenizer_config.json.
set -uo pipefail
out=${1:?OUT_DIR}
dir=${2:?MODEL_DIR}
name=${3:?NAME}
tok=${4:?TOKENIZER_DIR}
shift 4
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
if [ ! -f "$dir/tokenizer.json" ]; then
  xz -dc "$tok/qwen3.json.xz" >"$dir/tokenizer.json" && cp "$tok/tokenizer_config.json" "$dir/" || exit 1
fi
port=18080
build/kestrel serve -m "$dir" --device cuda --port $port "$@" >"$out/serve-$name.log" 2>&1 &
pid=$!
python3 - "$port" <<'PY' || { echo "server did not become ready"; tail -20 "$out/serve-$name.log"; kill $pid; exit 1; }
import sys, time, urllib.request
for _ in range(1200):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2).status == 200: sys.exit(0)
    except Exception:
        pass
    time.sleep(0.5)
sys.exit(1)
PY
echo "== kestrel serve -m $name --device cuda $* ; python3 bench/serve_load.py --clients 1,16,64 --requests 16 --prompt 128:512 --output 64:128"
python3 bench/serve_load.py --url http://127.0.0.1:$port --clients 1,16,64 --requests 16 --prompt 128:512 \
  --output 64:128 --out "$out/serve-$name.json" 2>&1 | tail -20
curl -s http://127.0.0.1:$port/metrics 2>/dev/null | grep -E '^kestrel_(preemptions|prefix|generated)' | head
kill -TERM $pid
wait $pid
echo "server exit $?"
tail -3 "$out/serve-$name.log"
