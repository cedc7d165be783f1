"""Benchmark a worker's start: a differential hunt's start (both sides ready, sessions open) on
slime (or --target T) at two cached commits, before and after the checkout cache and the zygote,
in one run.

    python benchmarks/bench_start.py --slime PATH [--repeat 3] [--rev-base HEAD^] [--rev-head HEAD]
    python benchmarks/bench_start.py --target verl --repo PATH   # any target with a `kl` boundary

Rows (each the median of --repeat, the load average beside it, and as a ratio to a bare
`python -c "import torch"` timed in this run):
- `spawned, temporary worktrees`: SENTINEL_ZYGOTE=off SENTINEL_CHECKOUT_CACHE=off, each hunt in
  a fresh process: what every start cost before.
- `zygote cold, cached checkouts`: a fresh process, so the zygote imports torch and slime's
  libraries first: the first hunt of a command.
- `zygote warm, cached checkouts`: the next hunts in the same process (history --hunt and
  sentinel mutate run hundreds): worker ready at a cached commit. Aim <= 2 s.
- checkout alone: a cache hit against a temporary worktree (git worktree add + remove).
Nothing here passes or fails; it prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def hunt_starts(target: str, repo: str, base: str, head: str, count: int) -> list[float]:
    """startup_s of `count` differential hunts in this process (kl only, 1 s of search each)."""
    from sentinel import hunt as H
    from sentinel.runner import TargetSpec
    out = []
    for _ in range(count):
        rep = H.differential(TargetSpec(target, repo, base), TargetSpec(target, repo, head), ["kl"], 1.0, 0,
                             verify=False)
        if any(t.load_error for t in rep.targets.values()):
            sys.exit(f"bench_start: {target} did not load: {[t.load_error for t in rep.targets.values()]}")
        out.append(rep.hunt.startup_s)
    return out


def in_fresh_process(args, env: dict[str, str], count: int) -> list[float]:
    cmd = [sys.executable, __file__, "--child", str(count), "--target", args.target, "--repo", args.repo,
           "--rev-base", args.rev_base, "--rev-head", args.rev_head]
    p = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"bench_start: child failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def torch_import(repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def checkout_times(repo: str, rev: str, repeat: int) -> tuple[float, float]:
    from sentinel import git
    out = []
    for mode in ("on", "off"):
        os.environ["SENTINEL_CHECKOUT_CACHE"] = mode
        times = []
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            with git.checkout(Path(repo), rev):
                pass
            times.append(time.perf_counter() - t0)
        out.append(statistics.median(times[1:]))  # the first may build the cache entry
    os.environ.pop("SENTINEL_CHECKOUT_CACHE")
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", "--slime", dest="repo", required=True, help="the target's checkout")
    ap.add_argument("--target", default="slime", help="a target with a `kl` boundary (slime, verl, areal, openrlhf)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rev-base", default="HEAD^")
    ap.add_argument("--rev-head", default="HEAD")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(hunt_starts(args.target, args.repo, args.rev_base, args.rev_head, args.child)))
        return
    os.environ.setdefault("SENTINEL_CACHE_DIR", str(Path.home() / ".cache" / "rl-sentinel" / "checkouts"))
    torch_s = torch_import(args.repeat)
    print(f"bare `python -c 'import torch'`: {torch_s:.2f} s (load average {_load()})")
    print(f"differential hunt start on {args.target} (both sides ready, sessions open), median of "
          f"{args.repeat}, as a ratio to the bare torch import:")
    old = [in_fresh_process(args, {"SENTINEL_ZYGOTE": "off", "SENTINEL_CHECKOUT_CACHE": "off"}, 1)[0]
           for _ in range(args.repeat)]
    load_old = _load()
    runs = [in_fresh_process(args, {"SENTINEL_ZYGOTE": "on", "SENTINEL_CHECKOUT_CACHE": "on"}, 3)
            for _ in range(args.repeat)]
    load_new = _load()
    cold = [r[0] for r in runs]
    warm = [x for r in runs for x in r[1:]]
    rows = [("spawned, temporary worktrees (before)", old, load_old),
            ("zygote cold, cached checkouts (1st hunt)", cold, load_new),
            ("zygote warm, cached checkouts (next)", warm, load_new)]
    for label, xs, load in rows:
        m = statistics.median(xs)
        print(f"  {label:42s} {m:6.2f} s = {m / torch_s:4.2f}x torch import; "
              f"{statistics.median(old) / m:5.1f}x faster than before (load average {load})")
    hit, wt = checkout_times(args.repo, args.rev_head, args.repeat)
    print(f"checkout alone: cache hit {hit * 1000:.0f} ms vs temporary worktree {wt * 1000:.0f} ms = "
          f"{wt / hit:.1f}x (load average {_load()})")


if __name__ == "__main__":
    main()
