"""The runner: scenarios x targets -> report.

Scenarios are grouped by target (name, repo, commit, device); each group gets one worker
process that imports the target once. Invariants are planned and evaluated here, in the
parent, which never imports torch or a trainer.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import git, verdicts
from .invariants import RunObservation
from .process import LOAD_TIMEOUT, ChannelError, WorkerDied, WorkerHandle
from .report import (Environment, ExceptionInfo, FunctionInfo, InvariantResult, Report, ScenarioResult, Target,
                     statistics)
from .spec import Scenario
from .tensors import decode, encode, to_clean_list, to_list


@dataclass(frozen=True)
class TargetSpec:
    """One group: a target at a version on a device."""

    name: str
    repo: str | None = None
    commit: str | None = None
    device: str = "cpu"
    plant: str | None = None
    compile: bool = False
    label: str | None = None  # report key; default derived

    @property
    def key(self) -> str:
        if self.label:
            return self.label
        k = self.name
        if self.commit:
            k += "@" + self.commit[:12]
        if self.plant:
            k += "+" + self.plant
        return k


# --- planning -----------------------------------------------------------------------------

@dataclass
class Run:
    name: str
    inputs: dict[str, np.ndarray]
    config: dict[str, Any]
    grads: list[tuple[str, str]]
    casts: dict[str, list[str]] = field(default_factory=dict)  # the precision axis (observe.observe)
    extras: list[str] = field(default_factory=list)  # the extras the invariants read (sent back only then)


def plan(sc: Scenario) -> list[Run]:
    """Every boundary call a scenario needs: base, its variants, and the extra runs its
    invariants ask for; each with the union of the gradients asked for."""
    grads = list(dict.fromkeys([*sc.grads, *(g for inv in sc.invariants for g in inv.grads(sc))]))
    extras = list(dict.fromkeys(x for inv in sc.invariants for x in inv.extras(sc)))
    runs = {"base": (sc.inputs, {})}
    runs.update(sc.variants)
    for inv in sc.invariants:
        runs.update(inv.runs(sc))
    # a run is (inputs, config) or, on the precision axis, (inputs, config, casts)
    return [Run(name, r[0], sc.full_config(r[1]), [g for g in grads if g[1] in r[0]], *r[2:], extras=extras)
            for name, r in runs.items()]


def job(sc: Scenario, runs: list[Run]) -> dict[str, Any]:
    return {"scenario": sc.id, "boundary": sc.boundary, "runs": [
        {"name": r.name, "inputs": {n: encode(a) for n, a in r.inputs.items()}, "config": r.config,
         "grads": [list(g) for g in r.grads], **({"casts": r.casts} if r.casts else {}),
         **({"extras": r.extras} if r.extras else {})} for r in runs]}


# --- one group ----------------------------------------------------------------------------

@dataclass
class GroupResult:
    target: Target
    results: list[ScenarioResult]
    environment: dict[str, Any] = field(default_factory=dict)


def _exc(d: dict[str, Any] | None) -> ExceptionInfo | None:
    return ExceptionInfo(**d) if d else None


def evaluate(sc: Scenario, runs: list[Run], res: dict[str, Any], target_key: str) -> ScenarioResult:
    """Turn a worker result into verdicts. Pure: no torch, no target."""
    base = ScenarioResult.for_scenario(sc, target_key, "holds", inputs={n: to_clean_list(a) for n, a in sc.inputs.items()},
                                       config=sc.full_config(),
                                       function=FunctionInfo(**res["function"]) if res.get("function") else None,
                                       duration_s=round(res.get("duration_s", 0.0), 6))
    if res["status"] == "unsupported":
        return base.model_copy(update={"verdict": "unsupported", "reason": res["reason"]})
    if res["status"] == "excluded":  # an adapter's declared precondition: the trainer never gets this input
        return base.model_copy(update={"verdict": "excluded", "reason": res["reason"],
                                       "precondition": res.get("precondition")})
    if res["status"] == "error":
        e = res["error"]
        return base.model_copy(update={"verdict": "error", "reason": f"{e['type']}: {e['message']}",
                                       "exception_info": _exc(e)})
    obs = {}
    for r in runs:
        o = res["runs"][r.name]
        obs[r.name] = RunObservation(
            inputs=r.inputs, outputs={n: decode(v) for n, v in o["outputs"].items()},
            requires_grad=o["requires_grad"], grads={k: decode(v) if v else None for k, v in o["grads"].items()},
            inputs_after={n: decode(v).astype(r.inputs[n].dtype) for n, v in o["inputs_after"].items()},
            extras={n: decode(v) for n, v in o.get("extras", {}).items()})
    results = []
    for inv in sc.invariants:
        cfg = inv.summary()
        try:
            out = inv.evaluate(obs, sc)
            results.append(InvariantResult(family=inv.family, config=cfg, verdict=out.verdict, message=out.message,
                                           observed=out.observed, expected=out.expected, difference=out.difference,
                                           positions=out.positions, details=out.details))
        except Exception as e:  # noqa: BLE001 - an invariant bug is an error verdict, never a pass
            results.append(InvariantResult(family=inv.family, config=cfg, verdict="error", message=str(e),
                                           exception_info=ExceptionInfo.from_exception(e)))
    verdict, reason = verdicts.scenario_verdict((r.family, r.verdict, r.message) for r in results)
    observations = {n: to_list(a) for n, a in obs["base"].outputs.items()}
    return base.model_copy(update={"verdict": verdict, "reason": reason, "invariants": results,
                                   "observations": observations})


def checkout_root(stack: ExitStack, spec: TargetSpec, target: Target) -> str | None:
    """The folder the worker imports `spec`'s target from: spec.repo at spec.commit, checked
    out for as long as `stack` is open, with its commit, subject and dirty flag recorded on
    `target`; None for an installed target, or (with target.load_error set) when git fails."""
    if not spec.repo:
        return None
    try:
        co = stack.enter_context(git.checkout(Path(spec.repo), spec.commit))
    except git.GitError as e:
        target.load_error = ExceptionInfo(type="GitError", message=str(e))
        return None
    target.commit, target.subject, target.dirty = co.commit, co.subject, co.dirty
    return str(co.path)


def run_group(scenarios: list[Scenario], spec: TargetSpec, timeout: float = 60.0,
              on_result: Callable[[ScenarioResult], None] | None = None,
              load_timeout: float = LOAD_TIMEOUT, coverage: str | None = None) -> GroupResult:
    """All scenarios for one target in one worker (restarted if target code kills it). The
    target's import and load() may take `load_timeout` s, each scenario `timeout` s.
    coverage: a folder where each scenario's child writes branch-coverage data of the
    trainer's files (sentinel.coverage)."""
    target = Target(name=spec.name, repo=spec.repo, device=spec.device, plant=spec.plant)
    results: list[ScenarioResult] = []

    def emit(r: ScenarioResult) -> None:
        results.append(r)
        if on_result:
            on_result(r)

    # a scenario written for other targets (`targets:`) says nothing about this one: not run, not
    # reported (`unsupported` means a function or option this target lacks)
    todo = [sc for sc in scenarios if sc.applies_to(spec.name)]
    env: dict[str, Any] = {}
    with ExitStack() as stack:
        root = checkout_root(stack, spec, target)
        if target.load_error is not None:
            for sc in todo:
                emit(_load_failed(sc, spec, target.load_error))
            return GroupResult(target, results, env)
        header = {"target": spec.name, "root": root, "device": spec.device, "timeout": timeout,
                  "options": {"plant": spec.plant, "compile": spec.compile},
                  **({"coverage": coverage} if coverage else {})}
        planned = []
        for sc in todo:
            try:
                planned.append((sc, plan(sc)))
            except Exception as e:  # noqa: BLE001 - a planning bug costs its scenario, never the whole run
                info = ExceptionInfo.from_exception(e)
                emit(ScenarioResult.for_scenario(sc, spec.key, "error",
                                                 f"could not plan the scenario's runs: {info.type}: {info.message}",
                                                 exception_info=info))
        worker, retried = None, set()
        while planned:
            if worker is None:
                try:
                    worker = None
                    worker = WorkerHandle(header)
                    hello = worker.hello(load_timeout)
                except WorkerDied as e:
                    hello = {"event": "load_error", "error": {"type": type(e).__name__, "message": str(e), "traceback": ""}}
                if hello["event"] == "load_error":
                    target.load_error = _exc(hello["error"])
                    if worker is not None:  # None: it died while being started
                        worker.kill()
                    for sc, _ in planned:
                        emit(_load_failed(sc, spec, target.load_error))
                    return GroupResult(target, results, env)
                info, env = hello["target_info"], hello["environment"]
                target.version, target.stubs = info.get("version"), info.get("stubs", [])
                target.import_s, target.device = info.get("import_s"), env.get("device", spec.device)
                # pipelined: every job goes out now, answers are evaluated as they come back
                worker.send_all([{"type": "batch", "jobs": [job(sc, runs) for sc, runs in planned]}])
            sc, runs = planned[0]
            try:
                res = worker.receive(timeout + 30)
            except WorkerDied as e:
                worker = None
                # a fresh worker gets one more try at it; not after a silence or a forged answer
                if sc.id not in retried and "gave no answer" not in str(e) and not isinstance(e, ChannelError):
                    retried.add(sc.id)
                    continue
                res = {"status": "error", "error": {"type": type(e).__name__, "message": str(e), "traceback": ""}}
            planned.pop(0)
            emit(evaluate(sc, runs, res, spec.key))
        if worker is not None:
            worker.close()
    return GroupResult(target, results, env)


def _load_failed(sc: Scenario, spec: TargetSpec, err: ExceptionInfo) -> ScenarioResult:
    return ScenarioResult.for_scenario(sc, spec.key, "error",
                                       f"target {spec.key!r} could not be loaded: {err.type}: {err.message}",
                                       exception_info=err)


def run(scenarios: list[Scenario], targets: list[TargetSpec], *, timeout: float = 60.0,
        on_result: Callable[[ScenarioResult], None] | None = None, command: list[str] | None = None,
        parallel: int | None = None, load_timeout: float = LOAD_TIMEOUT, coverage: str | None = None) -> Report:
    """Run every scenario on every target (groups in parallel threads, one worker each);
    coverage: see run_group."""
    t0 = time.perf_counter()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    lock = threading.Lock()

    def locked(r: ScenarioResult) -> None:
        if on_result:
            with lock:
                on_result(r)

    workers = max(1, min(len(targets), parallel or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        groups = list(pool.map(lambda t: run_group(scenarios, t, timeout, locked, load_timeout, coverage), targets))
    env = next((g.environment for g in groups if g.environment), {})
    results = [r for g in groups for r in g.results]
    stats = statistics(results)
    report = Report(success=verdicts.run_success(stats.violated, stats.errors), created_at=created,
                    duration_s=round(time.perf_counter() - t0, 3), command=command or [],
                    environment=Environment(**env), targets={t.key: g.target for t, g in zip(targets, groups)},
                    results=results, statistics=stats)
    return report
