"""One hunt round, inside the worker process (in its forked child on CPU).

A round is one `{"type": "hunt"}` job (`run_round`): Hypothesis itself (`hypothesis.find`)
draws examples of one property, evaluates each with the adapter in-process (`check`: the
plan, boundary calls and pure invariant code `sentinel run` uses), and on a violation
shrinks it to a minimal counterexample, within the job's example and time budget; the
first round of a property first probes which config choices the target lacks (`probe`).
Progress goes out as `{"event": "progress"}` lines; the result is one dict. The worker
calls `warm` before it forks, so rounds do not each pay the imports and Hypothesis's caches.
"""

from __future__ import annotations

import random
import time
import traceback
from collections import Counter
from dataclasses import replace
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, Phase, find, reject, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import HypothesisException, NoSuchExample, Unsatisfiable

from sentinel_adapters.base import PreconditionUnmet, Unsupported

from ..errors import SentinelError

from .. import strategies as S
from ..invariants import RunObservation
from ..invariants.base import Outcome
from ..observe import observe
from ..runner import plan
from ..spec import Scenario
from .properties import PROPERTIES, SHRINK_TIME, Property

PROGRESS_EVERY = 0.5  # seconds between progress lines from a round
PROBE_GIVE_UP = 12  # inputs the target declines in every config before a property is not applicable


class NotApplicable(SentinelError):
    """The drawn example does not meet the property's precondition (the invariant's static
    checks): rejected, never a finding."""


# --- one example ----------------------------------------------------------------------------

def scenario_for(prop: Property, ex: S.Example):
    """The in-memory scenario of one example (what the YAML of a finding loads to)."""
    inv = prop.invariant(ex)
    variants = {n: ({**ex.inputs, **ov}, {}) for n, ov in ex.variants.items()}
    sc = Scenario(id=f"hunt-{prop.name}", title=prop.doc, description="", boundary=ex.boundary, targets=["*"],
                  config=dict(ex.config), inputs=dict(ex.inputs), variants=variants, grads=[], invariants=[inv],
                  provenance=[], tags=["hunt"])
    problems = inv.check(sc)
    if problems:
        raise NotApplicable("; ".join(m for _, m in problems))
    return sc


def check(prop: Property, ex: S.Example, adapter, device) -> tuple[Outcome, dict[str, RunObservation], dict | None]:
    """Evaluate one example: plan the runs its invariant needs, call the target, evaluate.
    Raises NotApplicable, or the adapter's Unsupported, for an example that does not apply."""
    sc = scenario_for(prop, ex)
    obs, function = {}, None
    for run in plan(sc):
        o, fn = observe(adapter, device, sc.boundary, run.inputs, run.config, run.grads)
        # inputs come back in their own dtypes, as runner.evaluate decodes them
        o["inputs_after"] = {n: a.astype(run.inputs[n].dtype) for n, a in o["inputs_after"].items()}
        obs[run.name] = RunObservation(inputs=run.inputs, **o)
        function = function or fn
    with np.errstate(all="ignore"):
        outcome = sc.invariants[0].evaluate(obs, sc)
    return outcome, obs, function


def fingerprint(ex: S.Example) -> str:
    return repr((ex.config, {n: a.tobytes() for n, a in ex.inputs.items()},
                 {n: {k: a.tobytes() for k, a in v.items()} for n, v in ex.variants.items()}, ex.params))


# --- one round ------------------------------------------------------------------------------

def probe(prop: Property, adapter, device,
          reasons: dict[str, str] | None = None) -> tuple[dict[str, list[Any]], str | None]:
    """Which config choices does the target not have? From the property's simplest
    applicable example, try each other choice of each config key alone; the ones the
    target raises Unsupported for are excluded from this hunt's draws. Returns
    (excluded choices, reason) where a reason means the property does not apply at all
    (the simplest example is itself unsupported, or an output it checks is absent); each
    excluded choice's own reason goes into `reasons` ("key=value" -> the target's message)."""
    seen: dict[str, Any] = {"declined": 0}
    default = {k: v[0] for k, v in prop.config_choices().items()}

    def runs(ex: S.Example) -> bool:
        """The drawn inputs are applicable and the target runs them, with the default config
        (every key's first choice), else (first input only) the default with one key changed,
        else the drawn config; Unsupported for all of them is a decline."""
        if seen["declined"] >= PROBE_GIVE_UP:  # the target declines whatever is drawn: stop here
            seen["gave_up"] = True
            return True
        configs = [default, ex.config]
        if seen["declined"] == 0:  # the default declined on a first input: try it with one key changed
            configs[1:1] = [{**default, k: v} for k, vs in prop.config_choices().items() for v in vs[1:]]
        for cfg in configs:
            cand = replace(ex, config=dict(cfg))
            try:
                outcome, _, _ = check(prop, cand, adapter, device)
            except (NotApplicable, PreconditionUnmet):  # an input the trainer never receives: draw another
                return False
            except Unsupported as e:
                seen.setdefault("unsupported", str(e).splitlines()[0] if str(e) else "Unsupported")
                continue
            except Exception:  # noqa: BLE001 - the rounds will meet and report it
                seen["error"] = True
                return False
            if outcome.verdict == "skipped":
                seen.setdefault("skipped", outcome.message)
                continue
            seen["base"] = cand
            return True
        seen["declined"] += 1
        return False

    try:
        find(prop.strategy(), runs, settings=settings(  # the first runnable example; no shrinking
            max_examples=200, database=None, deadline=None, phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck)))
    except HypothesisException:
        pass
    base = seen.get("base")
    if base is None:  # nothing ran: not applicable if the target only ever declined
        return {}, None if seen.get("error") else (seen.get("skipped") or seen.get("unsupported"))
    excluded: dict[str, list[Any]] = {}
    for key, choices in prop.config_choices().items():
        for v in choices:
            if v == base.config.get(key):
                continue
            try:
                check(prop, replace(base, config={**base.config, key: v}), adapter, device)
            except Unsupported as e:
                excluded.setdefault(key, []).append(v)
                if reasons is not None:
                    reasons[f"{key}={v!r}"] = (str(e).splitlines()[0] if str(e) else "Unsupported")[:300]
            except Exception:  # noqa: BLE001
                pass
    return excluded, None


def run_round(adapter, device, job: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Hypothesis on one property for up to job.max_examples examples / job.time_limit s,
    then shrinking. Returns counts, and the minimal counterexample if one was found."""
    prop = PROPERTIES[job["property"]]
    t_probe = time.monotonic()
    exclude = job.get("exclude") or {}
    excluded_why: dict[str, str] = {}
    if job.get("probe"):
        exclude, why = probe(prop, adapter, device, excluded_why)
        if why:
            return {"status": "ok", "property": prop.name, "examples": 0, "rejected": 0, "errors": 0,
                    "shrink_calls": 0, "timed_out": 0, "note": "", "not_applicable": why, "exclude": {},
                    "unsupported_reasons": [why], "error_sample": None, "duration_s": time.monotonic() - t_probe,
                    "ran_out_of_time": False}
    t0 = time.monotonic()
    deadline = t0 + float(job.get("time_limit", 10.0))
    shrink_time = float(job.get("shrink_time", SHRINK_TIME))
    st = {"examples": 0, "rejected": 0, "errors": 0, "shrink_calls": 0, "timed_out": 0}
    unsupported: Counter[str] = Counter()
    preconditions: Counter[str] = Counter()  # examples each declared precondition excluded (no target call)
    first: dict[str, Any] = {}
    best: dict[str, Any] = {}
    error_sample: dict[str, Any] | None = None
    last_emit = [t0]

    def progress(force: bool = False) -> None:
        now = time.monotonic()
        if force or now - last_emit[0] >= PROGRESS_EVERY:
            last_emit[0] = now
            emit({"event": "progress", "property": prop.name, "examples": st["examples"],
                  "shrink_calls": st["shrink_calls"], "found": bool(best), "elapsed_s": round(now - t0, 3)})

    def condition(ex: S.Example) -> bool:
        nonlocal error_sample
        now = time.monotonic()
        if not best and now > deadline:  # the round's time is up: let Hypothesis run out
            st["timed_out"] += 1
            return False
        if best and now - first["t"] > shrink_time and fingerprint(ex) != best["fp"]:
            return False  # shrinking budget spent: only the best so far is still a failure
        try:
            outcome, obs, function = check(prop, ex, adapter, device)
        except PreconditionUnmet as e:  # Adapter.call refused before any target code ran
            st["rejected"] += 1
            preconditions[f"{e.name}: {e.reason}"[:300]] += 1
            reject()
        except (NotApplicable, Unsupported) as e:
            st["rejected"] += 1
            unsupported[str(e).splitlines()[0][:300] if str(e) else type(e).__name__] += 1
            reject()
        except Exception as e:  # noqa: BLE001 - target code raised on a drawn input
            st["rejected"] += 1
            st["errors"] += 1
            if error_sample is None:
                error_sample = {"type": type(e).__name__, "message": str(e)[:2000],
                                "traceback": traceback.format_exc()[-4000:], "example": repr(ex)[:4000]}
            reject()
        if outcome.verdict in ("skipped", "error"):
            st["rejected"] += 1
            unsupported[f"{outcome.verdict}: {outcome.message}"[:300]] += 1
            reject()
        if best:
            st["shrink_calls"] += 1
        else:
            st["examples"] += 1
        progress()
        if outcome.verdict != "violated":
            return False
        if not best:
            first.update(t=time.monotonic(), examples=st["examples"])
        best.update(ex=ex, fp=fingerprint(ex), outcome=outcome, base=obs["base"], function=function)
        return True

    db = DirectoryBasedExampleDatabase(job["db"]) if job.get("db") else None
    key = job["db_key"].encode()
    strategy = prop.strategy(exclude)
    note = ""
    found = None
    for phases, rnd in _attempts(job.get("seed"), db is not None):
        s = settings(max_examples=max(1, int(job.get("max_examples", 100))), database=db, deadline=None,
                     phases=phases, suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        try:
            found = find(strategy, condition, settings=s, random=rnd, database_key=key)
        except NoSuchExample:
            pass
        except Unsatisfiable as e:
            note = f"no applicable example: {e}"
        except Exception as e:  # noqa: BLE001 - e.g. Flaky: a nondeterministic target; keep the best seen
            note = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if best:
            break
    progress(force=True)
    out: dict[str, Any] = {"status": "ok", "property": prop.name, **st, "note": note, "exclude": exclude,
                           "unsupported_reasons": [f"config {k} excluded: {r}" for k, r in excluded_why.items()]
                           + [f"{r} (x{n})" for r, n in unsupported.most_common(5)],
                           "preconditions": dict(preconditions),
                           "error_sample": error_sample, "duration_s": time.monotonic() - t_probe,
                           "probe_s": t0 - t_probe,
                           "ran_out_of_time": st["timed_out"] > 0}
    if best:
        if found is not None and found is not best["ex"]:  # find() returns the final replay, the last True
            note += " (find returned a different example than the last violation)"
        out["finding"] = _finding(prop, best, first["examples"], first["t"] - t_probe)
        out["note"] = note
    return out


def _attempts(seed: str | None, has_db: bool) -> list[tuple[tuple[Phase, ...], random.Random | None]]:
    """The `find` calls of a round: (phases, random source) each."""
    generate = (Phase.generate, Phase.target, Phase.shrink)
    if seed is None:  # one search: replay known failures, generate, shrink, save
        return [((Phase.explicit, Phase.reuse) + generate, None)]
    # Hypothesis never mixes a fixed seed with its database: replay first, then the seeded search
    attempts = [((Phase.reuse, Phase.shrink), None)] if has_db else []
    attempts.append((generate, random.Random(seed)))
    return attempts


def _finding(prop: Property, best: dict[str, Any], examples_to_first: int, time_to_first_s: float) -> dict[str, Any]:
    """The minimal counterexample as JSON: example, invariant, outcome, base observations."""
    ex, o = best["ex"], best["outcome"]
    return {
        "config": ex.config, "inputs": {n: a.tolist() for n, a in ex.inputs.items()},
        "dtypes": {n: str(a.dtype) for n, a in ex.inputs.items()},
        "variants": {n: {k: a.tolist() for k, a in v.items()} for n, v in ex.variants.items()},
        "params": ex.params, "invariant": prop.invariant(ex).summary(),
        "outcome": {"message": o.message, "observed": _plain(o.observed), "expected": _plain(o.expected),
                    "difference": _plain(o.difference), "positions": o.positions, "details": _plain(o.details)},
        "observations": {n: _plain(a.tolist()) for n, a in best["base"].outputs.items()},
        "function": best["function"], "examples_to_first": examples_to_first,
        "time_to_first_s": time_to_first_s}


def _plain(x: Any) -> Any:
    """JSON-safe python values (numpy scalars and arrays to lists)."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


# --- before the fork ------------------------------------------------------------------------

_WARM: set[str] = set()


def warm(prop: str | None = None, exclude: dict[str, list[Any]] | None = None) -> None:
    """Prepare the warm worker before it forks a round, so rounds do not each pay it:
    imports, the property's strategy, and Hypothesis's own first-run caches (a dry `find`
    that never calls the target: no target code runs outside the forked child)."""
    key = f"{prop}|{sorted((exclude or {}).items())!r}"
    if prop is None or key in _WARM:
        return
    _WARM.add(key)
    try:
        find(PROPERTIES[prop].strategy(exclude), lambda ex: False,
             settings=settings(max_examples=2, database=None, deadline=None, suppress_health_check=list(HealthCheck)))
    except NoSuchExample:
        pass
