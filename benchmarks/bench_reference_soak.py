"""Soak the bundled reference: every family's properties hunted on it, and the reference hunted
against itself (a differential hunt), for --minutes of search per boundary and mode (issue 22:
ten minutes). The reference holds by construction, so every finding here is a false one (a
family that claims more than the math gives, or a bug in the reference): the scenario it
writes is the regression test to add. `tests/test_reference_soak.py` (-m slow) runs the same
hunts bounded by an example count instead.

    python benchmarks/bench_reference_soak.py [--minutes 10] [-b BOUNDARY ...] [--seed N]
                                              [--jobs 1] [--modes single,differential] [--json FILE]

Prints, per boundary and mode, the examples searched, their rate and the findings (each with
its message and scenario file); exits 1 when anything was found. No database, so every run
searches afresh; without --seed one is drawn and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sentinel import hunt as H  # noqa: E402
from sentinel.boundaries import BOUNDARIES  # noqa: E402
from sentinel.runner import TargetSpec  # noqa: E402

REFERENCE = TargetSpec("reference")
MODES = ("single", "differential")


def soak(mode: str, boundary: str, seconds: float, seed: int, jobs: int, out: Path) -> dict:
    """One mode's hunt of the reference on one boundary for `seconds` of search."""
    t0 = time.perf_counter()
    if mode == "single":
        rep = H.hunt(REFERENCE, boundaries=[boundary], max_examples=10 ** 9, min_examples=1, time_budget=seconds,
                     seed=seed, db=None, out_dir=out, jobs=jobs)
    else:
        rep = H.differential(REFERENCE, REFERENCE, [boundary], seconds, seed, out_dir=out, max_examples=10 ** 9,
                             min_examples=1)
    h = rep.hunt
    return {"mode": mode, "boundary": boundary, "seed": seed, "examples": h.examples, "search_s": round(h.search_s, 1),
            "examples_per_s": round(h.examples_per_s, 1), "wall_s": round(time.perf_counter() - t0, 1),
            "load": round(os.getloadavg()[0], 1), "properties": len(h.properties),
            "findings": [{"property": f.property, "message": f.message, "file": f.file} for f in h.findings]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="search minutes per boundary and mode")
    ap.add_argument("-b", "--boundary", action="append", help="a boundary (repeatable); default: all")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes of the single-target hunt")
    ap.add_argument("--modes", default=",".join(MODES), help="single, differential or both (comma separated)")
    ap.add_argument("--out", type=Path, default=None, help="where findings are written (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES] + [b for b in args.boundary or [] if b not in BOUNDARIES]
    if unknown:
        ap.error(f"unknown mode or boundary: {', '.join(unknown)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 31)
    out = args.out or Path(tempfile.mkdtemp(prefix="sentinel-soak-"))
    boundaries = args.boundary or sorted(BOUNDARIES)
    print(f"# the reference soaked for {args.minutes:g} min per boundary and mode, seed {seed}, findings under {out}")
    print(f"{'boundary':16s} {'mode':12s} {'props':>5s} {'examples':>9s} {'search s':>8s} {'ex/s':>7s} "
          f"{'load':>5s} findings")
    rows = []
    for b in boundaries:
        for mode in modes:
            r = soak(mode, b, args.minutes * 60, seed, args.jobs, out / mode / b)
            rows.append(r)
            print(f"{b:16s} {mode:12s} {r['properties']:5d} {r['examples']:9d} {r['search_s']:8.1f} "
                  f"{r['examples_per_s']:7.1f} {r['load']:5.1f} {len(r['findings'])}", flush=True)
            for f in r["findings"]:
                print(f"    FALSE FINDING {f['property']}: {f['message']}\n      {f['file']}", flush=True)
    found = sum(len(r["findings"]) for r in rows)
    print(f"# {sum(r['examples'] for r in rows)} examples in all, {found} finding(s)")
    if args.json:
        args.json.write_text(json.dumps({"seed": seed, "minutes": args.minutes, "rows": rows}, indent=2))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
