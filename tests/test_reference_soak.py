"""The reference holds by construction: every family's properties hunted on it, and the
reference hunted against itself, find nothing. A finding here is a false one: a family that
claims more than the math gives (policy_loss.sequence_uniform once called GSPO's per-token
loss a bug where the advantages vary within a sequence), or a bug in the reference.

Bounded by example counts with fixed seeds (tests/untimed.py), so the outcome does not
depend on the machine's load; the ten-minute-per-boundary soak is
`python benchmarks/bench_reference_soak.py`.
"""

from __future__ import annotations

import pytest

from sentinel import hunt as H
from sentinel.boundaries import BOUNDARIES
from sentinel.runner import TargetSpec
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS, HUNT

REFERENCE = TargetSpec("reference")
SEED = 22


@pytest.mark.slow  # minutes: every property of every boundary
def test_every_property_holds_on_the_reference():
    rep = H.hunt(REFERENCE, max_examples=60, min_examples=60, seed=SEED, db=None, out_dir=None, jobs=2, **HUNT)
    h = rep.hunt
    assert [(f.property, f.message) for f in h.findings] == []
    assert {p.status for p in h.properties} == {"holds"}, [(p.property, p.status, p.reason) for p in h.properties
                                                           if p.status != "holds"]
    assert {p.boundary for p in h.properties} == set(BOUNDARIES) and len(h.properties) == len(H.PROPERTIES)
    assert rep.exit_code() == 0


@pytest.mark.slow  # minutes: both sides on every boundary
def test_the_reference_against_itself_differs_nowhere_on_any_boundary():
    rep = H.differential(REFERENCE, REFERENCE, None, DIFFERENTIAL_SECONDS, SEED, out_dir=None, max_examples=300,
                         **DIFFERENTIAL)
    h = rep.hunt
    assert [(f.property, f.message) for f in h.findings] == []
    assert h.differential.differing == 0 and rep.exit_code() == 0
    assert {p.boundary for p in h.properties} == set(BOUNDARIES)
    assert all(p.examples >= 300 for p in h.properties), [(p.property, p.examples, p.reason) for p in h.properties]
