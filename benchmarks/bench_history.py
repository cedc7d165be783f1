"""Benchmark: `sentinel history` over a commit range, measured in one run.

    SENTINEL_SLIME_REPO=~/src/slime python benchmarks/bench_history.py             # the 200 commits before 045310b2b
    python benchmarks/bench_history.py --repo ~/src/slime --until HEAD --commits 200 --scenarios scenarios/seeds
    python benchmarks/bench_history.py --skip-ray --baseline DIR   # DIR: `git archive REV | tar -x -C DIR`

Prints, for the range:
- commits evaluated per minute per core (the local executor, no cache);
- the fraction of commits skipped as touching no loss-path file;
- scenario runs the scan needed against an exhaustive walk (every commit x every scenario;
  aim <= 1/5 on a 200-commit range);
- the Ray executor's wall time against the local executor's, same range, same -j, no cache;
- a re-scan answered from the cache, against the first scan (aim <= 5 s);
- with --baseline DIR (a source tree of another commit), the same first scan run by that
  tree's code (first on PYTHONPATH), interleaved with this tree's (baseline, this, baseline,
  this: a change of load shows in both alike), each side's median, and whether both found
  the same verdict per (commit, scenario) and the same flips.
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

ROOT = Path(__file__).resolve().parents[1]


def scan(args: list[str], out: Path, env: dict[str, str] | None = None) -> tuple[float, dict]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "sentinel", "history", *args, "-o", str(out), "--format", "json"],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1, 3):
        sys.exit(f"sentinel history {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return wall, json.loads(out.read_text())["history"]


def verdicts(h: dict) -> tuple[list, list]:
    """Each evaluated (commit, scenario)'s verdict, and the flips: what a before / after must keep."""
    rows = sorted((c["id"], s, v) for c in h["commits"] for s, v in (c.get("verdicts") or {}).items())
    return rows, [(f["scenario"], f["commit"]) for f in h["flips"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="slime")
    ap.add_argument("--repo", default=os.environ.get("SENTINEL_SLIME_REPO"))
    ap.add_argument("--until", default="045310b2b")
    ap.add_argument("--commits", type=int, default=200, help="first-parent commits in the range")
    ap.add_argument("--scenarios", nargs="*", default=[], help="scenario files, folders or ids (default: the catalog)")
    ap.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--baseline", type=Path, help="also run the first scan with this source tree's code, interleaved")
    ap.add_argument("--repeat", type=int, default=1, help="first scans per side (with --baseline)")
    a = ap.parse_args()
    if not a.repo:
        sys.exit("give --repo (or set SENTINEL_SLIME_REPO to a slime checkout)")
    common = [*a.scenarios, "--target", a.target, "--repo", a.repo, "--since", f"{a.until}~{a.commits - 1}",
              "--until", a.until, "-j", str(a.jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        cache = ["--cache", str(tmp_p / "cache")]
        loads = [os.getloadavg()[0]]
        if a.baseline:
            import compileall  # as bench_gate.py: both trees byte-compiled, as an installed one is
            for tree in (ROOT / "sentinel", a.baseline / "sentinel"):
                compileall.compile_dir(str(tree), quiet=1)
            base_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (str(a.baseline.resolve()), os.environ.get("PYTHONPATH", "")) if p)}
            this_t, base_t = [], []
            for i in range(a.repeat):
                base_t.append(scan([*common, "--no-cache"], tmp_p / f"base{i}.json", base_env))
                this_t.append(scan([*common, "--no-cache"], tmp_p / f"this{i}.json"))
                loads.append(os.getloadavg()[0])
        local_s, h = scan([*common, *cache], tmp_p / "local.json")
        again_s, h2 = scan([*common, *cache], tmp_p / "again.json")
        loads.append(os.getloadavg()[0])
        ray_s = None
        if not a.skip_ray:
            ray_s, hr = scan([*common, "--no-cache", "--executor", "ray"], tmp_p / "ray.json")
            same = [(f["scenario"], f["commit"]) for f in hr["flips"]] == [(f["scenario"], f["commit"]) for f in h["flips"]]
    c = h["cost"]
    cores = max(1, min(a.jobs, os.cpu_count() or 1))
    print(f"{a.target} {a.until}~{a.commits - 1}..{a.until}: {c['commits_in_range']} commits, "
          f"{len(h['scenarios'])} scenarios, -j {a.jobs} on {os.cpu_count()} cores")
    print(f"commits evaluated       {c['samples'] + c['probes']} ({c['samples']} sampled every {h['stride']}, "
          f"{c['probes']} bisect probes), {c['tasks']} tasks in {local_s:.1f} s")
    print(f"throughput              {c['tasks'] / local_s * 60 / cores:.2f} commits / minute / core")
    print(f"skipped (no loss path)  {c['skipped_no_loss_path']} / {c['commits_in_range']} = "
          f"{c['skipped_no_loss_path'] / c['commits_in_range']:.2f}")
    print(f"runs vs exhaustive      {c['runs']} / {c['exhaustive_runs']} = {c['runs'] / c['exhaustive_runs']:.3f} "
          f"(aim <= 0.2)  flips: {len(h['flips'])}")
    print(f"re-scan from cache      {again_s:.2f} s vs {local_s:.1f} s = {again_s / local_s:.3f}x "
          f"({h2['cost']['tasks']} tasks run; aim <= 5 s)")
    if a.baseline:
        med = lambda runs: statistics.median(s for s, _ in runs)  # noqa: E731
        this_s, base_s = med(this_t), med(base_t)
        same = all(verdicts(h_) == verdicts(base_t[0][1]) for _, h_ in this_t + base_t)
        tasks = this_t[0][1]["cost"]["tasks"]
        print(f"before / after (no cache, median of {a.repeat}, load average {min(loads):.1f}-{max(loads):.1f})")
        print(f"  {a.baseline}: {base_s:.1f} s = {tasks / base_s * 60 / cores:.2f} commits / minute / core")
        print(f"  this tree: {this_s:.1f} s = {tasks / this_s * 60 / cores:.2f} commits / minute / core; "
              f"this / baseline = {this_s / base_s:.2f}x; same verdicts and flips: {'yes' if same else 'NO'}")
    if ray_s is not None:
        print(f"ray vs local executor   {ray_s:.1f} s vs {local_s:.1f} s = {ray_s / local_s:.2f}x "
              f"(same flips: {'yes' if same else 'NO'}; Ray's start included)")


if __name__ == "__main__":
    main()
