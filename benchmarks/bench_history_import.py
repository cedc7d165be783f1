"""Benchmark: does each real target load at commits spread over its history?

For each repository, N commits (default 40) are taken evenly over its mainline
(``git rev-list --first-parent``) from its start point to HEAD: slime from its first public
commit, AReaL from the first commit that has the ``areal/`` package, verl from v0.3.0.rc0.
Each is loaded exactly as ``sentinel run`` loads it (``runner.run_group``: a temporary
worktree through ``sentinel.git``, a worker process, the adapter's ``load``) and runs one
cheap scenario (a one-token ``kl``); a commit counts as loaded when the worker reports ready.
Prints the import rate per repository and each failure's reason (its first line) with the
commits it hit. Aim: >= 95 % per repository.

    python benchmarks/bench_history_import.py --repo-slime ~/src/slime --repo-areal ~/src/AReaL \\
        --repo-verl ~/src/verl [--commits 40] [--jobs 2] [--json out.json]

Without --repo-X the SENTINEL_X_REPO variable is used; a repository given neither is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sentinel.runner import TargetSpec, run_group  # noqa: E402
from sentinel.spec import load_text  # noqa: E402

# name -> (environment variable, how to find the first commit of the range)
REPOS = {
    "slime": ("SENTINEL_SLIME_REPO", ("root", None)),
    "areal": ("SENTINEL_AREAL_REPO", ("path", "areal")),
    "verl": ("SENTINEL_VERL_REPO", ("rev", "v0.3.0.rc0")),
}

PROBE = """id: history-load-probe
title: one token through kl (the target loads and answers)
boundary: kl
config: {kl_type: k1}
inputs:
  log_probs: [[-0.5]]
  ref_log_probs: [[-0.25]]
  loss_mask: [[1]]
invariants:
  - close: {output: kl, expected: "log_probs - ref_log_probs"}
"""


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout.strip()


def start_commit(repo: str, how: tuple[str, str | None]) -> str:
    kind, arg = how
    if kind == "rev":
        return git(repo, "rev-parse", f"{arg}^{{commit}}")
    if kind == "path":  # the first mainline commit that has the package
        return git(repo, "rev-list", "--first-parent", "--reverse", "HEAD", "--", arg).splitlines()[0]
    return git(repo, "rev-list", "--first-parent", "--max-parents=0", "HEAD").splitlines()[-1]


def sample(repo: str, how: tuple[str, str | None], n: int) -> list[str]:
    """n commits evenly spread over the mainline from the start commit to HEAD (both included)."""
    first = start_commit(repo, how)
    line = git(repo, "rev-list", "--first-parent", "--reverse", "HEAD").splitlines()
    if first in line:
        line = line[line.index(first):]
    else:  # a tag off the mainline (a release branch): the mainline commits after it forked
        line = git(repo, "rev-list", "--first-parent", "--reverse", f"{first}..HEAD").splitlines()
    if len(line) <= n:
        return line
    return [line[round(i * (len(line) - 1) / (n - 1))] for i in range(n)]


def load_one(name: str, repo: str, sha: str, scenario) -> dict:
    t0 = time.perf_counter()
    group = run_group([scenario], TargetSpec(name, repo=repo, commit=sha), timeout=120.0)
    err = group.target.load_error
    res = group.results[0]
    return {"commit": sha[:9], "loaded": err is None, "seconds": round(time.perf_counter() - t0, 2),
            "reason": None if err is None else _reason(f"{err.type}: {err.message}"),
            "verdict": res.verdict, "version": group.target.version}


def _reason(message: str) -> str:
    """A failure's first line, without what differs between commits (the temporary worktree,
    line numbers), so one cause is counted once."""
    line = message.splitlines()[0]
    line = re.sub(r"\S*sentinel-(?:wt|co)-[^/\s]+/[0-9a-f]+", "<checkout>", line)
    return re.sub(r"line \d+", "line N", line)[:300]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in REPOS:
        ap.add_argument(f"--repo-{name}", help=f"a clone of {name} with history (default ${REPOS[name][0]})")
    ap.add_argument("--commits", type=int, default=40, help="commits per repository (default 40)")
    ap.add_argument("--jobs", type=int, default=2, help="loads side by side (default 2)")
    ap.add_argument("--json", help="write every commit's outcome here")
    args = ap.parse_args()
    scenario, = load_text(PROBE, "<history probe>")
    todo = []
    for name, (env, how) in REPOS.items():
        repo = getattr(args, f"repo_{name}") or os.environ.get(env)
        if not repo:
            print(f"{name}: skipped (no --repo-{name}, no ${env})")
            continue
        todo += [(name, repo, sha) for sha in sample(repo, how, args.commits)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda t: (t[0], load_one(*t, scenario)), todo))
    per: dict[str, list[dict]] = defaultdict(list)
    for name, o in outcomes:
        per[name].append(o)
    print(f"{len(todo)} loads in {time.perf_counter() - t0:.0f} s")
    for name, rows in per.items():
        ok = sum(r["loaded"] for r in rows)
        print(f"{name}: {ok}/{len(rows)} commits load ({100 * ok / len(rows):.1f} %), aim >= 95 %")
        reasons: dict[str, list[str]] = defaultdict(list)
        for r in rows:
            if not r["loaded"]:
                reasons[r["reason"]].append(r["commit"])
        for why, shas in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(shas)} x {why}  [{', '.join(shas)}]")
    if args.json:
        Path(args.json).write_text(json.dumps(per, indent=1))


if __name__ == "__main__":
    main()
