#!/usr/bin/env python3
# Sums the per-kernel durations of an ncu CSV (`ncu --metrics gpu__time_duration.sum --csv --page raw
# --print-kernel-base function ... > FILE`) by kernel name and divides by the number of steps the
# profiled run took, printing time and launches a step, largest first.
#   usage: scripts/ncu-kernel-sum.py FILE STEPS
import csv, sys, collections
path, steps = sys.argv[1], float(sys.argv[2])
rows = list(csv.reader(l for l in open(path, errors="replace") if l.startswith('"')))
hdr = rows[0]
ki, ti = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
unit = rows[1][ti] if len(rows) > 1 else ""
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[1:]:
    try: v = float(r[ti].replace(",", ""))
    except ValueError: continue
    name = r[ki].split("(")[0]
    tot[name] += v; cnt[name] += 1
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
allt = sum(tot.values()) * scale
print(f"unit {unit}; total {allt/steps:.1f} us/step over {steps} steps; kernels {sum(cnt.values())/steps:.1f}/step")
for n, v in tot.most_common(40):
    print(f"{v*scale/steps:9.1f} us/step {cnt[n]/steps:7.1f} launches/step {v*scale/cnt[n]:8.2f} us each  {n[:110]}")
