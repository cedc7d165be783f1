"""The scan: verdicts over a commit range, every flip bisected to its commit.

Phases, joined by `Scan.run`: walk the first-parent range (sentinel/history/walk.py),
evaluate the sample, find flips between neighbouring samples, bisect each flip
(sentinel/compare.py's bisect, probing through the executor and the cache), then assemble a
report of kind `history`. A commit where the target does not load is `not-loaded`: it is
never a verdict, so a flip is only ever found between commits that decided one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from .. import compare, verdicts
from ..report import (Environment, ExceptionInfo, HistoryCommit, HistoryCost, HistoryFlip, HistorySummary, Report,
                      ScenarioResult, Target, statistics)
from ..spec import Scenario, load_paths
from .hunting import hunt_pairs
from .walk import WalkCommit, auto_stride, commit_date, is_ancestor, pr_number, sample, walk
from .cache import Cache, Entry
from .executors import Executor
from .task import Task


@dataclass
class Options:
    target: str
    repo: str
    since: str | None
    until: str = "HEAD"
    every: int | None = None  # None: walk.auto_stride
    all_commits: bool = False
    device: str = "cpu"
    timeout: float = 60.0
    loss_path_files: tuple[str, ...] = ()
    hunt_seconds: float | None = None  # --hunt: the differential hunt per pair of neighbouring samples
    hunt_dir: Path = Path("reports") / "history-hunt"  # where --hunt writes its findings' scenarios
    command: list[str] = field(default_factory=list)


class Progress(Protocol):
    def __call__(self, done: int, total: int, flips: int) -> None: ...


class Scan:
    def __init__(self, scenarios: list[Scenario], opts: Options, executor: Executor, cache: Cache,
                 progress: Progress | None = None):
        self.scenarios, self.opts, self.executor, self.cache = scenarios, opts, executor, cache
        self.progress = progress or (lambda done, total, flips: None)
        self.results: dict[tuple[str, str], ScenarioResult] = {}
        self.targets: dict[str, Target] = {}
        self.environment: dict[str, Any] = {}
        self.commits: list[WalkCommit] = []
        self.samples: list[int] = []
        self.probed: dict[str, str] = {}  # sha -> subject, of commits only a bisect evaluated
        self.flips: list[HistoryFlip] = []
        self.hunted: set[str] = set()  # ids of scenarios the differential hunt wrote
        self.hunt_note: str | None = None
        self.stride = 1
        self.counts = {"evaluated": 0, "cached": 0, "tasks": 0}
        self._lock = threading.Lock()
        self._done: set[str] = set()
        self._total = 0

    # --- phases ----------------------------------------------------------------------------

    def run(self) -> Report:
        t0 = time.perf_counter()
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.walk()
        self.evaluate_samples()
        self.hunt()
        self.bisect_flips()
        return self.assemble(created, time.perf_counter() - t0)

    def walk(self) -> None:
        o = self.opts
        self.commits = walk(o.repo, o.since, o.until, () if o.all_commits else o.loss_path_files)
        if not o.loss_path_files:  # the adapter declares none: every commit may change a verdict
            for c in self.commits:
                c.touches = True
        relevant = sum(1 for c in self.commits[1:] if o.all_commits or c.touches)
        self.stride = o.every or auto_stride(relevant)
        self.samples = sample(self.commits, self.stride, o.all_commits)

    def evaluate_samples(self) -> None:
        shas = [self.commits[i].sha for i in self.samples]
        self._total = len(shas)
        self._tick()
        self.evaluate(shas, self.scenarios)

    def hunt(self) -> None:
        """--hunt: findings between neighbouring samples join the scenarios, sampled like the catalog's."""
        seconds = self.opts.hunt_seconds
        if not seconds:
            return
        idx = self.samples
        pairs = [(self.commits[a].sha, self.commits[b].sha) for a, b in zip(idx, idx[1:])
                 if any(c.touches for c in self.commits[a + 1:b + 1])]
        files, changed = hunt_pairs(pairs, target=self.opts.target, repo=self.opts.repo, seconds=seconds,
                           out_dir=self.opts.hunt_dir, device=self.opts.device)
        known = {sc.id for sc in self.scenarios}
        new = [sc for sc in (load_paths(files) if files else []) if sc.id not in known]
        self.hunted = {sc.id for sc in new}
        self.scenarios = [*self.scenarios, *new]
        self.evaluate([self.commits[i].sha for i in idx], new)
        self.hunt_note = (f"{len(pairs)} pair(s) of neighbouring samples hunted for {seconds:g} s each: "
                          f"{len(new)} finding(s) a family explains, sampled and bisected; {len(changed)} changed "
                          f"(no family says which side is right: read them in {self.opts.hunt_dir})")

    def bisect_flips(self) -> None:
        """For each scenario, each pair of neighbouring samples that decided different verdicts."""
        sample_shas = [self.commits[i].sha for i in self.samples]
        pairs = []
        for sc in self.scenarios:
            decided = [(s, self.results[(s, sc.id)].verdict) for s in sample_shas
                       if (s, sc.id) in self.results and self.results[(s, sc.id)].verdict in verdicts.DECIDED
                       and not self.targets[s].load_error]
            pairs += [(sc, a, b) for (a, va), (b, vb) in zip(decided, decided[1:]) if va != vb]
        if not pairs:
            return
        with ThreadPoolExecutor(max(1, self.executor.jobs)) as pool:
            flips = list(pool.map(lambda p: self.bisect(*p), pairs))
        order = {c.sha: i for i, c in enumerate(self.commits)}
        self.flips = sorted(flips, key=lambda f: (order.get(f.between[1], 0), f.scenario))

    def bisect(self, sc: Scenario, good: str, bad: str) -> HistoryFlip:
        def evaluate(sha: str) -> ScenarioResult:
            if (sha, sc.id) not in self.results:
                with self._lock:
                    if sha not in self._done:
                        self._total += 1  # a commit the progress bar had not counted
                self.evaluate([sha], [sc])
            return self.results[(sha, sc.id)]

        quiet = {c.sha for c in self.commits if not (c.touches or self.opts.all_commits)}
        res = compare.bisect(sc, self.opts.target, self.opts.repo, good, bad, evaluate=evaluate,
                             relevant=lambda sha: sha not in quiet)
        with self._lock:
            for p in res.probes:
                if p.commit not in {self.commits[i].sha for i in self.samples}:
                    self.probed.setdefault(p.commit, p.subject)
        chain = [good] + [s for s, _ in compare.commits_between(self.opts.repo, good, bad)]
        first = res.first.commit if res.first else None
        stop = chain.index(first) if first else len(chain)
        before = max((chain.index(p.commit) for p in res.probes
                      if p.verdict == res.good_verdict and p.commit in chain and chain.index(p.commit) < stop),
                     default=0)
        after_sha = first or bad
        flip = HistoryFlip(scenario=sc.id, change=verdicts.compare_verdict(res.good_verdict, res.bad_verdict),
                           commit=first, candidates=res.candidates, between=[good, bad], tried=len(res.probes),
                           source="hunt" if sc.id in self.hunted else "catalog",
                           before=self.results[(chain[before], sc.id)], after=self.results[(after_sha, sc.id)])
        if first:
            t = self.targets[first]
            flip.subject = t.subject or ""
            flip.pr = pr_number(flip.subject)
            flip.date = self._date(first)
        with self._lock:
            self.flips.append(flip)
            self._tick()
        return flip

    # --- evaluation through the cache and the executor -------------------------------------

    def evaluate(self, shas: list[str], scenarios: list[Scenario]) -> None:
        """Every (commit, scenario) answered: from memory, the cache, or one task per commit."""
        futures, todo = [], []
        for sha in shas:
            missing = []
            for sc in scenarios:
                if (sha, sc.id) in self.results:
                    continue
                hit = self.cache.get(sha, sc)
                if hit is None:
                    missing.append(sc)
                else:
                    self._record(sha, sc, hit, "cached")
            if missing:
                todo.append((sha, missing))
            else:
                self._commit_done(sha)
        for i, (sha, missing) in enumerate(todo):
            for part in _parts(missing, split(len(todo), i, self.executor.jobs)):
                task = Task(self.opts.target, self.opts.repo, sha, part, self.opts.device, self.opts.timeout)
                futures.append((sha, part, self.executor.submit(task)))
            with self._lock:
                self.counts["tasks"] += 1  # a commit evaluated, in however many parts
        parts = Counter(sha for sha, _, _ in futures)
        for sha, missing, fut in futures:
            try:
                answer = fut.result()
            except Exception as e:  # noqa: BLE001 - the executor lost the task: undecided here, tried again next scan
                answer = self._lost(sha, missing, e)
            self._absorb(sha, missing, answer)
            parts[sha] -= 1
            if not parts[sha]:  # its last part
                self._commit_done(sha)

    def _lost(self, sha: str, scenarios: list[Scenario], e: Exception) -> str:
        """A task the executor could not run (its process died, Ray lost it): the commit is
        undecided, as where the target does not load; WorkerDied keeps it out of the cache."""
        info = ExceptionInfo(type="WorkerDied", message=f"the {self.executor.name} executor lost the task: "
                                                        f"{type(e).__name__}: {e}")
        key = f"{self.opts.target}@{sha[:12]}"
        target = Target(name=self.opts.target, repo=self.opts.repo, commit=sha, load_error=info)
        results = [ScenarioResult.for_scenario(sc, key, "error", info.message, exception_info=info) for sc in scenarios]
        return json.dumps({"commit": sha, "target": json.loads(target.model_dump_json()), "environment": {},
                           "results": [json.loads(r.model_dump_json()) for r in results]})

    def _absorb(self, sha: str, scenarios: list[Scenario], answer: str) -> None:
        d = json.loads(answer)
        target = Target.model_validate(d["target"])
        by_id = {r["id"]: ScenarioResult.model_validate(r) for r in d["results"]}
        for sc in scenarios:
            entry = Entry(by_id[sc.id], target, d.get("environment") or {})
            self.cache.put(sha, sc, entry)
            self._record(sha, sc, entry, "evaluated")

    def _record(self, sha: str, sc: Scenario, entry: Entry, how: str) -> None:
        with self._lock:
            self.counts[how] += 1
            self.results[(sha, sc.id)] = entry.result
            have = self.targets.get(sha)
            if have is None or (have.load_error and not entry.target.load_error):
                # a commit whose target loaded in any part (sentinel/history/scan.py `split`) is loaded: a part
                # whose worker failed has its scenarios' errors, not the whole commit's `not-loaded`
                self.targets[sha] = entry.target
            if entry.environment and not self.environment:
                self.environment = entry.environment

    def _commit_done(self, sha: str) -> None:
        with self._lock:
            self._done.add(sha)
            self._tick()

    def _tick(self) -> None:
        self.progress(len(self._done), max(self._total, len(self._done)), len(self.flips))

    def _date(self, sha: str) -> str:
        for c in self.commits:
            if c.sha == sha:
                return c.date
        return commit_date(self.opts.repo, sha)

    # --- the report ------------------------------------------------------------------------

    def _cells(self, sha: str) -> dict[str, str]:
        t = self.targets.get(sha)
        return {sc.id: ("not-loaded" if t is not None and t.load_error else self.results[(sha, sc.id)].verdict)
                for sc in self.scenarios if (sha, sc.id) in self.results}

    def history_commits(self) -> list[HistoryCommit]:
        sampled = {self.commits[i].sha for i in self.samples}
        rows = []
        for c in self.commits:
            role = ("sample" if c.sha in sampled else "probe" if c.sha in self.probed
                    else "between" if c.touches or self.opts.all_commits else "skipped")
            t = self.targets.get(c.sha)
            rows.append(HistoryCommit(id=c.sha, date=c.date, subject=c.subject, pr=c.pr, touches_loss_path=c.touches,
                                      role=role, verdicts=self._cells(c.sha),
                                      load_error=f"{t.load_error.type}: {t.load_error.message}"
                                      if t is not None and t.load_error else None))
        # a bisect may land off the first-parent line (a merged branch's commit): keep it,
        # placed just before the first-parent commit that brought it in
        on_line = {c.sha for c in self.commits}
        for sha, subject in self.probed.items():
            if sha in on_line:
                continue
            t = self.targets.get(sha)
            row = HistoryCommit(id=sha, date=commit_date(self.opts.repo, sha), subject=subject,
                                pr=pr_number(subject), touches_loss_path=True, role="probe",
                                verdicts=self._cells(sha),
                                load_error=f"{t.load_error.type}: {t.load_error.message}"
                                if t is not None and t.load_error else None)
            at = next((i for i, r in enumerate(rows) if is_ancestor(self.opts.repo, sha, r.id)), len(rows))
            rows.insert(at, row)
        return rows

    def assemble(self, created: str, duration: float) -> Report:
        o = self.opts
        rows = self.history_commits()
        evaluated = [r for r in rows if r.role in ("sample", "probe")]
        last = next((r for r in reversed(evaluated) if r.role == "sample" and not r.load_error),
                    evaluated[-1] if evaluated else None)
        results = [self.results[(last.id, sc.id)] for sc in self.scenarios if last and (last.id, sc.id) in self.results]
        runs = sum(len(r.verdicts) for r in evaluated)
        cores = max(1, min(self.executor.jobs, os.cpu_count() or 1))
        cost = HistoryCost(commits_in_range=len(self.commits),
                           skipped_no_loss_path=sum(1 for r in rows if r.role == "skipped"),
                           samples=len(self.samples), probes=sum(1 for r in rows if r.role == "probe"),
                           runs=runs, exhaustive_runs=len(self.commits) * len(self.scenarios),
                           evaluated=self.counts["evaluated"], cached=self.counts["cached"],
                           tasks=self.counts["tasks"], duration_s=round(duration, 3),
                           commits_per_minute_per_core=round(self.counts["tasks"] / max(duration, 1e-9) * 60 / cores,
                                                             2))
        summary = HistorySummary(target=o.target, repo=o.repo, since=o.since or "(first commit)", until=o.until,
                                 all_commits=o.all_commits, stride=self.stride, executor=self.executor.name,
                                 jobs=self.executor.jobs, cache=str(self.cache.root) if self.cache.root else None,
                                 loss_path_files=list(o.loss_path_files), scenarios=[sc.id for sc in self.scenarios],
                                 commits=rows, flips=self.flips, hunt=self.hunt_note, cost=cost)
        stats = statistics(results)
        return Report(kind="history", success=verdicts.run_success(stats.violated, stats.errors), created_at=created,
                      duration_s=round(duration, 3), command=o.command, environment=Environment(**self.environment),
                      targets={f"{o.target}@{r.id[:12]}": self.targets[r.id]
                               for r in evaluated if r.id in self.targets},
                      results=results, statistics=stats, history=summary)


def split(n: int, i: int, jobs: int) -> int:
    """Into how many tasks the i-th of n commits to evaluate goes: one, except the last
    `n % jobs` when they would leave executor slots idle at the end of the wave (13 commits on 2
    slots: the 13th alone on one core while the other waits); those share the slots. A part
    costs one more worker start (a fork and the target's import, ~0.1 s for slime), against
    the half of a commit's catalog run it takes off the wave's tail."""
    r = n % jobs if jobs > 1 else 0
    return max(1, jobs // r) if r and i >= n - r else 1


def _parts(scenarios: list[Scenario], k: int) -> list[list[Scenario]]:
    k = max(1, min(k, len(scenarios)))
    return [scenarios[j::k] for j in range(k)]


def exit_code(report: Report) -> int:
    """0 the range left no regression in place, 1 a scenario regressed in it and is still
    violated at its end, 3 the target loaded at no evaluated commit. (`success` and
    `results` describe the range's last sample, as a run there would.)"""
    h = report.history
    if h is None:
        return int(verdicts.ExitCode.TARGET_ERROR)
    evaluated = [c for c in h.commits if c.role in ("sample", "probe")]
    if evaluated and all(c.load_error for c in evaluated):
        return int(verdicts.ExitCode.TARGET_ERROR)
    still = {r.id for r in report.results if r.verdict == "violated"}
    regressed = any(f.change == "regressed" and f.scenario in still for f in h.flips)
    return int(verdicts.ExitCode.VIOLATED if regressed else verdicts.ExitCode.OK)
