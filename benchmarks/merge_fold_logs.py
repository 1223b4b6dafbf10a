"""Merge per-fold lines of cross-validation runs that were split over several processes.

    python benchmarks/merge_fold_logs.py table1 results/kuss_rasmussen_table1.log \
results/kuss_rasmussen_table1_usps_folds4-10.log ...
    python benchmarks/merge_fold_logs.py em-ep results/kim_ghahramani_cv_*.log

The long 10-fold runs (Kuss & Rasmussen Table 1 on USPS, Kim & Ghahramani's
Table 2) were run in pieces (``--skip-folds``), each printing one line per fold
and method.  This script reads those lines from the logs, keeps one record per
(data set, fold, method) (a fold repeated in a later log replaces the earlier
line: it is the same computation), and prints the mean over folds with its
standard error (standard deviation / sqrt(number of folds)).
"""

import re
import sys
from collections import defaultdict

import numpy as np

TABLE1 = re.compile(
    r"^\s*(?P<data>\S+)\s+fold\s+(?P<fold>\d+)\s+(?P<method>laplace|ep)\s+E\s+(?P<E>[\d.]+)%\s+I\s+(?P<I>[-\d.]+)\s+"
    r"\|m\|\s+(?P<m>[\d.]+)\s+lml\s+(?P<lml>[-\d.]+).*conv (?P<conv>\S+)"
)
EM_EP = re.compile(
    r"^cv (?P<data>\S+) fold (?P<fold>\d+) (?P<method>.+?)\s*: error (?P<E>[\d.]+)\s+log q_EP\s+(?P<lml>[-\d.]+)\s+"
    r"steps\s+(?P<steps>\d+) conv (?P<conv>\S+)\s+eps (?P<eps>[\d.]+)"
)


def read(kind, paths):
    pattern = TABLE1 if kind == "table1" else EM_EP
    records = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                match = pattern.match(line)
                if match:
                    d = match.groupdict()
                    records[(d["data"], int(d["fold"]), d["method"])] = d
    return records


def summarise(kind, records):
    groups = defaultdict(list)
    for (data, fold, method), d in sorted(records.items()):
        groups[(data, method)].append((fold, d))
    for (data, method), rows in groups.items():
        folds = [f for f, _ in rows]

        def stat(field, scale=1.0):
            x = np.array([float(d[field]) for _, d in rows]) * scale
            se = x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
            return x, se

        E, E_se = stat("E", 1.0 if kind == "table1" else 100.0)
        line = (f"{data:11s} {method:18s} folds {len(rows):2d} ({min(folds)}..{max(folds)})  "
                f"E {E.mean():5.2f} +- {E_se:4.2f} %")
        if kind == "table1":
            info, info_se = stat("I")
            norm_m = np.array([float(d["m"]) for _, d in rows])
            line += (f"  I {info.mean():.3f} +- {info_se:.3f}  "
                     f"|m| mean {norm_m.mean():.4g} median {np.median(norm_m):.4g}")
        unconverged = sum("N" in d["conv"] or d["conv"] == "False" for _, d in rows)
        line += f"  fits not converged: {unconverged}"
        print(line)


def main():
    kind, paths = sys.argv[1], sys.argv[2:]
    if kind not in ("table1", "em-ep") or not paths:
        raise SystemExit(__doc__)
    summarise(kind, read(kind, paths))


if __name__ == "__main__":
    main()
