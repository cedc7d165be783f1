"""`sentinel mutate`: how well the catalog and the hunt guard a target's real code.

1. Prepare (one worker, the unmutated target): read every function the target's boundaries
   map (`@implements(boundary, calls=...)`) and run the catalog's scenarios of those
   boundaries on it (the base verdicts a mutant is compared with).
2. Generate the mutants of each function (`mutants.mutants`, the operators of `operators`), or
   with `plants` (the reference) one swap mutant per planted bug: the function it replaces
   swapped for the plant's code (`plant_mutants`).
3. Judge each mutant not in the cache, in shards an executor runs (`engine.run_shard`,
   `-j` local processes or Ray tasks, as `sentinel history` does).
   A mutant with a claim in `equivalent.yaml` is hunted until it has the claim's evidence, any
   other survivor until it has `survivor_examples` on each boundary it hunts
   (`equivalent.EVIDENCE_CAP_S` past the budget at most).
4. Honour the equivalence claims of `equivalent.yaml` that have their evidence, and score:
   killed / (mutants - equivalent - error), per target, boundary, operator and function.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from .. import targets as target_registry, verdicts
from ..errors import TargetError, UsageError, WorkerDied
from ..history import executors
from ..hunt.driver.engine import resolved
from ..process import WorkerHandle
from ..report import (Environment, MutantRecord, MutateCount, MutateSummary, Report, ScenarioResult, Target,
                      statistics)
from ..runner import LOAD_TIMEOUT, TargetSpec, checkout_root, evaluate, job, plan
from ..spec import Scenario
from . import cache as mcache, equivalent as equiv
from .engine import Shard, run_shard
from .mutants import SWAP, Function, Mutant, mutants, swapped
from .operators import OPERATORS

ORDER = {"survived": 0, "error": 1, "equivalent": 2, "killed": 3}
REACH_ORDER = {True: 0, None: 1, False: 2}  # survivors: missing checks, then unknown, then reach work


@dataclass
class Options:
    target: str
    repo: str | None = None
    commit: str | None = None
    device: str = "cpu"
    boundaries: list[str] | None = None
    operators: list[str] | None = None
    budget: float = 5.0  # hunt seconds per mutant the catalog leaves alive (0: catalog only)
    seed: int = 0
    timeout: float = 30.0
    hunt_examples: int = 100_000  # per boundary and mutant: the hunt ends there, or at its budget
    only: list[str] | None = None  # judge only these mutants (ids or keys, or a function's name: all of its)
    plants: bool = False  # the reference's planted bugs as the mutants, instead of the operators'
    executor: str = "local"
    jobs: int = 1
    cache: Path | None = mcache.DEFAULT_DIR
    equivalent: Path | None = None
    equivalent_examples: int = 100
    survivor_examples: int = 100  # per hunted boundary: an unclaimed mutant's hunt runs past its budget to them
    evidence_cap_s: float = equiv.EVIDENCE_CAP_S  # hunt seconds past the budget a claimed mutant or a survivor may take
    fail_under: float = 0.0  # percent
    command: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    spec: TargetSpec
    target: Target
    environment: dict[str, Any]
    mapping: dict[str, list[str]]
    functions: list[Function]
    unreadable: dict[str, str]
    base: list[ScenarioResult]


def prepare(opts: Options, scenarios: list[Scenario]) -> Prepared:
    """Read the mapped functions and run the catalog on the unmutated target (one worker)."""
    spec = resolved(TargetSpec(opts.target, opts.repo, opts.commit, opts.device))
    target = Target(name=spec.name, repo=spec.repo, device=spec.device)
    with ExitStack() as stack:
        root = checkout_root(stack, spec, target)
        if target.load_error is not None:
            raise TargetError(f"{spec.key}: {target.load_error.message}")
        worker = WorkerHandle({"target": spec.name, "root": root, "device": spec.device, "timeout": opts.timeout,
                               "options": {"plant": None, "compile": False}})
        try:
            hello = worker.receive(LOAD_TIMEOUT)
            if hello["event"] == "load_error":
                raise TargetError(f"{spec.key} could not be loaded: {hello['error']['type']}: {hello['error']['message']}")
            info, env = hello["target_info"], hello["environment"]
            target.version, target.stubs, target.import_s = info.get("version"), info.get("stubs", []), info.get("import_s")
            target.device = env.get("device", spec.device)
            worker.send({"type": "mutate-sources", "scenario": "mutate-sources"})
            src = worker.receive(opts.timeout + 30)
            if src.get("status") != "ok":
                raise TargetError(f"reading {spec.key}'s mapped functions failed: {src.get('error', {}).get('message')}")
            mapping = {b: calls for b, calls in src["mapping"].items() if not opts.boundaries or b in opts.boundaries}
            if opts.boundaries and (missing := sorted(set(opts.boundaries) - set(mapping))):
                raise TargetError(f"{spec.key} implements no {', '.join(missing)} boundary (`sentinel list boundaries "
                                  f"--target {spec.name}`)")
            functions, unreadable = [], {}
            for name, f in src["functions"].items():
                bs = tuple(sorted(b for b, calls in mapping.items() if name in calls))
                if not bs:
                    continue
                if "error" in f:
                    unreadable[name] = f["error"]
                else:
                    functions.append(Function(name, f["source"], f["line"], f["file"], bs))
            mine = [sc for sc in scenarios if sc.boundary in mapping and sc.applies_to(spec.name)]
            planned = [(sc, plan(sc)) for sc in mine]
            worker.send_all([job(sc, runs) for sc, runs in planned])
            base = [evaluate(sc, runs, worker.receive(opts.timeout + 30), spec.key) for sc, runs in planned]
        except WorkerDied as e:
            raise TargetError(f"{spec.key}: {e}") from None
        finally:
            worker.close()
    return Prepared(spec, target, env, mapping, functions, unreadable, base)


def _count(records: list[MutantRecord]) -> MutateCount:
    c = MutateCount(mutants=len(records))
    for r in records:
        setattr(c, r.verdict, getattr(c, r.verdict) + 1)
    c.survived_reached = sum(r.verdict == "survived" and r.reached is True for r in records)
    c.survived_unreached = sum(r.verdict == "survived" and r.reached is False for r in records)
    left = c.mutants - c.equivalent - c.error
    c.score = round(c.killed / left, 4) if left else None
    # a survivor of unknown reach stays in: never a score raised on a guess
    c.score_reached = round(c.killed / (left - c.survived_unreached), 4) if left - c.survived_unreached else None
    return c


def floor(opts: Options) -> int:
    """The examples per hunted boundary a survivor's hunt asks for: --survivor-examples, at most
    --hunt-examples (where every hunt ends); 0 with no hunt (--budget 0)."""
    return min(opts.survivor_examples, opts.hunt_examples) if opts.budget > 0 else 0


def _grouped(records: list[MutantRecord], keys: Callable[[MutantRecord], list[str]]) -> dict[str, MutateCount]:
    groups: dict[str, list[MutantRecord]] = {}
    for r in records:
        for k in keys(r):
            groups.setdefault(k, []).append(r)
    return {k: _count(v) for k, v in sorted(groups.items())}


def _short(examples: dict[str, int], boundaries: tuple[str, ...] | list[str], n: int) -> dict[str, int]:
    """The boundaries that compared fewer than the `n` examples a claim needs (the evidence rule)."""
    return {b: examples.get(b, 0) for b in boundaries if examples.get(b, 0) < n}


def _honour(records: list[MutantRecord], claims: dict[str, equiv.Claim], functions: set[str], n: int,
            known: set[str] | None = None) -> list[str]:
    """Survivors with a claim and its evidence become `equivalent`; the claims not honoured, why.
    `known`: every mutant id generated, judged or not (a claim on one `-m` left out is not stale)."""
    stale, seen = [], set()
    for r in records:
        c = claims.get(r.id)
        if c is None:
            continue
        seen.add(r.id)
        if r.verdict != "survived":
            stale.append(f"{c.where}: {r.id} is {r.verdict}" + (f" by {r.killed_by}" if r.killed_by else ""))
            continue
        short = _short(r.examples, r.boundaries, n)
        if short:
            stale.append(f"{c.where}: {r.id}: the hunt compared {short} example(s); a claim needs {n} per boundary"
                         + (f" ({r.reason})" if r.reason else ""))
            continue
        r.verdict, r.reason = "equivalent", c.reason
    stale += [f"{c.where}: {i}: no such mutant (the function changed, or the operator no longer applies)"
              for i, c in claims.items() if i not in seen and i not in (known or ()) and c.function in functions]
    return stale


def _record(m: Mutant, rec: dict[str, Any], cached: bool) -> MutantRecord:
    return MutantRecord(id=m.id, function=m.function, operator=m.operator, key=m.key, position=m.position,
                        boundaries=m.boundaries, diff=m.diff, verdict=rec["verdict"], killed_by=rec.get("killed_by"),
                        stage=rec.get("stage"), reason=rec.get("reason", ""), scenarios=rec.get("scenarios", 0),
                        examples=rec.get("examples", {}), hunted=rec.get("hunted", []), configs=rec.get("configs", {}), reached=rec.get("reached"),
                        cached=cached,
                        duration_s=rec.get("duration_s", 0.0))


def _shards(todo: list[Mutant], jobs: int) -> list[list[Mutant]]:
    size = max(1, min(25, math.ceil(len(todo) / max(1, jobs * 3))))
    return [todo[i:i + size] for i in range(0, len(todo), size)]


def plant_mutants(functions: list[Function]) -> list[Mutant]:
    """One swap mutant per planted bug of the reference whose replaced function is among
    `functions` (`-b` may leave some out): the plant's code in that function's place."""
    import inspect
    by = {f.name: f for f in functions}
    out = []
    for name, plant in sorted(target_registry.plants().items()):
        fn = by.get(f"{target_registry.REFERENCE_OPS}:{plant.replaces}")
        if fn is not None:
            code = plant.code
            out.append(swapped(fn, name, f"{code.__module__}:{code.__qualname__}", inspect.getsource(code)))
    return out


def selected(every: list[Mutant], only: list[str] | None) -> list[Mutant]:
    """The mutants `-m` names: by id or key, or by function (module:qualname) for all of its;
    a declared subset of a target is judged and cached as in the full run. A name that matches
    none is a usage error: a typo would otherwise score nothing and pass --fail-under."""
    if only and (unknown := sorted(set(only) - {n for m in every for n in (m.id, m.key, m.function)})):
        raise UsageError(f"-m {', '.join(unknown)}: no such mutant id, key or function (module:qualname) among the "
                         f"{len(every)} mutants of the mapped functions (`sentinel mutate --format json` lists them)")
    return [m for m in every if not only or {m.id, m.key, m.function} & set(only)]


def mutate(scenarios: list[Scenario], opts: Options,
           on_progress: Callable[[int, int, dict[str, int]], None] | None = None) -> Report:
    """Generate, judge and score the mutants of `opts.target` (see the module docstring)."""
    t0 = time.perf_counter()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    claims = equiv.load(opts.equivalent) if opts.equivalent else {}
    p = prepare(opts, scenarios)
    every = plant_mutants(p.functions) if opts.plants else [m for f in p.functions for m in mutants(f, opts.operators)]
    ms = selected(every, opts.only)
    commit = p.target.commit or p.target.version or "-"
    store = mcache.Cache(opts.cache, opts.target, target_registry.adapter_spec(opts.target), commit,
                         mcache.catalog_hash([sc for sc in scenarios if sc.boundary in p.mapping]), [opts.budget, opts.hunt_examples, floor(opts)],
                         opts.seed, opts.device)
    done: dict[str, tuple[dict[str, Any], bool]] = {}
    for m in ms:
        hit = store.get(m.as_dict())
        # a claimed survivor cached short of its evidence (an older run, or one the cap ended) is hunted again
        if hit is not None and not (m.id in claims and hit["verdict"] == "survived" and
                                    _short(hit.get("examples", {}), m.boundaries, opts.equivalent_examples)):
            done[m.id] = (hit, True)
    todo = [m for m in ms if m.id not in done]
    tally: dict[str, int] = {}
    for rec, _ in done.values():
        tally[rec["verdict"]] = tally.get(rec["verdict"], 0) + 1
    if on_progress:
        on_progress(len(done), len(ms), tally)
    base = {r.id: r.verdict for r in p.base}
    scs = [sc for sc in scenarios if sc.id in base]
    t_judge = time.perf_counter()

    by = {m.id: m for m in todo}

    def one(rec: dict[str, Any]) -> None:
        if rec["id"] in done and not done[rec["id"]][1]:
            return  # heard already, as it was made
        store.put(by[rec["id"]].as_dict(), rec)
        done[rec["id"]] = (rec, False)
        tally[rec["verdict"]] = tally.get(rec["verdict"], 0) + 1
        if on_progress:
            on_progress(len(done), len(ms), tally)

    def take(answer: dict[str, Any]) -> None:
        if "load_error" in answer:
            raise TargetError(answer["load_error"])
        for rec in answer["records"]:
            one(rec)

    def task(shard: list[Mutant]) -> Shard:
        return Shard(opts.target, opts.repo, p.spec.commit, opts.device, [{**m.as_dict(), "id": m.id} for m in shard],
                     scs, base, opts.budget, opts.seed, opts.timeout, opts.hunt_examples,
                     claimed=[m.id for m in shard if m.id in claims], evidence=opts.equivalent_examples,
                     evidence_cap_s=opts.evidence_cap_s, floor=floor(opts))
    if todo and opts.executor == "local" and opts.jobs == 1:  # here, one shard: no process pool to start
        take(json.loads(run_shard(task(todo), one)))
    elif todo:
        with executors.make(opts.executor, opts.jobs) as ex:
            for fut in as_completed([ex.submit(task(shard), run_shard) for shard in _shards(todo, opts.jobs)]):
                take(json.loads(fut.result()))
    judge_s = time.perf_counter() - t_judge
    records = [_record(m, *done[m.id]) for m in ms]
    stale = _honour(records, claims, {f.name for f in p.functions}, opts.equivalent_examples, {m.id for m in every})
    records.sort(key=lambda r: (ORDER[r.verdict], REACH_ORDER[r.reached] if r.verdict == "survived" else 0,
                                r.function, r.position, r.operator))
    totals = _count(records)
    summary = MutateSummary(
        target=p.spec.key, commit=commit, operators=[SWAP] if opts.plants else opts.operators or list(OPERATORS), boundaries=sorted(p.mapping),
        functions={f.name: list(f.boundaries) for f in p.functions}, unreadable=p.unreadable, budget_s=opts.budget,
        seed=opts.seed, equivalent_file=str(opts.equivalent) if opts.equivalent else None, equivalent_claims=len(claims),
        equivalent_examples=opts.equivalent_examples, survivor_examples=floor(opts), stale_equivalents=stale, executor=opts.executor, jobs=opts.jobs,
        cache=str(opts.cache) if opts.cache else None, cached=sum(r.cached for r in records), totals=totals,
        by_boundary=_grouped(records, lambda r: r.boundaries), by_operator=_grouped(records, lambda r: [r.operator]),
        by_function=_grouped(records, lambda r: [r.function]), mutants=records,
        duration_s=round(time.perf_counter() - t0, 3),
        mutants_per_min_per_core=round(len(todo) / (judge_s / 60) / opts.jobs, 2) if todo and judge_s > 0 else 0.0)
    success = totals.score is None or totals.score * 100 >= opts.fail_under
    stats = statistics(p.base)
    return Report(kind="mutate", success=success, created_at=created, duration_s=summary.duration_s,
                  command=opts.command, environment=Environment(**p.environment), targets={p.spec.key: p.target},
                  results=p.base, statistics=stats, mutate=summary)


def exit_code(report: Report) -> int:
    """0 the score reaches --fail-under, 1 it does not."""
    return int(verdicts.ExitCode.OK if report.success else verdicts.ExitCode.VIOLATED)
