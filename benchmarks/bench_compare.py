"""Benchmark: `sentinel compare` (two revisions, two workers in parallel) against one
single-commit `sentinel run` of the same scenarios, measured in the same run.

    SENTINEL_SLIME_REPO=~/src/slime python benchmarks/bench_compare.py
    python benchmarks/bench_compare.py --target areal --repo ~/src/AReaL --base HEAD~5 --head HEAD

Aim: compare within 1.5x of a single run.
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
    ap.add_argument("--target", default="slime")
    ap.add_argument("--repo", default=os.environ.get("SENTINEL_SLIME_REPO"))
    ap.add_argument("--base", default="045310b2b^")
    ap.add_argument("--head", default="045310b2b")
    ap.add_argument("--scenarios", default=str(ROOT / "scenarios"))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    if not a.repo:
        sys.exit("give --repo (or set SENTINEL_SLIME_REPO to a slime checkout)")
    cli = [sys.executable, "-m", "sentinel"]
    single = wall([*cli, "run", a.scenarios, "--target", a.target, "--repo", a.repo, "--commit", a.head,
                   "-o", "-", "--json"], a.repeat)
    both = wall([*cli, "compare", a.scenarios, "--target", a.target, "--repo", a.repo, "--base", a.base,
                 "--head", a.head, "-o", "-", "--json"], a.repeat)
    print(f"{a.target} {a.base} -> {a.head}, scenarios {a.scenarios}, median of {a.repeat}, {os.cpu_count()} cores")
    print(f"sentinel run (one commit)   {single:7.2f} s")
    print(f"sentinel compare (two)      {both:7.2f} s   ratio compare / run = {both / single:.2f}x (aim <= 1.5x)")


if __name__ == "__main__":
    main()
