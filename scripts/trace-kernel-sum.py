#!/usr/bin/env python3
# Where a run's device time goes, kernel by kernel, from a ktrace CSV (tools/ktrace/ktrace.cc):
# for runs whose kernels are not replayed graphs (a prefill bench), which trace-step-sum.py
# needs. Sums every kernel of the trace, or of the window from the first start of a kernel whose
# name holds --from, by name: its calls, its run time (end - start) and its chain time (how far it
# moved the latest end; the chain times add up to the window's span, so they are what removing a
# kernel can save), with each one's share of the span, largest first.
#   usage: scripts/trace-kernel-sum.py TRACE.csv [--from TEXT] [--top N]
import argparse
import collections
import sys

import ktrace_csv

ap = argparse.ArgumentParser(description="Device time per kernel name over a whole ktrace CSV.")
ap.add_argument("trace", help="the CSV (or .csv.gz) that KTRACE_OUT named")
ap.add_argument("--from", dest="start", default="", help="begin at the first kernel whose name holds TEXT")
ap.add_argument("--top", type=int, default=30, help="rows of the summary (default 30)")
args = ap.parse_args()

rows = ktrace_csv.load(args.trace, {"start_ns", "end_ns", "name"})
kernels = sorted((int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in rows)
if args.start:
    first = next((i for i, k in enumerate(kernels) if args.start in k[2]), None)
    if first is None:
        sys.exit(f"{args.trace}: no kernel's name holds '{args.start}'")
    kernels = kernels[first:]

run = collections.defaultdict(float)
chain = collections.defaultdict(float)
calls = collections.Counter()
latest = kernels[0][0]
for start, end, name in kernels:
    calls[name] += 1
    run[name] += (end - start) / 1e6
    chain[name] += max(0, end - latest) / 1e6
    latest = max(latest, end)
span = (latest - kernels[0][0]) / 1e6
print(f"{len(kernels)} kernels over {span:.3f} ms; chain time adds up to the span")
print(f"{'chain ms':>10} {'share':>6} {'run ms':>10} {'calls':>7}  kernel")
for name, c in sorted(chain.items(), key=lambda kv: -kv[1])[: args.top]:
    print(f"{c:10.3f} {100 * c / span:5.1f}% {run[name]:10.3f} {calls[name]:7d}  {name[:110]}")
