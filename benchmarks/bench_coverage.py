"""Reach per target at HEAD (issue 19): a hunt per boundary with --coverage, then the table:
reachable branches of the mapped functions covered (%), the unreachable ones with their
declared reasons, and the options the trainer read but the hunt never varied.

    python benchmarks/bench_coverage.py --targets reference slime --budget 20

A target other than reference reads its checkout from $SENTINEL_<TARGET>_REPO. Each hunt's
--coverage runs the catalog's scenarios of its boundary first, so the table counts what the
catalog and the hunt executed. A function several boundaries map is counted once: a branch
is covered where any of their hunts took it (the union), unreachable where its adapter says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def boundaries(target: str) -> list[str]:
    from sentinel import targets
    mapping = targets.adapter_class(target).mapping()
    return [b for b, m in mapping.items() if m["calls"] and not m["declined"]]


def hunt(target: str, boundary: str, budget: float, out: Path) -> dict:
    cmd = [sys.executable, "-m", "sentinel.cli", "hunt", "--target", target, "-b", boundary, "--time", str(budget),
           "--seed", "0", "--coverage", "--no-db", "--out", str(out / "found"), "-o", str(out / "hunt.json")]
    repo = os.environ.get(f"SENTINEL_{target.upper()}_REPO")
    if repo and target != "reference":
        cmd += ["--repo", repo]
    subprocess.run(cmd, capture_output=True, text=True)
    return json.loads((out / "hunt.json").read_text())["hunt"] if (out / "hunt.json").is_file() else {}


def _arcs(branches: list[dict]) -> set[tuple[int, int]]:
    return {(b["line"], d) for b in branches for d in b["missing"]}


def union(seen: dict | None, c: dict) -> dict:
    """One function's coverage over two hunts: a branch is missing only where both missed it
    (a hunt that never ran the function, branches_total 0, adds nothing)."""
    if seen is None or not seen["branches_total"]:
        return c
    if not c["branches_total"]:
        return seen
    keep = _arcs(seen["uncovered"]) & _arcs(c["uncovered"])
    gone = _arcs(seen["branches_unreachable"]) & _arcs(c["branches_unreachable"])

    def only(branches: list[dict], arcs: set) -> list[dict]:
        out = [{**b, "missing": [d for d in b["missing"] if (b["line"], d) in arcs]} for b in branches]
        return [b for b in out if b["missing"]]
    uncovered, unreachable = only(seen["uncovered"], keep), only(seen["branches_unreachable"], gone)
    total = seen["branches_total"]
    return {**seen, "uncovered": uncovered, "branches_unreachable": unreachable,
            "branches_covered": total - len(keep) - len(gone)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="+", default=["reference", "slime", "areal", "verl", "openrlhf", "trl"])
    ap.add_argument("--budget", type=float, default=120.0, help="seconds of search per boundary")
    ap.add_argument("--boundary", action="append", help="only these boundaries")
    a = ap.parse_args()
    for target in a.targets:
        functions: dict[str, dict] = {}
        not_varied: dict[str, list[str]] = {}
        for b in a.boundary or boundaries(target):
            with tempfile.TemporaryDirectory() as d:
                h = hunt(target, b, a.budget, Path(d))
            print(f"  {b}: {h.get('coverage_scenarios', 0)} catalog scenarios, "
                  f"{sum(p.get('examples', 0) for p in h.get('properties', []))} hunt examples", flush=True)
            for c in h.get("coverage", []):
                functions[c["function"]] = union(functions.get(c["function"]), c)
            for o in h.get("options", []):
                if o["options_read_not_varied"]:
                    not_varied[o["boundary"]] = o["options_read_not_varied"]
        total = sum(c["branches_total"] for c in functions.values())
        unreach = sum(len(x["missing"]) for c in functions.values() for x in c["branches_unreachable"])
        covered = sum(c["branches_covered"] for c in functions.values())
        pct = 100.0 * covered / (total - unreach) if total > unreach else 0.0
        print(f"== {target}: {covered}/{total - unreach} reachable branches covered ({pct:.1f} %), "
              f"{unreach} unreachable, {len(functions)} mapped functions, {a.budget:g} s per boundary")
        for name, c in sorted(functions.items()):
            print(f"  {name}: {c['branches_covered']}/{c['branches_total']}")
            for x in c["branches_unreachable"]:
                print(f"    unreachable line {x['line']}: {x['reason']}")
            for x in c["uncovered"][:8]:
                print(f"    uncovered line {x['line']}: {x['condition'][:100]}")
        for b, names in sorted(not_varied.items()):
            print(f"  read, never varied on {b}: {', '.join(names)}")


if __name__ == "__main__":
    main()
