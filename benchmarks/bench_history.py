"""Benchmark: `sentinel history` over a commit range, measured in one run.

    SENTINEL_SLIME_REPO=~/src/slime python benchmarks/bench_history.py             # the 200 commits before 045310b2b
    python benchmarks/bench_history.py --repo ~/src/slime --until HEAD --commits 200 --scenarios scenarios/seeds

Prints, for the range:
- commits evaluated per minute per core (the local executor, no cache);
- the fraction of commits skipped as touching no loss-path file;
- scenario runs the scan needed against an exhaustive walk (every commit x every scenario;
  aim <= 1/5 on a 200-commit range);
- the Ray executor's wall time against the local executor's, same range, same -j, no cache;
- a re-scan answered from the cache, against the first scan (aim <= 5 s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def scan(args: list[str], out: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "sentinel", "history", *args, "-o", str(out), "--format", "json"],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1, 3):
        sys.exit(f"sentinel history {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return wall, json.loads(out.read_text())["history"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="slime")
    ap.add_argument("--repo", default=os.environ.get("SENTINEL_SLIME_REPO"))
    ap.add_argument("--until", default="045310b2b")
    ap.add_argument("--commits", type=int, default=200, help="first-parent commits in the range")
    ap.add_argument("--scenarios", nargs="*", default=[], help="scenario files, folders or ids (default: the catalog)")
    ap.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip-ray", action="store_true")
    a = ap.parse_args()
    if not a.repo:
        sys.exit("give --repo (or set SENTINEL_SLIME_REPO to a slime checkout)")
    common = [*a.scenarios, "--target", a.target, "--repo", a.repo, "--since", f"{a.until}~{a.commits - 1}",
              "--until", a.until, "-j", str(a.jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        cache = ["--cache", str(tmp_p / "cache")]
        local_s, h = scan([*common, *cache], tmp_p / "local.json")
        again_s, h2 = scan([*common, *cache], tmp_p / "again.json")
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
    if ray_s is not None:
        print(f"ray vs local executor   {ray_s:.1f} s vs {local_s:.1f} s = {ray_s / local_s:.2f}x "
              f"(same flips: {'yes' if same else 'NO'}; Ray's start included)")


if __name__ == "__main__":
    main()
