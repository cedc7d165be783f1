"""A hunt round ends when its time or example quota is spent (`search.RoundOver`, issue 24's
hot loop): before, `Search.condition` answered False from then on and Hypothesis's `find`
drew the rest of its test cases (`max_examples`) only to have each thrown away, most of a
short round's time. No timing is asserted: a round with no time left (time_limit 0) answers
one example, and the next question (within its batch, or the next batch) ends it."""

from __future__ import annotations

import torch

from sentinel import targets
from sentinel.hunt import search
from sentinel.hunt.worker import round as R

PROP = "kl.unmutated"  # holds on the reference: no violation ends the round early


def _round(monkeypatch, **job):
    calls = []
    condition = search.Search.condition

    def counted(self, batch):
        calls.append(len(batch))
        return condition(self, batch)
    monkeypatch.setattr(search.Search, "condition", counted)
    adapter = targets.adapter_class("reference")(None, torch.device("cpu"), {})
    adapter.load()
    res = R.run_round(adapter, torch.device("cpu"), {"property": PROP, "seed": "0", "db_key": PROP,
                                                      "shrink_time": 0.5, **job}, lambda e: None)
    return res, calls


def test_a_round_past_its_time_asks_no_more_batches(monkeypatch):
    res, calls = _round(monkeypatch, time_limit=0.0, max_examples=400)  # find may run 80 test cases
    assert res["status"] == "ok" and "finding" not in res and res["note"] == ""
    assert res["examples"] + res["rejected"] == 1  # one example answered, however late
    assert len(calls) <= 2 and calls[0] == 1  # before: a call per test case Hypothesis went on drawing (80)
    assert res["ran_out_of_time"]


def test_the_batch_that_ended_a_round_is_not_saved_as_a_failure(monkeypatch, tmp_path):
    db = tmp_path / "db"
    # no seed: Hypothesis uses no database in a seeded search
    res, calls = _round(monkeypatch, time_limit=0.0, max_examples=400, db=str(db), seed=None)
    assert len(calls) <= 2 and "finding" not in res
    saved = [p for p in db.rglob("*") if p.is_file()] if db.exists() else []
    assert saved == []  # Hypothesis saves a test case an exception ended: not this one


class _Differs:
    """A judge for which every example of a batch of 3 or more differs on `loss` (a differential
    hunt's, torch-free): the first finding is no minimal batch, so Hypothesis has shrinking to do."""

    one_by_one = False

    def answers(self, batch):
        return [search.Answer(violations=["loss"] if len(batch) >= 3 else []) for _ in batch]

    def deviation(self, ex, answer, observable):
        return None

    def known(self, ex, answer):
        return None

    def declared(self, name):
        return {}


def _shrunk(end_shrink: bool) -> tuple[search.Search, list[int]]:
    import math
    import random
    import time

    from hypothesis import HealthCheck, Phase, find, settings

    from sentinel import strategies as S
    s = search.Search(_Differs(), 400, time.monotonic() + 60, 0.0, end_shrink=end_shrink)
    calls = []

    def condition(batch):
        calls.append(len(batch))
        return s.condition(batch)
    try:
        find(S.batches(S.examples("policy_loss"), 4), search.replayable(condition, s.best), random=random.Random(0),
             settings=settings(max_examples=math.ceil(400 / 5), database=None, deadline=None,
                               phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck)))
    except search.RoundOver:
        pass
    return s, calls


def test_a_spent_shrinking_budget_ends_the_differential_search():
    # the differential hunt reads search.best, never find's answer: once the shrinking budget
    # (0 s here) is spent the best can change no more, and find ends at the next batch (ShrinkOver)
    # instead of drawing every step the shrinker still had (each answered at once, ~15 ms a draw)
    s, calls = _shrunk(end_shrink=True)
    assert s.best and s.best["observable"] == "loss" and len(s.best["answer"].violations) == 1
    found = next(i for i, n in enumerate(calls) if n >= 3)
    assert len(calls) == found + 2  # the batch that differed, then the one ShrinkOver ended find at
    _, before = _shrunk(end_shrink=False)  # sentinel hunt's own rounds: find shrinks on (its answer is saved)
    assert len(before) > len(calls) + 10  # 152 calls against 11 at seed 0
