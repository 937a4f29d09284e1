#!/usr/bin/env python3
# Where a replayed decode step's time goes, from a kernel trace of libkestrel_ktrace.so
# (tools/ktrace/ktrace.cc): the kernels of each graph replay and those launched outside the graph
# before the next one (the sampling), the last --steps steps (default 8) summed per kernel name
# and grid size.
#
# For each kernel it prints its time a step two ways:
#   run    end - start, which under programmatic dependent launch includes the time its
#          prologue waited for the kernel before it;
#   chain  how far it moved the step's latest end: end - max(end of every kernel before it),
#          at least 0. The chain times of a step add up to its span (first start to last end).
# So "chain" is what removing or speeding up a kernel can save, and the step's span against
# the time between steps' starts shows the host's share.
#   usage: scripts/trace-step-sum.py TRACE.csv [--steps N] [--list] [--top N]
import argparse
import collections
import statistics
import sys

import ktrace_csv

ap = argparse.ArgumentParser(description="Where a replayed decode step's time goes, from a ktrace CSV.")
ap.add_argument("trace", help="the CSV (or .csv.gz) that KTRACE_OUT named")
ap.add_argument("--steps", type=int, default=8, help="the last N steps (default 8)")
ap.add_argument("--list", action="store_true", help="also list the last step kernel by kernel")
ap.add_argument("--top", type=int, default=40, help="rows of the summary (default 40)")
args = ap.parse_args()

rows = ktrace_csv.load(args.trace, {"start_ns", "end_ns", "graph_id", "blocks", "name"})

kernels = sorted(
    (int(r["start_ns"]), int(r["end_ns"]), r["name"], int(r["blocks"]), int(r["threads"]), int(r["graph_id"]),
     int(r["graph_node_id"]))
    for r in rows
)
if not any(k[5] for k in kernels):
    sys.exit(f"{args.trace}: no kernel ran inside a CUDA graph (were the steps replayed?)")

# A step starts where a graph node runs again (every node runs once a replay) and takes the
# kernels launched outside the graph after it (the sampling), up to the next replay.
steps, cur, seen = [], [], set()
for k in kernels:
    if k[5]:
        node = (k[5], k[6])
        if node in seen:
            steps.append(cur)
            cur, seen = [], set()
        seen.add(node)
    if seen:
        cur.append(k[:5])
steps.append(cur)
if len(steps) < 3:
    sys.exit(f"{args.trace}: fewer than three replayed steps")
# The first replay may carry warm-up and the last may run into what follows the bench.
steps = steps[1:-1][-args.steps :]
n = len(steps)



def with_chain(step):
    """Each kernel of a step with its chain time in us: how far it moved the latest end."""
    latest = step[0][0]
    for k in step:
        yield k, max(0, k[1] - latest) / 1e3
        latest = max(latest, k[1])


run = collections.defaultdict(float)
chain = collections.defaultdict(float)
calls = collections.Counter()
spans, periods = [], []
for i, s in enumerate(steps):
    for (start, end, name, blocks, threads), c in with_chain(s):
        key = (name, blocks, threads)
        run[key] += (end - start) / 1e3
        chain[key] += c
        calls[key] += 1
    spans.append((max(k[1] for k in s) - s[0][0]) / 1e3)
    if i + 1 < n:
        periods.append((steps[i + 1][0][0] - s[0][0]) / 1e3)

span = statistics.median(spans)
print(f"{n} replayed steps, {len(steps[-1])} kernels in the last")
print(f"step span (first start to last end): median {span:.1f} us, min {min(spans):.1f}, max {max(spans):.1f}")
if periods:
    print(f"step period (start to next start):  median {statistics.median(periods):.1f} us")
print()
print(f"{'kernel':<60} {'blocks':>7} {'thr':>4} {'calls':>5} {'run us':>9} {'chain us':>9} {'chain %':>7}")
order = sorted(chain, key=lambda k: -chain[k])
for key in order[: args.top]:
    name, blocks, threads = key
    short = name if len(name) <= 60 else name[:57] + "..."
    print(f"{short:<60} {blocks:>7} {threads:>4} {calls[key] / n:>5.0f} {run[key] / n:>9.1f} {chain[key] / n:>9.1f} "
          f"{100 * chain[key] / n / span:>6.1f}%")
rest = order[args.top :]
if rest:
    print(f"{'(the other ' + str(len(rest)) + ')':<60} {'':>7} {'':>4} {sum(calls[k] for k in rest) / n:>5.0f} "
          f"{sum(run[k] for k in rest) / n:>9.1f} {sum(chain[k] for k in rest) / n:>9.1f}")

# Per name, grids merged.
by_name = collections.defaultdict(lambda: [0, 0.0, 0.0])
for key in chain:
    e = by_name[key[0]]
    e[0] += calls[key]
    e[1] += run[key]
    e[2] += chain[key]
print()
print(f"{'kernel (every grid)':<60} {'calls':>5} {'run us':>9} {'chain us':>9} {'chain %':>7}")
for name, (c, r, ch) in sorted(by_name.items(), key=lambda kv: -kv[1][2]):
    short = name if len(name) <= 60 else name[:57] + "..."
    print(f"{short:<60} {c / n:>5.0f} {r / n:>9.1f} {ch / n:>9.1f} {100 * ch / n / span:>6.1f}%")

if args.list:
    print()
    print("the last step, kernel by kernel (start relative to the step's first, in us):")
    t0 = steps[-1][0][0]
    for (start, end, name, blocks, threads), c in with_chain(steps[-1]):
        print(f"{(start - t0) / 1e3:>9.2f} {(end - start) / 1e3:>8.2f} {c:>7.2f}  {blocks:>6} {threads:>4}  {name[:90]}")
