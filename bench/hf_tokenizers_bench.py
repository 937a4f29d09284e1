#!/usr/bin/env python3
"""Hugging Face `tokenizers` encode/decode throughput, measured the way `kestrel bench-tokenizer` does.

    python3 bench/hf_tokenizers_bench.py --corpus kjv200k.txt \
        path/to/qwen3/tokenizer.json path/to/gemma3/tokenizer.json [--seconds 2] [--out FILE]

MB/s counts the corpus's UTF-8 bytes (10^6 bytes per MB). Median time of repeated calls (at least
5, and at least --seconds per measurement, after one warm-up call):
  encode 1T : tok.encode(corpus, add_special_tokens=False)          one call, one thread
  encode NT : tok.encode_batch(lines, add_special_tokens=False)     lines over all cores (rayon)
  decode 1T : tok.decode(ids of the whole corpus)
  decode NT : tok.decode_batch(ids of each line)
Write the corpus with `kestrel bench-tokenizer ... --save-corpus kjv200k.txt` (the first 200,000
characters of `bible -f Gen1:1-Rev22:21`), so both sides measure the same bytes. Needs no network.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def time_it(fn, seconds):
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizers", nargs="+", help="tokenizer.json files")
    ap.add_argument("--corpus", required=True, help="UTF-8 text file")
    ap.add_argument("--seconds", type=float, default=2.0, help="minimum time per measurement")
    ap.add_argument("--out", help="JSON results (default bench/results/hf-tokenizers-DATE.json)")
    args = ap.parse_args()

    with open(args.corpus, "rb") as f:
        raw = f.read()
    corpus = raw.decode("utf-8")
    lines = corpus.splitlines(keepends=True)
    mb = len(raw) / 1e6
    now = datetime.datetime.now(datetime.timezone.utc)
    record = {
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"host": platform.node(), "cpu": cpu_model(), "cores": os.cpu_count()},
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "tokenizers_version": tokenizers.__version__,
        "corpus": {"source": args.corpus, "bytes": len(raw), "documents": len(lines)},
        "results": [],
    }
    print(f"corpus: {args.corpus}, {mb:.3f} MB, {len(lines)} lines; tokenizers {tokenizers.__version__}, "
          f"{os.cpu_count()} cores")
    print(f"{'tokenizer':<40} {'tokens':>9} {'encode 1T MB/s':>14} {'encode NT MB/s':>14} "
          f"{'decode 1T MB/s':>14} {'decode NT MB/s':>14}")
    for path in args.tokenizers:
        tok = Tokenizer.from_file(path)
        ids = tok.encode(corpus, add_special_tokens=False).ids
        line_ids = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
        enc1 = time_it(lambda: tok.encode(corpus, add_special_tokens=False), args.seconds)
        encn = time_it(lambda: tok.encode_batch(lines, add_special_tokens=False), args.seconds)
        dec1 = time_it(lambda: tok.decode(ids, skip_special_tokens=False), args.seconds)
        decn = time_it(lambda: tok.decode_batch(line_ids, skip_special_tokens=False), args.seconds)
        row = {"tokenizer": path, "tokens": len(ids), "encode_1thread_MBps": mb / enc1,
               "encode_all_threads_MBps": mb / encn, "decode_1thread_MBps": mb / dec1,
               "decode_all_threads_MBps": mb / decn}
        record["results"].append(row)
        label = path if len(path) <= 40 else "..." + path[-37:]
        print(f"{label:<40} {len(ids):>9} {mb / enc1:>14.1f} {mb / encn:>14.1f} {mb / dec1:>14.1f} {mb / decn:>14.1f}")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   "hf-tokenizers-" + now.strftime("%Y%m%d-%H%M%S") + ".json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
