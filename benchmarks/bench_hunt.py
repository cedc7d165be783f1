"""Benchmark `sentinel hunt`: throughput on the reference, and time and examples to the
first violation of each seed bug, all measured in this run.

    python benchmarks/bench_hunt.py [--time 20] [--seeds 3] [--jobs 1]
                                    [--slime PATH] [--areal] [--areal-repo PATH] [--json FILE]

1. Throughput: every property on the bundled reference for --time seconds (no database,
   fixed seed): examples per second of search (worker start-up excluded), with one worker
   and, with --jobs N, with N.
2. Seed bugs, hunted with no trigger given (no database, --seeds different seeds, median):
   - the planted bugs of the reference (`--plant NAME`), each by hunting its boundary;
   - slime HEAD's OPSM leak and the KL aliasing at 045310b2b^ (--slime PATH, a clone with
     history; default $SENTINEL_SLIME_REPO);
   - AReaL's no-EOS normalisation leak on the installed package (--areal) and on a checkout
     (--areal-repo PATH; default $SENTINEL_AREAL_REPO).
   Each is hunted two ways: `property` (only the property that catches it: the focused
   search) and `boundary` (every property of its boundary, taking turns; the property's
   own time to its first violation is reported). Time is search time from the hunt's start;
   `wall` adds the worker start-up (importing torch and the target).
   Aim: each seed bug found within 10 s on CPU.

Nothing here is a pass/fail test; it prints a table (and --json writes the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sentinel import hunt as H  # noqa: E402
from sentinel.runner import TargetSpec  # noqa: E402

# (label, target spec, boundary, property that catches it)
PLANTED = [
    ("opsm-token-level", "opsm_mask", "opsm_mask.sequence_uniform"),
    ("reward-norm-before-no-eos", "advantages", "advantages.no_eos_isolation"),
    ("kl-inplace-shaping", "advantages", "advantages.logged_kl"),
    ("is-weight-attached", "is_correction", "is_correction.detached"),
    ("masked-kl-leak", "gspo_kl", "gspo_kl.masked_invariance"),
    ("loss-agg-counts-padding", "loss_agg", "loss_agg.padding_invariant"),
    ("grpo-cross-group", "reward_norm", "reward_norm.group_isolation"),
    ("input-mutation", "kl", "kl.unmutated"),
    ("row-order", "reward_norm", "reward_norm.permutation_equivariant"),
    ("gspo-token-ratio", "policy_loss", "policy_loss.sequence_uniform"),
]


def seed_bugs(args) -> list[tuple[str, TargetSpec, str, str]]:
    from sentinel_adapters.plants import PLANTS
    missing = set(PLANTS) - {p for p, _, _ in PLANTED}
    if missing:
        sys.exit(f"bench_hunt: no hunt listed for plant(s) {sorted(missing)}")
    out = [(f"reference --plant {p}", TargetSpec("reference", plant=p), b, prop) for p, b, prop in PLANTED]
    if args.slime:
        out.append(("slime HEAD: OPSM leak", TargetSpec("slime", args.slime), "opsm_mask",
                    "opsm_mask.sequence_uniform"))
        out.append(("slime 045310b2b^: KL aliasing", TargetSpec("slime", args.slime, "045310b2b^"), "advantages",
                    "advantages.logged_kl"))
    if args.areal:
        out.append(("areal (installed): no-EOS leak", TargetSpec("areal"), "advantages",
                    "advantages.no_eos_isolation"))
    if args.areal_repo:
        out.append(("areal checkout: no-EOS leak", TargetSpec("areal", args.areal_repo), "advantages",
                    "advantages.no_eos_isolation"))
    return out


def throughput(seconds: float, jobs: int, out: Path) -> dict:
    t0 = time.perf_counter()
    rep = H.hunt(TargetSpec("reference"), max_examples=10 ** 9, time_budget=seconds, seed=0, db=None,
                 out_dir=out, jobs=jobs)
    h = rep.hunt
    return {"jobs": jobs, "examples": h.examples, "search_s": h.search_s, "examples_per_s": h.examples_per_s,
            "startup_s": h.startup_s, "wall_s": round(time.perf_counter() - t0, 2), "findings": len(h.findings)}


def first_violation(spec: TargetSpec, mode: str, boundary: str, prop: str, seed: int, out: Path,
                    budget: float) -> dict:
    kw = {"names": [prop]} if mode == "property" else {"boundaries": [boundary], "until": [prop]}
    t0 = time.perf_counter()
    rep = H.hunt(spec, max_examples=2000 if mode == "property" else 200, time_budget=budget, seed=seed, db=None,
                 out_dir=out, first=(mode == "property"), **kw)
    wall = time.perf_counter() - t0
    f = next((f for f in rep.hunt.findings if f.property == prop), None)
    if f is None:
        return {"found": False, "wall_s": wall, "startup_s": rep.hunt.startup_s}
    return {"found": True, "time_s": f.time_to_first_s, "examples": f.examples_to_first,
            "wall_to_first_s": rep.hunt.startup_s + f.time_to_first_s, "startup_s": rep.hunt.startup_s,
            "rows": f.rows, "tokens": f.tokens, "shrink_calls": f.shrink_calls, "reproduced": f.reproduced}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", type=float, default=20.0, help="seconds of the throughput hunt")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per seed bug (median reported)")
    ap.add_argument("--jobs", type=int, default=1, help="also measure throughput with this many workers")
    ap.add_argument("--budget", type=float, default=30.0, help="search budget per seed-bug hunt")
    ap.add_argument("--modes", default="property,boundary")
    ap.add_argument("--slime", default=os.environ.get("SENTINEL_SLIME_REPO"))
    ap.add_argument("--areal", action="store_true", help="hunt the installed areal package")
    ap.add_argument("--areal-repo", default=os.environ.get("SENTINEL_AREAL_REPO"))
    ap.add_argument("--json", type=Path, help="write the numbers here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-hunt-"))
    result: dict = {"cpu_count": os.cpu_count(), "throughput": [], "seed_bugs": []}

    print(f"# sentinel hunt benchmark ({os.cpu_count()} CPUs)\n")
    print("## throughput: every property on the reference, no database, seed 0")
    for jobs in sorted({1, args.jobs}):
        r = throughput(args.time, jobs, tmp / f"tp{jobs}")
        result["throughput"].append(r)
        print(f"  jobs={jobs}: {r['examples']} examples in {r['search_s']:.1f} s search = "
              f"{r['examples_per_s']:.0f} examples/s (worker start {r['startup_s']:.1f} s; findings {r['findings']})")

    print(f"\n## seed bugs: time and examples to the first violation (median of {args.seeds} seeds, no database)")
    head = (f"  {'seed bug':40s} {'mode':9s} {'found':6s} {'search s':>9s} {'wall s':>7s} {'examples':>9s} "
            f"{'trigger':>8s}")
    print(head)
    for label, spec, boundary, prop in seed_bugs(args):
        for mode in args.modes.split(","):
            runs = [first_violation(spec, mode, boundary, prop, s, tmp / "sb", args.budget) for s in range(args.seeds)]
            ok = [r for r in runs if r["found"]]
            row = {"bug": label, "mode": mode, "property": prop, "found": f"{len(ok)}/{len(runs)}", "runs": runs}
            if ok:
                row.update(time_s=statistics.median(r["time_s"] for r in ok),
                           wall_s=statistics.median(r["wall_to_first_s"] for r in ok),
                           examples=statistics.median(r["examples"] for r in ok),
                           trigger=max((r["rows"], r["tokens"]) for r in ok))
                trig = f"{row['trigger'][0]}x{row['trigger'][1]}" if row["trigger"][1] else f"{row['trigger'][0]} rows"
                print(f"  {label:40s} {mode:9s} {row['found']:6s} {row['time_s']:9.2f} {row['wall_s']:7.2f} "
                      f"{row['examples']:9.0f} {trig:>8s}")
            else:
                print(f"  {label:40s} {mode:9s} {row['found']:6s} {'-':>9s}")
            result["seed_bugs"].append(row)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nnumbers written to {args.json}")


if __name__ == "__main__":
    main()
