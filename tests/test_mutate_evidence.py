"""An equivalence claim gets the evidence it asks for, whatever the machine's load: a
differential hunt with `evidence` runs rounds past its budget until every boundary compared
that many examples, and a cap past the budget ends a boundary that cannot (the toy target's
end-to-end tests are in test_mutate.py)."""

from __future__ import annotations

import time

from sentinel.hunt.driver import differential as D
from sentinel.hunt.driver.engine import ExitReason
from sentinel.runner import TargetSpec


def _hunter(evidence: int, cap: float, budget: float = 0.0, boundaries=("kl", "advantages")) -> D.DiffHunter:
    """A differential hunter whose rounds are stubbed (no side is started)."""
    st = D.DiffSettings(boundaries=list(boundaries), time_budget=budget, seed=0, first=True, evidence=evidence,
                        evidence_cap_s=cap)
    h = D.DiffHunter(TargetSpec("reference"), TargetSpec("reference"), st)
    h.t_search = time.perf_counter()
    return h


def test_rounds_run_past_the_budget_until_each_boundary_has_its_evidence():
    h = _hunter(evidence=250, cap=3600)
    asked = []

    def round_(s, left, need=None, probe=False):  # each round compares what it asks for, at most 100
        asked.append((s.prop.boundary, need))
        s.examples += min(need or 100, 100)
        s.rounds += 1
    h._round = round_
    h.rounds()
    assert [s.examples for s in h.states] == [250, 250] and not h.evidence_capped
    assert h.exit_reason is ExitReason.time_budget
    # the first rounds are the budget's (no need); past it, each round asks only for what is missing
    assert asked[:2] == [("kl", None), ("advantages", None)] and ("kl", 50) in asked


def test_without_evidence_the_rounds_end_at_the_budget_as_before():
    h = _hunter(evidence=0, cap=0)
    calls = []

    def round_(s, left, need=None, probe=False):
        calls.append(need)
        s.examples += 100
        s.rounds += 1
    h._round = round_
    h.rounds()
    assert calls == [None, None]  # every boundary's first round, then the spent budget ends it


def test_a_boundary_that_draws_nothing_ends_at_the_cap():
    h = _hunter(evidence=100, cap=0.2, boundaries=("kl",))

    def round_(s, left, need=None, probe=False):  # every drawn example rejected, each round timed out
        s.rounds += 1
    h._round = round_
    h.rounds()  # returns: the cap ends it
    assert h.evidence_capped and h.states[0].examples == 0


def test_a_finding_ends_the_evidence_rounds():
    h = _hunter(evidence=10 ** 6, cap=3600, boundaries=("kl",))

    def round_(s, left, need=None, probe=False):
        s.examples += 16
        s.rounds += 1
        if s.rounds == 3:
            s.found.append(object())
    h._round = round_
    h.rounds()
    assert h.states[0].rounds == 3 and not h.evidence_capped


def test_a_mutant_that_does_not_compile_is_served_from_the_cache(tmp_path):
    """An `error` record for a mutant that does not compile says its reach (None: nothing ran), so
    the cache, which judges again any record made before reach was measured, serves it: it was
    judged again on every run (and could start a worker for nothing)."""
    from sentinel.mutate import engine
    from sentinel.mutate.cache import Cache
    m = {"compile_error": "SyntaxError: invalid syntax", "function_hash": "h", "function": "f", "operator": "swap-args",
         "key": "k"}
    record = engine._judge(None, m, [])  # no worker: a mutant that does not compile never reaches one
    assert record["verdict"] == "error" and record["reached"] is None
    cache = Cache(tmp_path, "toy", "toy", "c0", "cat", 2.0, 0)
    cache.put(m, record)
    assert cache.get(m) == record
