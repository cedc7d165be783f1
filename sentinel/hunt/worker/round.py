"""One hunt round, inside the worker process (in its forked child on CPU).

A round is one `{"type": "hunt"}` job (`run_round`): Hypothesis itself (`hypothesis.find`)
draws batches of examples of one property (`strategies.batches`: the engine's per-test-case
cost is shared by a batch), evaluates each with the adapter in-process (`check.Checker`: the
plan, boundary calls and pure invariant code `sentinel run` uses), and on a violation whose
signature is not known shrinks it to a minimal counterexample and finds its signature,
within the job's example and time budget. A violation with a known signature (from
`--known`, or an earlier finding of this hunt) is counted and the search goes on. The first
round of a property first probes which config choices the target lacks (`probe_config`) and
replays the known findings given as examples (their signatures on this target).
The search itself is the one both hunts share (`hunt.search.Search`); here its judge is
`CheckJudge`, the target in-process. Progress goes out as `{"event": "progress"}` lines; the
result is one dict. The worker calls `warm` before it forks, so rounds do not each pay the
imports and Hypothesis's caches.
"""

from __future__ import annotations

import math
import random
import time
import traceback
from dataclasses import replace
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import HypothesisException, NoSuchExample, Unsatisfiable

from sentinel.adapters import options
from sentinel.errors import PreconditionUnmet, Unsupported

from ... import coverage, strategies as S
from .. import properties
from ..properties import SHRINK_TIME, Property
from ..differences import skipped_note
from ..probe import beside, first_of
from ..search import Answer, RoundOver, Search, plain, replayable
from ..signature import Signature, nonfinite
from .check import Checker, NotApplicable, observable_of, unsupported_reason

PROBE_GIVE_UP = 12  # inputs the target declines in every config before a property is not applicable
BATCH = 16  # most examples per Hypothesis test case
BATCH_MEAN = 5  # about how many it draws on average (Hypothesis's list sizes)


# --- the config choices a target lacks ----------------------------------------------------

class _Probed(BaseException):
    """The probe's first runnable example is found: it ends `find` there. A True answer instead
    makes Hypothesis run the example once more to print it (the target called twice, and the
    example pretty-printed), a few milliseconds of every property's first round. A
    BaseException, as Hypothesis takes an Exception for a failing test (see search.RoundOver)."""


def probe_config(checker: Checker, reasons: dict[str, str] | None = None) -> tuple[dict[str, list[Any]], str | None]:
    """Which config choices does the target not have? From the property's simplest
    applicable example, try each other choice of each config key alone; the ones the
    target raises Unsupported for are excluded from this hunt's draws. Returns
    (excluded choices, reason) where a reason means the property does not apply at all
    (the simplest example is itself unsupported, or an output it checks is absent); each
    excluded choice's own reason goes into `reasons` ("key=value" -> the target's message)."""
    prop = checker.prop
    seen: dict[str, Any] = {"declined": 0}
    drawn = prop.config_choices(checker.domains)
    choices = {**drawn, **{k: [v] for k, v in checker.pin.items() if k in drawn}}
    default = {k: v[0] for k, v in choices.items()}

    def runs(ex: S.Example) -> bool:
        """The drawn inputs are applicable and the target runs them, with the default config
        (every key's first choice), else (first input only) the default with one key changed,
        else the drawn config; Unsupported for all of them is a decline."""
        if seen["declined"] >= PROBE_GIVE_UP:  # the target declines whatever is drawn: stop here
            seen["gave_up"] = True
            raise _Probed
        configs = [default, ex.config]
        if seen["declined"] == 0:  # the default declined on a first input: try it with one key changed
            configs[1:1] = [{**default, k: v} for k, vs in choices.items() for v in vs[1:]]
        for cfg in configs:
            cand = replace(ex, config=dict(cfg))
            try:
                outcome, _, _, _ = checker.check(cand)
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
            raise _Probed  # found: `find` would run it again to print it (a second target call)
        seen["declined"] += 1
        return False

    try:
        find(prop.strategy(pin=checker.pin), runs, settings=settings(  # the first runnable example; no shrinking
            max_examples=200, database=None, deadline=None, phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck)), random=random.Random(0))  # seeded: ended by _Probed, an
        # unseeded `find` prints how to reproduce it with its generated seed
    except (HypothesisException, _Probed):
        pass
    base = seen.get("base")
    if base is None:  # nothing ran: not applicable if the target only ever declined
        return {}, None if seen.get("error") else (seen.get("skipped") or seen.get("unsupported"))
    excluded: dict[str, list[Any]] = {}
    for key, values in choices.items():
        for v in values:
            if v == base.config.get(key):
                continue
            try:
                checker.check(replace(base, config={**base.config, key: v}))
            except Unsupported as e:
                if _runs_beside(checker, choices, key, v):  # only beside other changes at once: drawn
                    continue
                excluded.setdefault(key, []).append(v)
                if reasons is not None:
                    reasons[f"{key}={v!r}"] = (str(e).splitlines()[0] if str(e) else "Unsupported")[:300]
            except Exception:  # noqa: BLE001
                pass
    return excluded, None


def _runs_beside(checker: Checker, choices: dict[str, list[Any]], key: str, value: Any) -> bool:
    """Whether the target runs `key` = `value` in one of the whole configs `probe.beside`
    gives (slime's group std runs only beside the group mean and eps 1e-6), each on the
    property's own first example in that config (the inputs a config needs: group ids)."""
    prop = checker.prop
    for cfg in beside(prop.boundary, choices, key, value):
        ex = first_of(prop.strategy(pin=cfg, domains=checker.domains))
        if ex is None:
            continue
        try:
            outcome, _, _, _ = checker.check(ex)
        except (Unsupported, NotApplicable, PreconditionUnmet):
            continue
        except Exception:  # noqa: BLE001 - it ran: the target raised on the input, which the rounds report
            return True
        if outcome.verdict != "skipped":
            return True
    return False


# --- one round ------------------------------------------------------------------------------

class CheckJudge:
    """What each example comes to on the target in-process (`Search`'s judge in a round):
    one example at a time, so the round's budget is checked between target calls."""

    one_by_one = True

    def __init__(self, checker: Checker):
        self.checker = checker

    def answers(self, batch: list[S.Example]) -> list[Answer]:
        return [self._answer(ex) for ex in batch]

    def _answer(self, ex: S.Example) -> Answer:
        try:
            outcome, obs, function, inv = self.checker.check(ex)
        except PreconditionUnmet as e:  # Adapter.call refused before any target code ran
            return Answer(rejected=f"excluded by precondition {e.name}", precondition=f"{e.name}: {e.reason}")
        except (NotApplicable, Unsupported) as e:
            return Answer(rejected=unsupported_reason(e))
        except Exception as e:  # noqa: BLE001 - target code raised on a drawn input
            return Answer(rejected=f"the target raised {type(e).__name__}", error={
                "type": type(e).__name__, "message": str(e)[:2000], "traceback": traceback.format_exc()[-4000:],
                "example": repr(ex)[:4000]})
        if outcome.verdict in ("skipped", "error"):
            return Answer(rejected=f"{outcome.verdict}: {outcome.message}"[:300])
        detail = {"outcome": outcome, "inv": inv, "base": obs["base"], "function": function}
        return Answer(violations=[observable_of(inv, outcome)] if outcome.verdict == "violated" else [], detail=detail)

    def deviation(self, ex: S.Example, a: Answer, observable: str) -> str | None:
        return self.checker.deviation(ex, a.detail["outcome"], a.detail["inv"])

    def known(self, ex: S.Example, a: Answer) -> Signature | None:
        return self.checker.known_as(ex, a.detail["outcome"], a.detail["inv"])

    def declared(self, name: str) -> dict[str, Any]:
        return self.checker.deviations[name]


def run_round(adapter, device, job: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Hypothesis on one property for up to job.max_examples examples / job.time_limit s,
    then shrinking. Returns counts, and the minimal counterexample (with its signature) if
    one with a new signature was found."""
    prop = properties.get(job["property"], job.get("origin"))
    t_probe, cpu0 = time.monotonic(), time.process_time()
    checker = Checker(prop, adapter, device, dict(job.get("exclude") or {}),
                      [Signature.from_dict(d) for d in job.get("known") or []], pin=dict(job.get("pin") or {}),
                      deviations=adapter.deviations_here(), domains=domains_of(adapter, prop.boundary))
    options.drain()  # the options the trainer reads from here on are this round's
    out: dict[str, Any] = {"status": "ok", "property": prop.name, "examples": 0, "rejected": 0, "errors": 0,
                           "shrink_calls": 0, "timed_out": 0, "note": "", "exclude": checker.exclude,
                           "reasons": {}, "excluded_known": {}, "learned_known": [], "error_sample": None,
                           "ran_out_of_time": False}
    if job.get("probe"):
        why_excluded: dict[str, str] = {}
        checker.exclude, why = probe_config(checker, why_excluded)
        out["exclude"], out["exclude_reasons"] = checker.exclude, why_excluded
        if why:
            return {**out, "not_applicable": why, "reasons": {why: 1}, "duration_s": time.monotonic() - t_probe,
                    "cpu_s": time.process_time() - cpu0}
    if job.get("replay"):
        out["learned_known"] = [{**sig.as_dict(), "source": src} for sig, src in checker.replay(job["replay"])]
    t0 = time.monotonic()
    search = Search(CheckJudge(checker), max(1, int(job.get("max_examples", 100))),
                    t0 + float(job.get("time_limit", 10.0)), float(job.get("shrink_time", SHRINK_TIME)),
                    emit=emit, name=prop.name)
    db = RoundDatabase(job["db"], search) if job.get("db") else None
    strategy = S.batches(prop.strategy(checker.exclude, job.get("pin"), checker.domains), BATCH)
    condition = replayable(search.condition, search.best)
    measure = coverage.measuring(job.get("coverage"), adapter.trainer_roots() if hasattr(adapter, "trainer_roots") else [])
    with measure:
        found, note = _search(job, search, strategy, condition, db)
    if job.get("coverage"):
        out["coverage_spans"] = coverage.spans(adapter, prop.boundary)
        out["unreachable"] = dict(getattr(type(adapter), "unreachable", {}))
    search.progress(force=True)
    out.update(search.st, note=note, reasons=dict(search.reasons.most_common(20)), error_sample=search.error_sample,
               preconditions=dict(search.preconditions),
               excluded_known=dict(search.excluded), probe_s=t0 - t_probe,
               # those that do not apply at this checkout are listed too, with why (never met)
               deviations={**{n: {**d, "met": 0, "example": {}} for n, d in checker.deviations.items()
                              if not d.get("applies", True)}, **search.deviations},
               ran_out_of_time=search.st["timed_out"] > 0)
    if search.best:
        best = search.best
        if found is not None and len(found) != 1:
            out["note"] = note + f" (shrunk to a batch of {len(found)})"
        sig = checker.signature(best["ex"], best["answer"].detail["outcome"], best["answer"].detail["inv"])
        out["finding"] = _finding(prop, best, sig, search.first["examples"], search.first["t"] - t_probe)
        skipped = checker.deviation(best["ex"], best["answer"].detail["outcome"], best["answer"].detail["inv"], True)
        if skipped:  # excused at the code it was declared for, not at this one: reported, and why
            out["finding"]["outcome"]["message"] += "; " + skipped_note(checker.deviations, skipped)
        out["signature_probes"] = checker.probes
    out["options"] = {"read": options.drain().get(prop.boundary, {}),
                      "pinned": type(adapter).pins(prop.boundary) if hasattr(type(adapter), "pins") else {}}
    out["duration_s"], out["cpu_s"] = time.monotonic() - t_probe, time.process_time() - cpu0
    return out


def _search(job: dict[str, Any], search: Search, strategy, condition, db) -> tuple[Any, str]:
    """Hypothesis's `find` calls of a round (`_attempts`): (what it shrank to, a note)."""
    note, found = "", None
    for phases, rnd in _attempts(job.get("seed"), db is not None):
        # a test case is a batch of ~5 examples: drawn past the quota, they would be thrown away
        s = settings(max_examples=max(1, math.ceil(search.quota / BATCH_MEAN)), database=db, deadline=None, phases=phases,
                     suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        try:
            found = find(strategy, condition, settings=s, random=rnd, database_key=job["db_key"].encode())
        except (NoSuchExample, RoundOver):
            pass
        except Unsatisfiable as e:
            note = f"no applicable example: {e}"
        except Exception as e:  # noqa: BLE001 - e.g. Flaky: a nondeterministic target; keep the best seen
            note = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if search.best or search.ended:  # a later attempt's every batch would be answered False
            break
    return found, note


class RoundDatabase(DirectoryBasedExampleDatabase):
    """The round's example database: Hypothesis saves the test case an exception ended, and the
    one `Search` raises once the round is over (RoundOver) is no failure to replay."""

    def __init__(self, path: str, search: Search):
        super().__init__(path)
        self.search = search

    def save(self, key: bytes, value: bytes) -> None:
        if not self.search.ended:
            super().save(key, value)


def _attempts(seed: str | None, has_db: bool) -> list[tuple[tuple[Phase, ...], random.Random | None]]:
    """The `find` calls of a round: (phases, random source) each."""
    generate = (Phase.generate, Phase.target, Phase.shrink)
    if seed is None:  # one search: replay known failures, generate, shrink, save
        return [((Phase.explicit, Phase.reuse) + generate, None)]
    # Hypothesis never mixes a fixed seed with its database: replay first, then the seeded search
    attempts = [((Phase.reuse, Phase.shrink), None)] if has_db else []
    attempts.append((generate, random.Random(seed)))
    return attempts


def _finding(prop: Property, best: dict[str, Any], sig: Signature, examples_to_first: int,
             time_to_first_s: float) -> dict[str, Any]:
    """The minimal counterexample as JSON: example, invariant, outcome, base observations, signature."""
    ex, d = best["ex"], best["answer"].detail
    o = d["outcome"]
    return {
        "config": ex.config, "inputs": {n: a.tolist() for n, a in ex.inputs.items()},
        "dtypes": {n: str(a.dtype) for n, a in ex.inputs.items()},
        "variants": {n: {k: a.tolist() for k, a in v.items()} for n, v in ex.variants.items()},
        "params": ex.params, "invariant": prop.invariant(ex).summary(),
        "outcome": {"message": o.message, "observed": plain(o.observed), "expected": plain(o.expected),
                    "difference": plain(o.difference), "positions": o.positions, "details": plain(o.details)},
        "observations": {n: plain(a.tolist()) for n, a in d["base"].outputs.items()},
        "function": d["function"], "examples_to_first": examples_to_first,
        "time_to_first_s": time_to_first_s, "signature": sig.as_dict(),
        "observable": best["observable"], "non_finite": nonfinite(o.observed, o.positions)}


# --- before the fork ------------------------------------------------------------------------

_WARM: set[str] = set()


def domains_of(adapter, boundary: str) -> dict[str, Any]:
    """The adapter's `option_domains` for `boundary` (what a round's strategy adds)."""
    return dict(getattr(type(adapter), "option_domains", {}).get(boundary, {}))


def warm(prop: str | None = None, exclude: dict[str, list[Any]] | None = None, pin: dict[str, Any] | None = None,
         origin: str | None = None, adapter: Any = None) -> None:
    """Prepare the warm worker before it forks a round, so rounds do not each pay it:
    imports, the property's strategy (built and validated, with the `adapter`'s domains as
    the round's: else each round's child builds it again), and once Hypothesis's own
    first-run caches (a dry `find` that never calls the target: no target code runs outside
    the forked child)."""
    key = f"{prop}|{sorted((exclude or {}).items())!r}|{sorted((pin or {}).items())!r}"
    if prop is None or key in _WARM:
        return
    p = properties.get(prop, origin)
    domains = domains_of(adapter, p.boundary)
    if domains:
        p.strategy(pin=pin)  # the first round's probe draws without them
    strategy = S.batches(p.strategy(exclude, pin, domains), BATCH)
    strategy.validate()
    if not _WARM:
        # imported lazily by the engine once a round scores its targets: else by every round's child
        import hypothesis.internal.conjecture.optimiser  # noqa: F401
        try:
            find(strategy, lambda ex: False, settings=settings(max_examples=2, database=None, deadline=None,
                                                                suppress_health_check=list(HealthCheck)))
        except NoSuchExample:
            pass
    _WARM.add(key)
