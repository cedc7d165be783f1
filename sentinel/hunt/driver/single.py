"""The single-target hunt, in the CLI's process: workers, the schedule of rounds, the findings.

`Hunter` runs the phases of `engine.Hunt`: start checks the target out and starts the workers
(one per lane, `--jobs`); search is a round robin over the properties: each lane takes the
next property that no other lane holds and sends its worker one round of it (a `{"type":
"hunt"}` job, `worker.round.run_round`: up to N examples, twice the property's last round's, or
its fair share of the time left, `Hunt.share`), so a cheap bug anywhere is found early and a long hunt spreads
evenly; document writes each finding as a scenario, verified on the target.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from ...errors import UsageError
from ...process import WorkerDied, WorkerHandle
from ...report import ExceptionInfo, Report, Target
from ...runner import LOAD_TIMEOUT, TargetSpec, checkout_root, evaluate, job, plan
from ...spec import Scenario, load_text
from ..known import Known
from ..properties import PROPERTIES, SHRINK_TIME, Property, select
from .engine import ExitReason, Hunt, resolved
from .findings import finding_document, provenance_of
from .report import hunt_report
from .state import HuntSettings, PropertyState

DEFAULT_DB = Path(".sentinel") / "hunt-db"
DEFAULT_OUT = Path("reports") / "hunt"
FIRST_ROUND = 100  # examples in a property's first round; each later round doubles


DB_ENCODING = 2  # how a stored example's draws decode (2: the config integer scrambled, strategies._configs)


def db_key(target_key: str, commit: str | None, prop: Property) -> str:
    """The example database's key: an example stored by another encoding decodes to another input."""
    return f"rl-sentinel-hunt/v{DB_ENCODING}/{target_key}/{commit or '-'}/{prop.boundary}/{prop.name}"


class Hunter(Hunt):
    """One hunt of one target (a runner.TargetSpec) over the properties `settings` selects."""

    def __init__(self, spec: TargetSpec, settings: HuntSettings, *, command: list[str] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None):
        props = select(settings.boundaries, settings.families, settings.names)
        if not props:
            raise UsageError("no hunt property matches the given --boundary / --invariant filters "
                             f"(known: {', '.join(sorted(PROPERTIES))})")
        unknown = sorted(set(settings.until or []) - {p.name for p in props})
        if unknown:
            raise UsageError(f"--until names no hunted property: {', '.join(unknown)}")
        super().__init__(settings, command=command, on_event=on_event)
        self.spec = spec = resolved(spec)
        self.until = settings.until
        self.target = Target(name=spec.name, repo=spec.repo, device=spec.device, plant=spec.plant)
        self.states = [PropertyState(p, known=[dict(k) for k in settings.known if k["property"] == p.name])
                       for p in props]
        for s in self.states:
            why = s.prop.pinned_out(settings.config)
            if why:
                s.status, s.reason = "unsupported", why
        self.env: dict[str, Any] = {}
        self.startup_s = 0.0
        self.catalog_run = 0  # --coverage: catalog scenarios run under coverage before the search
        self.lock = threading.RLock()
        # One lane per worker process (--jobs). Lanes take rounds from one round robin over the
        # properties; a property is in at most one lane at a time.
        self.lanes = max(1, int(settings.jobs))
        self.workers: list[WorkerHandle | None] = [None] * self.lanes
        self.header: dict[str, Any] = {}
        self.queue: collections.deque[PropertyState] = collections.deque()
        self.running: set[int] = set()

    # --- phases --------------------------------------------------------------------------

    def start(self, stack: ExitStack) -> None:
        """Check the target out (it lives until every finding is verified on it); one worker
        per lane, started side by side; none at all is an error on every property."""
        target = self.target
        self.header = {"target": self.spec.name, "root": checkout_root(stack, self.spec, target),
                       "device": self.spec.device, "timeout": self.settings.timeout,
                       "options": {"plant": self.spec.plant, "compile": self.spec.compile},
                       **({"coverage": self.settings.coverage} if self.settings.coverage else {})}
        if target.load_error is None:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(self.lanes) as pool:
                self.workers = list(pool.map(lambda _: self._try_start(), range(self.lanes)))
            self.startup_s = time.perf_counter() - t0
        if target.load_error is not None or not any(self.workers):
            if target.load_error is None:
                target.load_error = ExceptionInfo(type="WorkerDied", message="no worker could be started")
            why = f"target {self.spec.key!r} could not be loaded: {target.load_error.message}"
            for s in self.states:
                s.status, s.reason = "error", why
            self.exit_reason = ExitReason.target_error
        self.emit({"event": "start", "properties": len(self.states), "startup_s": self.startup_s,
                   "target": self.spec.key, "jobs": self.lanes})
        if self.settings.coverage and self.exit_reason is None:
            self._catalog()

    def _catalog(self) -> None:
        """--coverage: the catalog's scenarios of the hunted boundaries first, on the first
        worker, each child measured (the header names the coverage folder), so the report
        counts the branches the catalog and the hunt executed. Their verdicts are `sentinel
        gate`'s business, not this report's: only how many ran to a verdict is kept."""
        from ...catalog import catalog_path, display_path, local_catalog
        from ...spec import load_paths
        from ...yamlfile import SpecError
        hunted = {s.prop.boundary for s in self.states if not s.done}
        path = local_catalog() or catalog_path()
        try:
            scenarios = [sc for sc in load_paths([path]) if sc.boundary in hunted and sc.applies_to(self.spec.name)]
        except SpecError as e:
            raise UsageError(f"--coverage runs the catalog {display_path(path)} first, and it does not load:\n{e}") from None
        lane = next((i for i, w in enumerate(self.workers) if w is not None), 0)
        for i, sc in enumerate(scenarios):  # a worker the scenario killed is started again
            self.workers[lane], verdict = self._verify(self.workers[lane], sc)
            self.catalog_run += verdict in ("holds", "violated")  # the trainer's code ran to a verdict
            self.emit({"event": "catalog", "done": i + 1, "total": len(scenarios), "scenario": sc.id})

    def rounds(self) -> None:
        """Rounds in every lane until the hunt is over."""
        self.queue = collections.deque(self.states)
        with ThreadPoolExecutor(self.lanes) as pool:
            for f in [pool.submit(self._lane, i) for i in range(self.lanes)]:
                f.result()

    def settle(self, s: PropertyState) -> None:
        if s.status == "running" and self.target.load_error is not None:  # no worker could be restarted
            s.status = "error"
            s.reason = f"target {self.spec.key!r} could not be (re)loaded: {self.target.load_error.message}"
        super().settle(s)

    def document(self) -> None:
        """Each finding as a scenario YAML, loaded back (it must load as a scenario) and, with
        verify, run through the scenario job path on one worker as `sentinel run` would."""
        worker = next((w for w in self.workers if w is not None), None)
        for w in self.workers:
            if w is not None and w is not worker:
                w.close()
        provenance = provenance_of(self.spec, self.target.commit, self.settings.seed)
        for s in self.states:
            for f in s.found:
                f.document = finding_document(s.prop, f.finding, self.spec.key, provenance, {
                    "examples_to_first": f.examples_to_first, "time_to_first_s": f.time_to_first_s,
                    "shrink_calls": f.shrink_calls})
                sid, text = f.document
                sc, = load_text(text, f"<hunt finding {sid}>")
                if self.settings.verify:
                    worker, f.verdict = self._verify(worker, sc)
        if worker is not None:
            worker.close()

    def report(self) -> Report:
        rep = hunt_report(self.states, self.settings, spec=self.spec, target=self.target, env=self.env,
                          search_s=self.search_s, startup_s=self.startup_s, created=self.created,
                          duration_s=round(time.perf_counter() - self.t_start, 3), command=self.command,
                          exit_reason=self.exit_reason.name if self.exit_reason else "", deviations=self.deviations)
        rep.hunt.coverage_scenarios = self.catalog_run
        return rep

    # --- workers -------------------------------------------------------------------------

    def _start(self) -> WorkerHandle | None:
        """A worker with the target loaded; None (and target.load_error set) when it cannot load.
        Properties whose boundary the target lacks are unsupported from here on."""
        spec, target = self.spec, self.target
        w = WorkerHandle(self.header)
        hello = w.receive(LOAD_TIMEOUT)
        with self.lock:
            if hello["event"] == "load_error":
                target.load_error = ExceptionInfo(**hello["error"])
                w.close()
                return None
            info, self.env = hello["target_info"], hello["environment"]
            target.version, target.stubs = info.get("version"), info.get("stubs", [])
            target.import_s, target.device = info.get("import_s"), self.env.get("device", spec.device)
            supported = set(info.get("boundaries", []))
            for s in self.states:
                if not s.done and s.prop.boundary not in supported:
                    s.status = "unsupported"
                    s.reason = info.get("declined", {}).get(s.prop.boundary) or \
                        f"target {spec.key!r} has no {s.prop.boundary!r} boundary"
        return w

    def _try_start(self) -> WorkerHandle | None:
        try:
            return self._start()
        except WorkerDied as e:
            if self.target.load_error is None:
                self.target.load_error = ExceptionInfo(type="WorkerDied", message=str(e))
            return None

    def _verify(self, worker: WorkerHandle | None, sc: Scenario) -> tuple[WorkerHandle | None, str | None]:
        """(the worker, if still alive; the scenario's verdict, None where no worker started)."""
        try:
            if worker is None:
                worker = self._start()
            if worker is None:
                return None, None
            runs = plan(sc)
            worker.send(job(sc, runs))
            res = worker.receive(self.settings.timeout + 30)
            return worker, evaluate(sc, runs, res, self.spec.key).verdict
        except WorkerDied as e:
            return None, f"error: {e}"

    # --- the search ----------------------------------------------------------------------

    def over(self) -> ExitReason | None:
        if self.target.load_error is not None:
            return ExitReason.target_error
        return super().over()

    def _pick(self) -> PropertyState | ExitReason | None:
        """The next property to run a round of; None: wait; an ExitReason: the hunt is over."""
        with self.lock:
            reason = self.over()
            if reason is not None:
                self.exit_reason = self.exit_reason or reason
                return reason
            for _ in range(len(self.queue)):
                s = self.queue[0]
                self.queue.rotate(-1)
                if not s.done and id(s) not in self.running:
                    self.running.add(id(s))
                    return s
            return None

    def _lane(self, i: int) -> None:
        while True:
            s = self._pick()
            if isinstance(s, ExitReason):
                return
            if s is None:
                time.sleep(0.005)
                continue
            try:
                if not self._round(i, s):  # no worker could be started: the target does not load
                    with self.lock:
                        self.exit_reason = self.exit_reason or ExitReason.target_error
                    return
            finally:
                with self.lock:
                    self.running.discard(id(s))

    def _round(self, i: int, s: PropertyState) -> bool:
        """One round of `s` on lane i's worker, merged into `s`; False: no worker could be started."""
        st = self.settings
        with self.lock:
            left = st.time_budget - (time.perf_counter() - self.t_search)
            n = min(st.max_examples - s.examples, FIRST_ROUND * 2 ** s.rounds)
            time_limit = max(0.2, self.share(s, left, self.lanes))
            s.share_s += time_limit
            s.search_before = time.perf_counter() - self.t_search
            s.sample(s.search_before)
        first = s.exclude is None
        msg = {"type": "hunt", "scenario": s.prop.name, "property": s.prop.name, "max_examples": n,
               "time_limit": time_limit, "shrink_time": st.shrink_time, "db": st.database,
               "db_key": db_key(self.spec.key, self.target.commit, s.prop), "origin": s.prop.origin,
               "probe": first, "exclude": s.exclude or {}, "pin": st.config,
               "known": [{k: v for k, v in d.items() if k != "source"} for d in s.known],
               "replay": st.replay if first else [], "coverage": st.coverage,
               "seed": None if st.seed is None else f"{st.seed}:{self.spec.key}:{s.prop.name}:{s.rounds}"}
        try:
            if self.workers[i] is None:
                self.workers[i] = self._start()
                if self.workers[i] is None:
                    return False
            res = self._exchange(self.workers[i], msg, time_limit + st.shrink_time + st.timeout)
        except WorkerDied as e:
            self.workers[i] = None
            res = {"status": "error", "error": {"type": "WorkerDied", "message": str(e), "traceback": ""}}
        with self.lock:
            found = s.merge(res, st.max_examples, s.search_before)
            s.sample(time.perf_counter() - self.t_search)
            self.merge_deviations(res.get("deviations") or {})
            self.emit({"event": "round", "property": s.prop.name, "status": s.status, "examples": s.examples,
                       "hunt_elapsed_s": time.perf_counter() - self.t_search, "round": s.rounds,
                       "found": found.finding["signature"] if found else None, "findings": len(s.found)})
        return True

    def _exchange(self, w: WorkerHandle, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one round; forward its progress lines as they come; its result."""
        w.send(msg)
        while True:
            answer = w.receive(timeout)
            if answer.get("event") != "progress":
                return answer
            self.emit({**answer, "hunt_elapsed_s": time.perf_counter() - self.t_search})


def hunt(spec: TargetSpec, *, boundaries: list[str] | None = None, families: list[str] | None = None,
         names: list[str] | None = None, max_examples: int = 300, min_examples: int = 100, time_budget: float = 60.0,
         seed: int | None = None, db: str | Path | None = DEFAULT_DB, out_dir: str | Path | None = DEFAULT_OUT,
         timeout: float = 60.0, shrink_time: float = SHRINK_TIME, command: list[str] | None = None,
         first: bool = False, verify: bool = True, jobs: int = 1, until: list[str] | None = None,
         config: dict[str, Any] | None = None, known: "Known | None" = None,
         on_event: Callable[[dict[str, Any]], None] | None = None, coverage: str | Path | None = None) -> Report:
    """Hunt `spec` for violations of the selected properties; return a Report of kind "hunt"
    (findings written as scenario YAML under `out_dir`). After a finding the search goes
    on with its signature excluded, until the budget ends: the report lists every
    distinct finding.

    first: stop at the first finding (after shrinking it).
    jobs: worker processes hunting in parallel (each takes rounds of properties in turn).
    until: stop as soon as these properties have a finding or are finished.
    coverage: a folder for branch-coverage data (`sentinel hunt --coverage`): the report lists,
      per mapped function, the branches the hunt executed.
    config: pinned config choices (--config key=value), validated by the caller.
    known: signatures (and known findings to replay) excluded from the start (`known.load`).
    min_examples: a property cut off before this many examples is `stopped`, not `holds`.
    verify: load each finding's YAML back and run it as `sentinel run` would (same worker,
      the scenario job path); HuntFinding.reproduced records the verdict."""
    settings = HuntSettings(boundaries=boundaries, families=families, names=names, max_examples=max_examples,
                            min_examples=min_examples, time_budget=time_budget, seed=seed,
                            database=str(Path(db).resolve()) if db else None,
                            out_dir=Path(out_dir) if out_dir else None, timeout=timeout, shrink_time=shrink_time,
                            first=first, verify=verify, jobs=jobs, until=until, config=dict(config or {}),
                            known=list(known.signatures) if known else [], replay=list(known.examples) if known else [],
                            coverage=str(Path(coverage).resolve()) if coverage else None)
    return Hunter(spec, settings, command=command, on_event=on_event).run()
