"""Benchmark: `sentinel mutate` on each target at HEAD, measured in one run.

    python benchmarks/bench_mutate.py                           # reference, and every target found
    python benchmarks/bench_mutate.py --targets reference,slime --budget 2 -j 2 -b policy_loss

Targets: the reference always; slime, areal, verl, openrlhf and trl when their checkout is named
by SENTINEL_<NAME>_REPO or (areal, verl, openrlhf, trl) their package is installed. Prints one row
per target: mutants, killed, survived, the survivors whose change never ran (not reached: reach
work), equivalent, error, the score killed / (mutants - equivalent - error), and mutants judged
per minute per core (wall time of the judging of the cache misses, divided by -j), with the
1-minute load average before and after each target (the figure is only comparable at a like
load), and the examples per hunted boundary each survivor was hunted to (--survivor-examples:
survivors take longer with it, so rates before and after it do not compare). The reports go to
a temporary folder unless --out is given; --cache DIR lets an
interrupted run resume (the rate counts only the misses).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TARGETS = ("reference", "slime", "areal", "verl", "openrlhf", "trl")
EQUIVALENT = Path(__file__).resolve().parents[1] / "equivalent.yaml"


def located(target: str) -> list[str] | None:
    """The --repo arguments for `target`, [] for an installed package, None when absent."""
    if target == "reference":
        return []
    repo = os.environ.get(f"SENTINEL_{target.upper()}_REPO")
    if repo and Path(repo).exists():
        return ["--repo", repo]
    if target != "slime" and importlib.util.find_spec(target) is not None:
        return []
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--budget", type=float, default=2.0, help="hunt seconds per mutant the catalog leaves alive")
    ap.add_argument("--jobs", "-j", type=int, default=1)
    ap.add_argument("--boundary", "-b", action="append", default=[])
    ap.add_argument("--mutant", "-m", action="append", default=[],
                    help="only these mutants (id or key) or functions (module:qualname): a declared subset, cached as in a full run")
    ap.add_argument("--survivor-examples", type=int, default=None,
                    help="examples per hunted boundary a survivor needs (default: sentinel mutate's)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="mutant cache (default: none, every mutant judged)")
    ap.add_argument("--equivalent", type=Path, default=EQUIVALENT if EQUIVALENT.exists() else None,
                    help="equivalence claims (default: the repository's equivalent.yaml, from any folder)")
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-mutate-"))
    # The project's claims wherever the bench runs from (mutate alone reads ./equivalent.yaml).
    claims = ["--equivalent", str(a.equivalent)] if a.equivalent else []
    head = ("target", "mutants", "killed", "survived", "not reached", "equivalent", "error", "score", "mutants/min/core",
            "judged", "load before / after", "survivor floor")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head), flush=True)
    for t in a.targets.split(","):  # a row as each target ends: a long run shows what it has
        where = located(t)
        if where is None:
            print(f"{t}: skipped (no checkout in SENTINEL_{t.upper()}_REPO, no installed package)", file=sys.stderr)
            continue
        folder = out / t
        cache = ["--cache", str(a.cache)] if a.cache else ["--no-cache"]
        cmd = [sys.executable, "-m", "sentinel", "mutate", "-t", t, *where, "--budget", str(a.budget), "-j",
               str(a.jobs), *cache, "--out", str(folder), "--format", "json", *claims,
               *(x for b in a.boundary for x in ("-b", b)), *(x for m in a.mutant for x in ("-m", m)),
               *(["--survivor-examples", str(a.survivor_examples)] if a.survivor_examples is not None else [])]
        load = os.getloadavg()[0]
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL)  # its progress lines pass through on stderr
        if p.returncode not in (0, 1):
            print(f"{t}: failed with exit code {p.returncode} (its error is above)", file=sys.stderr)
            continue
        s = json.loads((folder / "mutate.json").read_text())["mutate"]
        c = s["totals"]
        row = (t, c["mutants"], c["killed"], c["survived"], c["survived_unreached"], c["equivalent"], c["error"],
               "n/a" if c["score"] is None else f"{100 * c['score']:.1f}%", s["mutants_per_min_per_core"],
               len(s["mutants"]) - s["cached"], f"{load:.1f} / {os.getloadavg()[0]:.1f}", s.get("survivor_examples", 0))
        print("| " + " | ".join(map(str, row)) + " |", flush=True)
    print(f"(reports in {out})", file=sys.stderr)


if __name__ == "__main__":
    main()
