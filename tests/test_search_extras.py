"""A difference seen only on extras (a logged stat, a returned metric) waits for one on a
canonical output through the first half of a round, then is the round's finding (issue 20):
before, it became one only after search.SECONDARY_PATIENCE = 64 such examples, which a
mutant's few seconds never reached, so a mutant that changes only a logged stat survived.
A fake judge answers each example by its number; no target runs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from sentinel import strategies as S
from sentinel.hunt.search import SECONDARY_PATIENCE, Answer, RoundOver, Search

EXTRA, OUTPUT = "returned:stat", "loss"


class Known:
    def text(self) -> str:
        return "known"


class Judge:
    one_by_one = True

    def __init__(self, differs: dict[int, list[str]], known: set[int] = frozenset()):
        self.differs, self.known_at = differs, known

    def answers(self, batch):
        return [Answer(violations=self.differs.get(int(ex.params["i"]), []),
                       secondary=all(v == EXTRA for v in self.differs.get(int(ex.params["i"]), ["x"])))
                for ex in batch]

    def deviation(self, ex, answer, observable):
        return None

    def known(self, ex, answer):
        return Known() if int(ex.params["i"]) in self.known_at else None

    def declared(self, name):
        return {}


def _round(judge: Judge, quota: int, examples: int) -> Search:
    """One round of `quota` examples fed `examples` one by one, as Hypothesis's find would."""
    s = Search(judge, quota, time.monotonic() + 600, 0.0, patience=SECONDARY_PATIENCE)
    try:
        for i in range(examples):
            if s.condition([S.Example("loss_agg", {}, {"x": np.zeros(1)}, params={"i": i})]):
                break
    except RoundOver:
        pass
    s.take_passed()
    return s


def test_an_extras_only_difference_is_the_round_finding_when_no_output_differs():
    # one extras-only difference in a 20-example round (before: passed over, no finding)
    s = _round(Judge({3: [EXTRA]}), quota=20, examples=40)
    assert s.best and s.best["observable"] == EXTRA and s.best["ex"].params["i"] == 3
    assert s.first["examples"] == 4  # counted where it came, not at the round's end


def test_past_half_the_round_an_extras_only_difference_is_taken_at_once():
    s = _round(Judge({12: [EXTRA], 15: [OUTPUT]}), quota=20, examples=40)
    assert s.best["ex"].params["i"] == 12 and s.st["examples"] == 13


@pytest.mark.parametrize("at", [5, 9])
def test_an_output_difference_in_the_first_half_is_preferred(at):
    s = _round(Judge({2: [EXTRA], at: [OUTPUT, EXTRA]}), quota=20, examples=40)
    assert s.best["observable"] == OUTPUT and s.best["ex"].params["i"] == at and s.secondary_seen == 1


def test_a_known_extras_difference_is_not_taken_but_a_later_new_one_is():
    s = _round(Judge({1: [EXTRA], 4: [EXTRA]}, known={1}), quota=20, examples=40)
    assert s.best["ex"].params["i"] == 4 and s.excluded == {"known": 1}


def test_no_difference_no_finding():
    s = _round(Judge({}), quota=20, examples=40)
    assert not s.best and s.st["examples"] == 20
