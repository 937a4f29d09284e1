#!/usr/bin/env python3
# Sums the per-kernel durations of an ncu CSV by kernel name and divides by the number of steps
# the profiled run took, printing time and launches a step, largest first. Reads either CSV
# layout: one row per kernel (`ncu --metrics gpu__time_duration.sum --csv --page raw
# --print-kernel-base function ...`) or one row per kernel and metric (`ncu --metrics
# gpu__time_duration.sum,dram__bytes_read.sum --csv ...`, the default page). With --grid, kernels
# are also split by grid size (one GEMV kernel serves matrices of every shape), and where the
# CSV has dram__bytes_read.sum the bytes and GB/s of each row are printed too.
# STEPS may be "per:NAME": the number of launches of the kernels whose name contains NAME (a
# kernel every step launches once, e.g. per:argmax_kernel for a decode step's sampling).
#   usage: scripts/ncu-kernel-sum.py FILE STEPS|per:NAME [--grid]
import collections
import csv
import sys

if len(sys.argv) < 3:
    sys.exit("usage: scripts/ncu-kernel-sum.py FILE STEPS|per:NAME [--grid]")
path, steps_arg, by_grid = sys.argv[1], sys.argv[2], "--grid" in sys.argv[3:]
rows = list(csv.reader(l for l in open(path, errors="replace") if l.startswith('"')))
if not rows:
    sys.exit(f"{path}: no CSV rows (expected ncu --csv output)")
hdr = rows[0]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


# kernels[id] = {"name", "grid", metric: value}; scale[metric] converts its unit to us / bytes
kernels, scale = {}, {}
to_us = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
to_bytes = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}
ki = hdr.index("Kernel Name")
gi = hdr.index("Grid Size") if "Grid Size" in hdr else None
if "Metric Name" in hdr:  # one row per kernel and metric
    ii, mi, ui, vi = hdr.index("ID"), hdr.index("Metric Name"), hdr.index("Metric Unit"), hdr.index("Metric Value")
    for r in rows[1:]:
        k = kernels.setdefault(r[ii], {"name": r[ki], "grid": r[gi] if gi is not None else ""})
        v = number(r[vi])
        if v is not None:
            k[r[mi]] = v
            scale[r[mi]] = to_us.get(r[ui], to_bytes.get(r[ui], 1.0))
else:  # one row per kernel, the second row holding the units
    units = rows[1] if len(rows) > 1 else []
    for i, name in enumerate(hdr):
        if name in ("gpu__time_duration.sum", "dram__bytes_read.sum") and i < len(units):
            scale[name] = to_us.get(units[i], to_bytes.get(units[i], 1.0))
    for n, r in enumerate(rows[2:]):
        k = kernels.setdefault(str(n), {"name": r[ki], "grid": r[gi] if gi is not None else ""})
        for name in scale:
            v = number(r[hdr.index(name)])
            if v is not None:
                k[name] = v
if "gpu__time_duration.sum" not in scale:
    sys.exit(f"{path}: no gpu__time_duration.sum metric")

tot, cnt, byt = collections.Counter(), collections.Counter(), collections.Counter()
for k in kernels.values():
    if "gpu__time_duration.sum" not in k:
        continue
    key = k["name"].split("(")[0] + (f"  grid {k['grid']}" if by_grid else "")
    tot[key] += k["gpu__time_duration.sum"] * scale["gpu__time_duration.sum"]
    cnt[key] += 1
    if "dram__bytes_read.sum" in k:
        byt[key] += k["dram__bytes_read.sum"] * scale["dram__bytes_read.sum"]
if steps_arg.startswith("per:"):
    steps = float(sum(1 for k in kernels.values() if steps_arg[4:] in k["name"]))
    if steps == 0:
        sys.exit(f"{path}: no launches of a kernel named like {steps_arg[4:]!r} to count steps by")
else:
    steps = number(steps_arg)
    if steps is None or steps <= 0:
        sys.exit(f"STEPS must be a positive number or per:NAME, not {steps_arg!r}")
print(f"total {sum(tot.values())/steps:.1f} us/step over {steps:g} steps; kernels {sum(cnt.values())/steps:.1f}/step")
for key, us in tot.most_common(40):
    extra = f" {byt[key]/steps/1e6:9.1f} MB/step {byt[key]/us/1e3:6.0f} GB/s" if key in byt and us > 0 else ""
    print(f"{us/steps:9.1f} us/step {cnt[key]/steps:7.1f} launches/step {us/cnt[key]:8.2f} us each{extra}  {key[:110]}")
