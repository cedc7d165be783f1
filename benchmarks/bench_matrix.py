"""Benchmark: `sentinel matrix` over every available target against the sum of the
per-target catalog runs (`sentinel run scenarios/ --target T`), measured in the same run.

    SENTINEL_SLIME_REPO=~/src/slime SENTINEL_AREAL_REPO=~/src/AReaL python benchmarks/bench_matrix.py

The matrix runs one worker per column in parallel (as many at once as there are cores), so
on a machine with more cores than columns it should approach the slowest single target.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from timing import wall

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from sentinel import matrix as mx
    cols = [c for c in mx.default_columns() if c.spec is not None]
    cli = [sys.executable, "-m", "sentinel"]
    total = 0.0
    print(f"columns: {', '.join(c.key for c in cols)}; median of {a.repeat}; {os.cpu_count()} cores")
    for c in cols:
        cmd = [*cli, "run", str(ROOT / "scenarios"), "--target", c.spec.name, "-o", "-", "--json"]
        if c.spec.repo:
            cmd += ["--repo", c.spec.repo]
        t = wall(cmd, a.repeat)
        total += t
        print(f"  sentinel run --target {c.key:18} {t:7.2f} s")
    m = wall([*cli, "matrix", "--format", "json", "-o", "-"], a.repeat)
    print(f"sum of per-target runs           {total:7.2f} s")
    print(f"sentinel matrix (all columns)    {m:7.2f} s   ratio matrix / sum = {m / total:.2f}x")


if __name__ == "__main__":
    main()
