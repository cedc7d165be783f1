"""Benchmark `sentinel hunt`: throughput, single-target and differential, and the time to each
bug it must find with no trigger given, all measured in this run.

    python benchmarks/bench_hunt.py [--time 20] [--seeds 3] [--jobs 1] [--sections ...]
                                    [--slime PATH] [--areal] [--areal-repo PATH] [--json FILE]
                                    [--baseline DIR [--repeat 3]]

Sections (--sections, comma separated; default all that the given targets allow):
- `throughput`: every property on the bundled reference for --time seconds (no database,
  seed 0): examples per second of search (worker start-up excluded), with one worker and,
  with --jobs N, with N. Aim: >= 1,000 examples/s per worker (issue 24). `--baseline DIR` (a
  source tree of another commit: `git archive REV | tar -x -C DIR`) instead times one worker of
  that tree and of this one, each hunt in its own process (its CLI, zygote and worker run that
  tree's code), interleaved --repeat times: a before / after in one run.
- `differential`: the reference against itself over every boundary for --time seconds:
  examples compared per second, as a ratio to the single-target throughput of the same run
  (aim >= 0.5); with --slime, slime HEAD^ against HEAD as a ratio to a single-target hunt of
  slime HEAD in the same run.
- `seeds`: the planted bugs of the reference (`--plant NAME`, each by hunting its boundary,
  and by the one property that catches it), slime HEAD's OPSM leak and the KL aliasing at
  045310b2b^, AReaL's no-EOS leak (--areal / --areal-repo): time and examples to the first
  violation (median of --seeds seeds). Aim: each within 10 s.
- `drawing` (not in the default list): drawing alone, Hypothesis's engine included: CPU
  milliseconds per example of `find` over every property's batches with a condition that never
  fails (the generate phase, 60 test cases a property, seed 0); with --baseline, of both trees,
  each in its own process, interleaved --repeat times.
- `rounds` (not in the default list): every property's first round (probe on, --quota examples,
  seed 0) in-process, one after another: examples per CPU second and CPU milliseconds per round,
  the worker's fork and IPC left out; with --baseline, of both trees, each in its own process,
  interleaved --repeat times. CPU time, so a loaded machine that starves the throughput section's
  short rounds still gives a before / after.
- `profile` (not in the default list): cProfile of in-process hunt rounds on the reference:
  the share of an example's time in the trainer's call, observe, plan, invariant evaluation,
  drawing, and Hypothesis's engine with the search's bookkeeping, and the IPC per round.
- `done` (the differential and multi-bug checks): `--against reference` on each plant; with
  --slime: 045310b2b^ -> 045310b2b (a `fixed` finding on advantages) and 763f18d5b^ ->
  763f18d5b (a `fixed` finding on policy_loss), each within 60 s of search; 16c15fc20^ ->
  16c15fc20 (no loss-path file) and 624b824a8^ -> 624b824a8 (an NFC move inside two loss-path
  files): no finding in 120 s each; slime HEAD with --known
  scenarios/findings/ for 60 s (the OPSM bug; which known findings were met and passed over).

Search time is the hunt's own (worker start excluded); `wall` adds the start. Nothing here
is a pass/fail test; it prints a table (and --json writes the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sentinel import hunt as H  # noqa: E402
from sentinel.runner import TargetSpec  # noqa: E402

# (plant, boundary, property that catches it)
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
    ("logprobs-temperature-inplace", "logprobs", "logprobs.unmutated"),
    ("logprobs-temperature-twice", "logprobs", "logprobs.log_probs"),
    ("values-shifted", "values", "values.head"),
    ("metrics-over-padding", "metrics", "metrics.masked_invariance"),
    ("masked-reduce-multiplies", "masked_reduce", "masked_reduce.finite.nan"),
    ("ratio-in-low-precision", "policy_loss", "policy_loss.precision.bf16"),
    ("kl-straight-through-k1-gradient", "kl", "kl.straight_through"),
    ("actor-temperature-twice", "actor_logprobs", "actor_logprobs.log_probs"),
    ("actor-concat-reorders", "actor_logprobs", "actor_logprobs.batching_invariant"),
    ("actor-unpad-offset", "actor_logprobs", "actor_logprobs.batching_invariant"),
]
CATALOG_FINDINGS = HERE.parent / "scenarios" / "findings"


def _tmp(tmp: Path, name: str) -> Path:
    return tmp / f"{name}-{time.monotonic_ns()}"


def throughput(spec: TargetSpec, seconds: float, jobs: int, out: Path, boundaries=None) -> dict:
    t0 = time.perf_counter()
    rep = H.hunt(spec, boundaries=boundaries, max_examples=10 ** 9, time_budget=seconds, seed=0, db=None,
                 out_dir=out, jobs=jobs)
    h = rep.hunt
    return {"jobs": jobs, "examples": h.examples, "search_s": h.search_s, "examples_per_s": h.examples_per_s,
            "per_worker": round(h.examples_per_s / jobs, 1), "per_cpu_s": h.examples_per_cpu_s,
            "load": round(os.getloadavg()[0], 1), "startup_s": h.startup_s,
            "wall_s": round(time.perf_counter() - t0, 2), "findings": len(h.findings)}


def diff_throughput(base: TargetSpec, head: TargetSpec, seconds: float, out: Path, boundaries=None) -> dict:
    t0 = time.perf_counter()
    rep = H.differential(base, head, boundaries, seconds, 0, out_dir=out)
    h = rep.hunt
    return {"examples": h.examples, "search_s": h.search_s, "examples_per_s": h.examples_per_s,
            "startup_s": h.startup_s, "wall_s": round(time.perf_counter() - t0, 2), "findings": len(h.findings),
            "differing": h.differential.differing}


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


def differential_check(label: str, base: TargetSpec, head: TargetSpec, boundaries, budget: float, out: Path,
                       against: bool = False, first: bool = True) -> dict:
    t0 = time.perf_counter()
    rep = H.differential(base, head, boundaries, budget, 0, against=against, out_dir=out, first=first)
    h = rep.hunt
    f = h.findings[0] if h.findings else None
    row = {"check": label, "findings": len(h.findings), "compared": h.differential.compared, "search_s": h.search_s,
           "wall_s": round(time.perf_counter() - t0, 2), "startup_s": h.startup_s}
    if f is not None:
        row.update(classification=f.classification, property=f.property, observable=f.signature.observable,
                   time_s=f.time_to_first_s, examples=f.examples_to_first, reproduced=f.reproduced,
                   trigger=f"{f.rows}x{f.tokens}")
    return row


def seed_bugs(args) -> list[tuple[str, TargetSpec, str, str]]:
    from sentinel_adapters.reference.plants import PLANTS
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


# one throughput hunt in a fresh process, of whichever `sentinel` its PYTHONPATH puts first
_THROUGHPUT = """
import json, os, sys, tempfile, time
from sentinel import hunt as H
from sentinel.runner import TargetSpec
rep = H.hunt(TargetSpec("reference"), max_examples=10 ** 9, time_budget=float(sys.argv[1]), seed=0, db=None,
             out_dir=tempfile.mkdtemp(prefix="bench-hunt-tp-"))
h = rep.hunt
print(json.dumps({"examples": h.examples, "search_s": h.search_s, "examples_per_s": h.examples_per_s,
                  "per_cpu_s": h.examples_per_cpu_s, "load": round(os.getloadavg()[0], 1)}))
"""


# drawing alone, in a fresh process, of whichever `sentinel` its PYTHONPATH puts first
_DRAWING = """
import json, os, random, time
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample
from sentinel import strategies as S
from sentinel.hunt import properties
strategies = [S.batches(p.strategy(), 16) for p in properties.select()]  # built and validated first
n = [0]
def never(batch):
    n[0] += len(batch)
    return False
t0 = time.process_time()
for s in strategies:
    try:
        find(s, never, settings=settings(max_examples=60, database=None, deadline=None, phases=(Phase.generate,),
                                         suppress_health_check=list(HealthCheck)), random=random.Random(0))
    except NoSuchExample:
        pass
cpu = time.process_time() - t0
print(json.dumps({"properties": len(strategies), "examples": n[0], "cpu_s": cpu, "ms_per_example": cpu / n[0] * 1e3,
                  "load": round(os.getloadavg()[0], 1)}))
"""


def _tree_env(tree: Path, tmp: Path) -> dict[str, str]:
    """The environment whose PYTHONPATH puts `tree`'s packages first: `sentinel`, and its
    adapters and catalog under their installed names (pyproject's package mapping)."""
    links = tmp / f"packages-{abs(hash(str(tree.resolve())))}"
    if not links.exists():
        links.mkdir()
        (links / "sentinel_adapters").symlink_to(tree.resolve() / "adapters")
        (links / "sentinel_catalog").symlink_to(tree.resolve() / "scenarios")
    path = [str(tree.resolve()), str(links), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def _in_tree(tree: Path, code: str, tmp: Path, *args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=_tree_env(tree, tmp), cwd=tmp)
    if p.returncode:
        sys.exit(f"bench_hunt: the run in {tree} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _throughput_in(tree: Path, seconds: float, tmp: Path) -> dict:
    return _in_tree(tree, _THROUGHPUT, tmp, str(seconds))


def _per_tree(args, tmp: Path, code: str, line, *argv: str) -> dict[str, list[dict]]:
    """`code` run in this tree and, with --baseline, in the baseline tree, interleaved --repeat
    times (a change of load shows in both columns alike); `line` words each run's result."""
    trees = {"this": HERE.parent, **({"baseline": args.baseline} if args.baseline else {})}
    rows: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.repeat if args.baseline else 1):
        for k, tree in trees.items():
            rows[k].append(_in_tree(tree, code, tmp, *argv))
            print(f"  {k:8s} {line(rows[k][-1])}")
    return rows


def section_drawing(args, tmp: Path, result: dict) -> None:
    print("\n## drawing alone (Hypothesis's engine included), every property, CPU ms per example")
    rows = _per_tree(args, tmp, _DRAWING, lambda r: (
        f"{r['examples']:6d} examples of {r['properties']} properties: {r['cpu_s']:.2f} CPU s, "
        f"{r['ms_per_example']:.3f} ms per example (load average {r['load']})"))
    med = {k: statistics.median(r["ms_per_example"] for r in v) for k, v in rows.items()}
    result["drawing"] = {"runs": rows, "median_ms": med}
    if args.baseline:
        print(f"  median: this tree {med['this']:.3f} ms, baseline {med['baseline']:.3f} ms per example: "
              f"baseline / this = {med['baseline'] / med['this']:.2f}x")


# every property's first round in-process, in a fresh process of whichever `sentinel` its PYTHONPATH
# puts first: CPU per example and per round, the worker's fork and IPC left out (so a loaded machine,
# which starves a 20 s hunt's short rounds, still gives a figure)
_ROUNDS = """
import inspect, json, os, sys, time
import torch
from sentinel import targets
from sentinel.hunt import properties
from sentinel.hunt.worker.round import run_round, warm
torch.set_num_threads(1)
adapter = targets.adapter_class("reference")(None, torch.device("cpu"), {})
adapter.load()
names = [p.name for p in properties.select()]
for n in names:  # as that tree's worker warms a round (a newer one with the adapter's domains)
    warm(n, **({"adapter": adapter} if "adapter" in inspect.signature(warm).parameters else {}))
quota = int(sys.argv[1])
examples, t0 = 0, time.process_time()
for n in names:
    job = {"property": n, "time_limit": 60.0, "max_examples": quota, "seed": "0", "db_key": n, "shrink_time": 0.5,
           "probe": True}
    examples += run_round(adapter, torch.device("cpu"), job, lambda e: None)["examples"]
cpu = time.process_time() - t0
print(json.dumps({"rounds": len(names), "examples": examples, "cpu_s": cpu, "per_cpu_s": examples / cpu,
                  "ms_per_round": cpu / len(names) * 1e3, "load": round(os.getloadavg()[0], 1)}))
"""


def section_rounds(args, tmp: Path, result: dict) -> None:
    print(f"\n## every property's first round in-process (probe on, quota {args.quota}, seed 0): CPU per example")
    rows = _per_tree(args, tmp, _ROUNDS, lambda r: (
        f"{r['examples']:6d} examples in {r['rounds']} rounds: {r['cpu_s']:.2f} CPU s, {r['per_cpu_s']:.0f} examples "
        f"per CPU second, {r['ms_per_round']:.1f} ms per round (load average {r['load']})"), str(args.quota))
    med = {k: statistics.median(r["per_cpu_s"] for r in v) for k, v in rows.items()}
    result["rounds"] = {"runs": rows, "median_per_cpu_s": med}
    if args.baseline:
        print(f"  median: this tree {med['this']:.0f}, baseline {med['baseline']:.0f} examples per CPU second: "
              f"this / baseline = {med['this'] / med['baseline']:.2f}x")


def section_baseline(args, tmp: Path, result: dict) -> None:
    print(f"## throughput before / after: one worker each, every property on the reference, seed 0, "
          f"interleaved x{args.repeat}")
    rows: dict[str, list[dict]] = {"this": [], "baseline": []}
    for _ in range(args.repeat):  # interleaved: a change of load shows in both columns alike
        rows["this"].append(_throughput_in(HERE.parent, args.time, tmp))
        rows["baseline"].append(_throughput_in(args.baseline, args.time, tmp))
        for k in rows:
            r = rows[k][-1]
            print(f"  {k:8s} {r['examples']:6d} examples in {r['search_s']:.1f} s = {r['examples_per_s']:.0f}/s, "
                  f"{r['per_cpu_s']:.0f} per CPU second of the worker (load average {r['load']})")
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("examples_per_s", "per_cpu_s")}
           for k, v in rows.items()}
    ratio = {m: med["this"][m] / med["baseline"][m] if med["baseline"][m] else 0.0 for m in med["this"]}
    result["baseline"] = {"tree": str(args.baseline), "runs": rows, "median": med, "ratio": ratio}
    print(f"  median: this tree {med['this']['examples_per_s']:.0f}/s ({med['this']['per_cpu_s']:.0f} per CPU s), "
          f"baseline {med['baseline']['examples_per_s']:.0f}/s ({med['baseline']['per_cpu_s']:.0f} per CPU s): "
          f"this / baseline = {ratio['examples_per_s']:.2f}x ({ratio['per_cpu_s']:.2f}x per CPU second; "
          f"aim >= 1,000/s)")


def section_throughput(args, tmp: Path, result: dict) -> None:
    if args.baseline:
        section_baseline(args, tmp, result)
        return
    print("## throughput: every property on the reference, no database, seed 0")
    for jobs in sorted({1, args.jobs}):
        r = throughput(TargetSpec("reference"), args.time, jobs, _tmp(tmp, "tp"))
        result["throughput"].append(r)
        print(f"  jobs={jobs}: {r['examples']} examples in {r['search_s']:.1f} s search = {r['examples_per_s']:.0f} "
              f"examples/s, {r['per_worker']:.0f} per worker, {r['per_cpu_s']:.0f} per CPU second of a worker "
              f"(aim >= 1,000; load average {r['load']}; worker start {r['startup_s']:.1f} s; findings {r['findings']})")


def section_differential(args, tmp: Path, result: dict) -> None:
    print("\n## differential throughput, as a ratio to a single-target hunt in this run (aim >= 0.5)")
    ref = TargetSpec("reference")
    pairs = [("reference vs reference", ref, ref, ref, None)]
    if args.slime:
        slime = TargetSpec("slime", args.slime)
        # boundaries where slime HEAD has no finding: a single-target hunt's shrinking would not compare
        pairs.append(("slime HEAD^ vs HEAD (kl, gae)", TargetSpec("slime", args.slime, "HEAD^"), slime, slime,
                      ["kl", "gae"]))
    for label, base, head, single, boundaries in pairs:
        one = throughput(single, args.time, 1, _tmp(tmp, "single"), boundaries)
        two = diff_throughput(base, head, args.time, _tmp(tmp, "diff"), boundaries)
        ratio = two["examples_per_s"] / one["examples_per_s"] if one["examples_per_s"] else 0.0
        result["differential"].append({"pair": label, "single": one, "differential": two, "ratio": round(ratio, 2)})
        print(f"  {label:28s} differential {two['examples_per_s']:.0f} examples/s (both sides) vs single-target "
              f"{one['examples_per_s']:.0f}/s = {ratio:.2f}x")


def section_seeds(args, tmp: Path, result: dict) -> None:
    print(f"\n## seed bugs: time and examples to the first violation (median of {args.seeds} seeds, no database)")
    print(f"  {'seed bug':40s} {'mode':9s} {'found':6s} {'search s':>9s} {'wall s':>7s} {'examples':>9s} "
          f"{'trigger':>8s}")
    for label, spec, boundary, prop in seed_bugs(args):
        for mode in args.modes.split(","):
            runs = [first_violation(spec, mode, boundary, prop, s, _tmp(tmp, "sb"), args.budget)
                    for s in range(args.seeds)]
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


def section_done(args, tmp: Path, result: dict) -> None:
    print("\n## differential and multi-bug checks (search seconds to the finding; wall adds the worker start)")
    rows = []
    for plant, boundary, _ in PLANTED:
        rows.append(differential_check(f"--against reference, --plant {plant}", TargetSpec("reference"),
                                       TargetSpec("reference", plant=plant), [boundary], 60.0, _tmp(tmp, "ag"),
                                       against=True))
    if args.slime:
        s = args.slime
        rows.append(differential_check("slime 045310b2b^ -> 045310b2b", TargetSpec("slime", s, "045310b2b^"),
                                       TargetSpec("slime", s, "045310b2b"), None, 60.0, _tmp(tmp, "kl")))
        rows.append(differential_check("slime 763f18d5b^ -> 763f18d5b", TargetSpec("slime", s, "763f18d5b^"),
                                       TargetSpec("slime", s, "763f18d5b"), None, 60.0, _tmp(tmp, "ptl")))
        for rev, why in (("16c15fc20", "no loss-path file"), ("624b824a8", "NFC move in two loss-path files")):
            rows.append(differential_check(f"slime {rev}^ -> {rev} ({why})", TargetSpec("slime", s, f"{rev}^"),
                                           TargetSpec("slime", s, rev), None, 120.0, _tmp(tmp, "nfc"), first=False))
        t0 = time.perf_counter()
        rep = H.hunt(TargetSpec("slime", s), boundaries=["policy_loss", "opsm_mask"], time_budget=60.0,
                     max_examples=2000, seed=0, db=None, out_dir=_tmp(tmp, "known"),
                     known=H.load_known([CATALOG_FINDINGS]))
        opsm = next((f for f in rep.hunt.findings if f.property == "opsm_mask.sequence_uniform"), None)
        again = [k.source.rsplit(": ", 1)[-1] for k in rep.hunt.known if k.excluded and k.source != "this hunt"]
        rows.append({"check": "slime HEAD --known scenarios/findings/: OPSM", "findings": len(rep.hunt.findings),
                     "time_s": opsm.time_to_first_s if opsm else None, "search_s": rep.hunt.search_s,
                     "wall_s": round(time.perf_counter() - t0, 2), "known_passed_over": sorted(set(again)),
                     "properties": sorted({f.property for f in rep.hunt.findings})})
    for r in rows:
        found = (f"{r.get('classification', 'found')} {r.get('observable', '')} in {r['time_s']:.2f} s"
                 if r.get("time_s") is not None else "no finding")
        print(f"  {r['check']:56s} {found:42s} findings {r['findings']:2d}  search {r['search_s']:.1f} s  "
              f"wall {r['wall_s']:.1f} s" + (f"  known passed over: {r['known_passed_over']}" if "known_passed_over" in r else ""))
    result["done"] = rows


# the per-example path, as cProfile names it: (category, [(file suffix, function prefix), ...]) with
# cumulative times; each category is its own functions minus the categories nested inside it
_PATH = {
    "trainer": [("adapters/reference/adapter.py", "b_")],  # the boundary's math: the trainer's own time
    "call": [("sentinel/adapters/contract.py", "call")],  # + normalise, trainer defaults, preconditions
    "observe": [("sentinel/observe.py", "observe")],  # tensors in and out, gradients, option recording
    "plan": [("hunt/worker/check.py", "scenario_for"), ("sentinel/runner.py", "plan")],
    "check": [("hunt/worker/check.py", "check")],  # plan + observe + invariant evaluation
    "drawing": [("sentinel/strategies.py", "draw_example")],
    "probe": [("hunt/worker/round.py", "probe_config")],  # a property's first round: config choices it lacks
    "round": [("hunt/worker/round.py", "run_round")],
}


def _cumulative(stats, wanted) -> float:
    """Summed over `wanted` (functions whose name starts with the prefix); of same-named
    functions in one file (a method wrapping its module's function) the outermost, so nothing
    is counted twice."""
    total = 0.0
    for suffix, prefix in wanted:
        by_name: dict[str, float] = {}
        for (f, _, fn), (_, _, _, ct, _) in stats.stats.items():
            if f.endswith(suffix) and fn.startswith(prefix) and (fn == prefix or prefix.endswith("_")):
                by_name[fn] = max(by_name.get(fn, 0.0), ct)
        total += sum(by_name.values())
    return total


def _calls(stats, suffix: str, name: str) -> int:
    return sum(pc for (f, _, fn), (pc, _, _, _, _) in stats.stats.items() if f.endswith(suffix) and fn == name)


def section_profile(args, tmp: Path, result: dict) -> None:
    """cProfile of hunt rounds on the reference, in this process (the worker's forked child runs
    the same code): where a round's time goes. Profiling slows Python code more than the
    trainer's tensor kernels, so the trainer's share here is a lower bound."""
    import cProfile
    import pstats
    import torch
    from sentinel import targets
    from sentinel.hunt import properties
    from sentinel.hunt.worker.round import run_round, warm
    print("\n## the per-example path of a reference hunt (cProfile, in-process rounds, every 8th property)")
    torch.set_num_threads(1)
    adapter = targets.adapter_class("reference")(None, torch.device("cpu"), {})
    adapter.load()
    names = [p.name for p in properties.select()][::8]
    for n in names:
        warm(n, adapter=adapter)
    prof, examples, emits = cProfile.Profile(), 0, []
    t0 = time.perf_counter()
    prof.enable()
    for n in names:
        job = {"property": n, "time_limit": args.profile_time, "max_examples": 400, "seed": "0", "db_key": n,
               "shrink_time": 0.5, "probe": True}
        examples += run_round(adapter, torch.device("cpu"), job, emits.append)["examples"]
    prof.disable()
    wall = time.perf_counter() - t0
    st = pstats.Stats(prof)
    c = {k: _cumulative(st, v) for k, v in _PATH.items()}
    split = {"trainer (boundary math)": c["trainer"], "adapter call (config, preconditions)": c["call"] - c["trainer"],
             "observe (tensors, grads, copies)": c["observe"] - c["call"],
             "plan (scenario, runs)": c["plan"], "invariant evaluation": c["check"] - c["observe"] - c["plan"],
             "drawing (strategies)": c["drawing"],
             "Hypothesis engine, search bookkeeping": c["round"] - c["check"] - c["drawing"]}
    total = c["round"]
    drawn = _calls(st, "sentinel/strategies.py", "draw_example")
    judged = _calls(st, "hunt/worker/round.py", "_answer")
    row = {"examples": examples, "profiled_s": round(wall, 2), "examples_per_s_profiled": round(examples / wall, 1),
           "progress_messages": len(emits), "load": round(os.getloadavg()[0], 1), "drawn": drawn, "judged": judged,
           "split": {k: round(v / total, 3) for k, v in split.items()}, "probe_share": round(c["probe"] / total, 3)}
    result["profile"] = row
    print(f"  {examples} examples over {len(names)} properties in {wall:.1f} s profiled "
          f"({row['examples_per_s_profiled']:.0f}/s under cProfile; load average {row['load']}); "
          f"IPC: {len(emits)} progress messages, one result per round (none per example)")
    print(f"  examples drawn {drawn}, judged {judged} ({judged / max(drawn, 1):.0%}; the rest drawn after a "
          f"round's time or quota was spent, or in a batch the first violation ended)")
    for k, v in split.items():
        print(f"  {k:38s} {v / total:6.1%}  ({v / max(examples, 1) * 1e3:.2f} ms per example)")
    print(f"  (of which the first round's config probe {c['probe'] / total:.1%})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", type=float, default=20.0, help="seconds of each throughput hunt")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per seed bug (median reported)")
    ap.add_argument("--jobs", type=int, default=1, help="also measure throughput with this many workers")
    ap.add_argument("--budget", type=float, default=30.0, help="search budget per seed-bug hunt")
    ap.add_argument("--modes", default="property,boundary")
    ap.add_argument("--sections", default="throughput,differential,seeds,done",
                    help="also: profile (the per-example split, cProfile), drawing (drawing alone), "
                         "rounds (first rounds in-process, CPU per example)")
    ap.add_argument("--profile-time", type=float, default=5.0, help="seconds per property in the profile section")
    ap.add_argument("--quota", type=int, default=100, help="examples per round in the rounds section")
    ap.add_argument("--slime", default=os.environ.get("SENTINEL_SLIME_REPO"))
    ap.add_argument("--areal", action="store_true", help="hunt the installed areal package")
    ap.add_argument("--areal-repo", default=os.environ.get("SENTINEL_AREAL_REPO"))
    ap.add_argument("--json", type=Path, help="write the numbers here")
    ap.add_argument("--baseline", type=Path, help="throughput: also hunt with this source tree, interleaved")
    ap.add_argument("--repeat", type=int, default=3, help="throughput and drawing runs per tree with --baseline (medians reported)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-hunt-"))
    result: dict = {"cpu_count": os.cpu_count(), "throughput": [], "differential": [], "seed_bugs": []}
    print(f"# sentinel hunt benchmark ({os.cpu_count()} CPUs)\n")
    sections = {"throughput": section_throughput, "differential": section_differential, "seeds": section_seeds,
                "done": section_done, "profile": section_profile,
                "drawing": section_drawing, "rounds": section_rounds}
    for name in args.sections.split(","):
        sections[name](args, tmp, result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"\nnumbers written to {args.json}")


if __name__ == "__main__":
    main()
