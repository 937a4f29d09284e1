# Reading a ktrace CSV (tools/ktrace/ktrace.cc) for trace-step-sum.py and trace-kernel-sum.py.
import csv
import gzip
import sys


def load(path, need):
    """The rows of the CSV (or .csv.gz) at path as dicts; exits with a message naming the file when
    it cannot be read or lacks one of the columns in need."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    if not rows or not set(need) <= set(rows[0]):
        sys.exit(f"{path}: expected a ktrace CSV with columns {sorted(need)}")
    return rows
