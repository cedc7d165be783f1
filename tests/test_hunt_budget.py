"""Fair budgets (issue 19, item 11b; `engine.Hunt.share`): the search time of a hunt is split
evenly among the boundaries still running, each round in turn, and every boundary of a
differential hunt gets its rounds, however short the budget: before, the first boundaries'
rounds (at least 0.5 s each, growing) spent a short budget and the last ones compared 0
examples. The report records per boundary the seconds allotted (`share_s`), spent and the
examples compared. No timing is asserted: only that every boundary ran and its share is recorded."""

from __future__ import annotations

from sentinel import hunt as H
from sentinel.hunt.driver.state import PropertyState
from sentinel.runner import TargetSpec

BOUNDARIES = ["kl", "loss_agg", "policy_loss", "advantages", "gae", "masked_reduce"]


def test_a_short_differential_hunt_gives_every_boundary_its_share(tmp_path):
    ref = TargetSpec("reference")
    rep = H.differential(ref, ref, BOUNDARIES, 0.5, 0, out_dir=tmp_path, shrink_time=5.0)
    props = {p.boundary: p for p in rep.hunt.properties}
    assert sorted(props) == sorted(BOUNDARIES)
    for b, p in props.items():
        assert p.examples > 0, (b, p.status, p.reason)  # each boundary compared examples
        assert p.rounds >= 1 and p.share_s > 0, (b, p.share_s)  # and its allotted seconds are recorded
    assert rep.hunt.findings == []  # the reference against itself
    assert rep.hunt.exit_reason == "time_budget"


def test_the_share_splits_what_is_left_among_those_waiting_their_turn():
    h = H.DiffHunter.__new__(H.DiffHunter)
    h.states = [PropertyState(H.Property(f"{b}.x", b, "x", "", {}, lambda ex: {})) for b in ("a", "b", "c", "d")]
    a, b, c, d = h.states
    assert h.share(a, 8.0) == 2.0  # four wait for this cycle's turn
    a.rounds = 1
    assert h.share(b, 6.0) == 2.0  # a had its turn and spent its share: three wait
    b.rounds, c.rounds = 1, 1
    assert h.share(d, 4.0) == 4.0  # the last of the cycle gets what the others left
    d.status = "finished"
    assert h.share(a, 3.0) == 1.0  # next cycle: three still running
    assert h.share(a, 3.0, lanes=3) == 3.0 and h.share(a, -1.0) == 0.0
