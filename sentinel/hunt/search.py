"""One round's search, shared by both hunts (torch-free): the budget, the counts, and the first
new violation, which Hypothesis then shrinks.

`Search.condition` is what Hypothesis calls on each drawn batch. A *judge* says what each
example came to: the single-target hunt's (`worker.round.CheckJudge`, in the worker's child:
the target in-process, one example at a time, the budget checked between) and the
differential hunt's (`driver.differential.DiffJudge`, in the CLI process: both sides answer a
whole batch in one round trip). The search counts rejections and errors, keeps the shrink
on the first violation's observable, passes over declared deviations and known signatures,
and stops at the first violation with a new signature.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from .. import strategies as S

PROGRESS_EVERY = 0.5  # seconds between progress lines from a round
# a difference only on extras (a returned metric, a config change) is passed over while a round
# looks on for one whose canonical outputs differ too, which a family can judge and a scenario can
# replay (the same bug seen through a logged copy of an output would otherwise be found through
# the copy): through the first half of the round's quota and time, and for at most this many such
# examples over a hunt's rounds. A round that ends with none on an output reports the first one it
# passed over, so a short round (a mutant's few seconds) still finds a bug seen only on extras.
SECONDARY_PATIENCE = 64


@dataclass
class Answer:
    """What one example came to: rejected (with why), or ran, violating / differing on some
    observables (none: it held)."""

    rejected: str = ""  # why it was not applicable; "" when it ran
    error: dict[str, Any] | None = None  # the target raised: a sample for the report (rejected too)
    precondition: str = ""  # "name: reason" of the declared precondition that excluded it
    violations: list[str] = field(default_factory=list)  # the observables that fail or differ
    deviations: list[str] = field(default_factory=list)  # declared deviations explaining what differs
    detail: dict[str, Any] = field(default_factory=dict)  # the judge's own record, kept with the best
    secondary: bool = False  # it differs only on values beside the canonical outputs (extras)


class RoundOver(BaseException):
    """Raised by `Search.condition` once a round's time or example quota is spent with no
    violation: it ends Hypothesis's `find` there. Returning False instead, `find` drew the
    rest of its test cases (`max_examples`) only to have each answered False at once: most of
    a short round's time. A BaseException, as Hypothesis takes an Exception for a failing
    test and shrinks it; `find`'s callers catch it."""


class ShrinkOver(RoundOver):
    """Raised by `Search.condition`, with `end_shrink`, once the shrinking budget is spent: the
    best violation can change no more (every later batch but its own is answered False), so
    what Hypothesis's shrinker would still try costs only its drawing: 20-30 s a finding where
    a draw takes ~15 ms. For a caller that reads `Search.best`, not what `find` returns."""


class Judge(Protocol):
    one_by_one: bool  # the budget is checked before each example (else once per batch)

    def answers(self, batch: list[S.Example]) -> list[Answer]: ...

    def deviation(self, ex: S.Example, answer: Answer, observable: str) -> str | None: ...

    def known(self, ex: S.Example, answer: Answer) -> Any: ...  # the known Signature, or None

    def declared(self, name: str) -> dict[str, Any]: ...  # a declared deviation's record


class Search:
    """The state of one round's search: counts, the first and best violation."""

    def __init__(self, judge: Judge, quota: int, deadline: float, shrink_time: float, *,
                 emit: Callable[[dict[str, Any]], None] | None = None, name: str = "", patience: int = 0,
                 end_shrink: bool = False):
        self.judge, self.quota, self.deadline, self.shrink_time = judge, quota, deadline, shrink_time
        self.end_shrink = end_shrink  # raise ShrinkOver once the shrinking budget is spent
        self.emit, self.name = emit, name
        self.t0 = self.last_emit = time.monotonic()
        self.st = {"examples": 0, "rejected": 0, "errors": 0, "shrink_calls": 0, "timed_out": 0}
        self.violating = 0  # examples (not shrink calls) that violated or differed, deviations included
        self.reasons: Counter[str] = Counter()  # rejected examples by reason
        self.preconditions: Counter[str] = Counter()  # examples each declared precondition excluded
        self.excluded: Counter[str] = Counter()  # known signature -> violations passed over as that bug
        self.deviations: dict[str, dict[str, Any]] = {}  # declared deviation -> its record, met, first example
        self.first: dict[str, Any] = {}  # when the first violation came: t (monotonic), examples
        self.best: dict[str, Any] = {}  # ex, fp, observable, answer
        self.error_sample: dict[str, Any] | None = None
        self.patience = patience  # extras-only examples still to pass over (SECONDARY_PATIENCE)
        self.secondary_seen = 0  # examples passed over that differed on extras only
        self.passed: list[tuple[S.Example, Answer, dict[str, Any]]] = []  # them, with when each came (see first)
        self.ended = False  # the round's time or quota is spent (RoundOver raised)

    def progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.emit is not None and (force or now - self.last_emit >= PROGRESS_EVERY):
            self.last_emit = now
            self.emit({"event": "progress", "property": self.name, "examples": self.st["examples"],
                       "shrink_calls": self.st["shrink_calls"], "found": bool(self.best),
                       "elapsed_s": round(now - self.t0, 3)})

    def _over(self, batch: list[S.Example]) -> bool | None:
        """None: go on; else the condition's answer: the round is over (False), or its shrinking
        budget is spent and only the best so far still fails."""
        now = time.monotonic()
        answered = self.st["examples"] + self.st["rejected"]  # a round answers one batch at least, however late
        if not self.best and ((now > self.deadline and answered) or self.st["examples"] >= self.quota):
            self.st["timed_out"] += now > self.deadline
            return False
        if self.best and now - self.first["t"] > self.shrink_time:
            return any(fingerprint(e) == self.best["fp"] for e in batch)
        return None

    def condition(self, batch: list[S.Example]) -> bool:
        """True when the batch holds a violation with a new signature (the first one wins).
        Raises RoundOver when the round is over with none."""
        for chunk in ([[ex] for ex in batch] if self.judge.one_by_one else [batch]):
            over = self._over(batch)
            if over is not None:
                if not self.best:  # over with no violation: nothing later can be one
                    self.ended = True
                    raise RoundOver
                if self.end_shrink:
                    raise ShrinkOver
                return over
            if not self.best:  # the quota is a cap: a batch judged whole is cut to what it leaves
                chunk = chunk[:self.quota - self.st["examples"]]
            for ex, a in zip(chunk, self.judge.answers(chunk)):
                if self._take(ex, a):
                    return True
        return False

    def take_passed(self) -> bool:
        """Once the round is over with no violation: the first extras-only example it passed
        over that is new (no declared deviation, no known bug) becomes its violation, unshrunk."""
        for ex, a, first in self.passed if not self.best else []:
            if self._violation(ex, a):
                self.first.update(first)
                return True
        return False

    def _take(self, ex: S.Example, a: Answer) -> bool:
        """Count one answer; True: it is the round's violation."""
        st, best = self.st, self.best
        if a.rejected:
            st["rejected"] += 1
            self.reasons[a.rejected] += 1
            if a.precondition:
                self.preconditions[a.precondition[:300]] += 1
            if a.error is not None:
                st["errors"] += 1
                self.error_sample = self.error_sample or a.error
            return False
        st["shrink_calls" if best else "examples"] += 1
        self.progress()
        if not a.violations:
            for name in a.deviations:
                self._met(name, ex)
            self.violating += bool(a.deviations) and not best
            return False
        if not best:
            self.violating += 1
            if a.secondary and self.secondary_seen < self.patience and not self._half_spent():
                self.secondary_seen += 1
                self.passed.append((ex, a, {"t": time.monotonic(), "examples": st["examples"]}))
                return False
        elif best["observable"] not in a.violations:
            return False  # shrinking keeps the first violation's observable: no slipping to another bug
        return self._violation(ex, a)

    def _half_spent(self) -> bool:
        """The round has spent half its example quota or half its time."""
        half_t = self.t0 + (self.deadline - self.t0) / 2
        return 2 * self.st["examples"] >= self.quota or time.monotonic() > half_t

    def _violation(self, ex: S.Example, a: Answer) -> bool:
        """True: a violating example is the round's (best) violation, not a declared deviation
        nor a known bug."""
        st, best = self.st, self.best
        observable = best["observable"] if best else a.violations[0]
        dev = self.judge.deviation(ex, a, observable)
        if dev is not None:
            self._met(dev, ex)
            return False
        known = self.judge.known(ex, a)
        if known is not None:
            self.excluded[known.text()] += 1
            return False
        if not best:
            self.first.update(t=time.monotonic(), examples=st["examples"])
        best.update(ex=ex, fp=fingerprint(ex), observable=observable, answer=a)
        return True

    def _met(self, name: str, ex: S.Example) -> None:
        d = self.deviations.setdefault(name, {**self.judge.declared(name), "met": 0, "example": {
            "config": plain(ex.config), "inputs": {n: a.tolist() for n, a in ex.inputs.items()}}})
        d["met"] += 1


def fingerprint(ex: S.Example) -> str:
    return repr((ex.config, {n: a.tobytes() for n, a in ex.inputs.items()},
                 {n: {k: a.tobytes() for k, a in v.items()} for n, v in ex.variants.items()}, ex.params))


def replayable(condition: Callable[[list[S.Example]], bool], best: dict[str, Any]) -> Callable[[list[S.Example]], bool]:
    """A search's condition as Hypothesis needs it: a batch it once held for holds again, with
    `best` (the search's violation) restored to that batch's. Hypothesis replays the batch it
    shrank to and raises FlakyFailure where the answer changed, and a search's answer for a
    batch depends on the clock (its shrinking budget, spent sooner on a loaded machine) and on
    which violation is its best by then."""
    held: dict[tuple[str, ...], dict[str, Any]] = {}

    def key(batch: list[S.Example]) -> tuple[str, ...]:
        return tuple(fingerprint(e) for e in batch)

    def cond(batch: list[S.Example]) -> bool:
        if held:  # fingerprints only once a batch held: most rounds have none
            k = key(batch)
            if k in held:
                best.clear()
                best.update(held[k])
                return True
        if condition(batch):  # the condition leaves the batch's arrays as they were
            held[key(batch)] = dict(best)
            return True
        return False
    return cond


def plain(x: Any) -> Any:
    """JSON-safe python values (numpy scalars and arrays to lists)."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x
