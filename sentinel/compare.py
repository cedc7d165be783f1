"""Compare two revisions of a target, and bisect for the first commit whose verdict changes.

Both work through `runner.run_group` on temporary worktrees (sentinel/git.py): the user's
checkout, branch, index and stash are never touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from . import git, verdicts
from .report import Comparison, Report, ScenarioResult
from .runner import LOAD_TIMEOUT, TargetSpec, run, run_group
from .spec import Scenario
from .verdicts import compare_verdict


def compare(scenarios: list[Scenario], target: str, repo: str, base: str, head: str, *, device: str = "cpu",
            timeout: float = 60.0, on_result: Callable[[ScenarioResult], None] | None = None,
            command: list[str] | None = None, load_timeout: float = LOAD_TIMEOUT) -> Report:
    """Run the scenarios at `base` and at `head` (a revision, or git.WORKTREE) in parallel; those
    written for other targets (`targets:`) are neither run nor compared."""
    sides = [TargetSpec(target, repo, base, device, label="base"),
             TargetSpec(target, repo, None if head == git.WORKTREE else head, device, label="head")]
    scenarios = [sc for sc in scenarios if sc.applies_to(sides[0].name)]
    report = run(scenarios, sides, timeout=timeout, on_result=on_result, command=command, load_timeout=load_timeout)
    by = {(r.target, r.id): r for r in report.results}
    comparisons = [Comparison(id=sc.id, base=by[("base", sc.id)].verdict, head=by[("head", sc.id)].verdict,
                              verdict=compare_verdict(by[("base", sc.id)].verdict, by[("head", sc.id)].verdict))
                   for sc in scenarios]
    success = verdicts.compare_success(c.verdict for c in comparisons)
    return report.model_copy(update={"kind": "compare", "comparisons": comparisons, "success": success})


# --- bisect -------------------------------------------------------------------------------

@dataclass
class Probe:
    commit: str
    subject: str
    verdict: str  # the scenario verdict, or "skip" when the target cannot be run there
    reason: str = ""


@dataclass
class BisectResult:
    first: Probe | None
    good_verdict: str
    bad_verdict: str
    probes: list[Probe] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)  # when skips leave a range
    commits_in_range: int = 0
    duration_s: float = 0.0


def commits_between(repo: str, good: str, bad: str) -> list[tuple[str, str]]:
    """(sha, subject) of good..bad in order from oldest to newest, along the ancestry path."""
    r = git._repo(Path(repo))
    out = r.git.rev_list("--ancestry-path", "--reverse", "--topo-order", f"{good}..{bad}", "--format=%H %s").splitlines()
    return [(line.split(" ", 1)[0], line.split(" ", 1)[1] if " " in line else "")
            for line in out if not line.startswith("commit ")]


def bisect(scenario: Scenario, target: str, repo: str, good: str, bad: str, *, device: str = "cpu",
           timeout: float = 60.0, on_probe: Callable[[Probe], None] | None = None,
           evaluate: Callable[[str], ScenarioResult] | None = None,
           relevant: Callable[[str], bool] | None = None, load_timeout: float = LOAD_TIMEOUT) -> BisectResult:
    """The first commit in good..bad whose verdict equals bad's (git-bisect semantics);
    commits where the target does not import (error/unsupported) are skipped, not blamed.
    `evaluate(sha)` runs the scenario at a commit (default: a worker here; `sentinel history`
    passes its executor and cache); `relevant(sha)` False leaves a commit out of the search
    (history: it touches no loss-path file, so it cannot change the verdict)."""
    t0 = time.perf_counter()
    good_sha, _ = git.resolve(Path(repo), good)
    bad_sha, _ = git.resolve(Path(repo), bad)
    chain = commits_between(repo, good_sha, bad_sha)
    if not chain or chain[-1][0] != bad_sha:
        raise git.GitError(f"{bad} is not a descendant of {good}")
    if relevant is not None:
        chain = [c for c in chain if c[0] == bad_sha or relevant(c[0])]
    probes: list[Probe] = []
    cache: dict[str, Probe] = {}

    def probe(sha: str, subject: str) -> Probe:
        if sha not in cache:
            r = evaluate(sha) if evaluate else run_group([scenario], TargetSpec(target, repo, sha, device), timeout,
                                                         load_timeout=load_timeout).results[0]
            verdict = verdicts.bisect_verdict(r.verdict)
            cache[sha] = Probe(sha, subject, verdict, r.reason)
            probes.append(cache[sha])
            if on_probe:
                on_probe(cache[sha])
        return cache[sha]

    gv = probe(good_sha, git.resolve(Path(repo), good_sha)[1]).verdict
    bv = probe(*chain[-1]).verdict
    if "skip" in (gv, bv):
        raise git.GitError(f"the target cannot be run at the {'good' if gv == 'skip' else 'bad'} revision: "
                           f"{(probes[0] if gv == 'skip' else probes[-1]).reason}")
    if gv == bv:
        raise git.GitError(f"good ({good}) and bad ({bad}) give the same verdict ({gv}): nothing to bisect")
    lo, hi = -1, len(chain) - 1  # chain[lo] behaves like good (-1 = the good commit), chain[hi] like bad
    skipped: set[int] = set()
    while hi - lo > 1:
        open_ = [i for i in range(lo + 1, hi) if i not in skipped]
        if not open_:
            break
        mid = (lo + hi) // 2
        i = min(open_, key=lambda k: (abs(k - mid), k))
        p = probe(*chain[i])
        if p.verdict == "skip":
            skipped.add(i)
        elif p.verdict == bv:
            hi = i
        else:
            lo = i
    candidates = [chain[i][0] for i in range(lo + 1, hi + 1)]
    first = cache[chain[hi][0]] if len(candidates) == 1 else None
    return BisectResult(first, gv, bv, probes, candidates if first is None else [], len(chain),
                        round(time.perf_counter() - t0, 3))


def bisect_report(res: BisectResult, scenario: Scenario, target: str, repo: str, command: list[str]) -> dict:
    """Plain JSON for --json / -o (the bisect log, not a run report)."""
    return {"kind": "bisect", "scenario": scenario.id, "target": target, "repo": repo,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "good_verdict": res.good_verdict, "bad_verdict": res.bad_verdict,
            "first": res.first.__dict__ if res.first else None, "candidates": res.candidates,
            "commits_in_range": res.commits_in_range, "tried": len(res.probes),
            "probes": [p.__dict__ for p in res.probes], "duration_s": res.duration_s, "command": command}

