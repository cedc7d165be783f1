"""The reference as referee of a differential finding no invariant family explains
(sentinel/hunt/driver/referee.py): the side that agrees with the reference math on the same
input is right (`fixed` / `regressed`); `changed` only when neither agrees or the reference
cannot judge, and the finding says which."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sentinel import hunt as H
from sentinel.hunt.differences import Difference
from sentinel.hunt.driver.referee import rule
from sentinel.runner import TargetSpec
from sentinel.spec import load_file
from sentinel.strategies import Example
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS

HERE = Path(__file__).parent
REFERENCE = TargetSpec("reference")
TOY = TargetSpec("hunt_referee_adapter:ScaledKl")


@pytest.fixture(autouse=True)
def _toy_on_path():
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


@pytest.mark.parametrize("base, head, verdict", [(TOY, REFERENCE, "fixed"), (REFERENCE, TOY, "regressed")])
def test_a_difference_no_family_explains_is_judged_by_the_reference(tmp_path, base, head, verdict):
    # no family on `kl` tells 1.5 * k1 from k1: before the referee this was `changed`
    rep = H.differential(base, head, ["kl"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, first=True,
                         max_examples=200, **DIFFERENTIAL)
    f, = rep.hunt.findings
    assert f.base.violates == [] and f.head.violates == []  # no family explains it
    assert f.classification == verdict and f.judged_by == "reference", f
    agrees = "head" if verdict == "fixed" else "base"
    assert f.referee.startswith(f"{agrees} agrees with the reference") and "reference" in f.message
    assert f.reproduced is True  # the scenario pins the reference's values: compare says `verdict` again
    sc, = load_file(f.file)
    assert verdict in sc.tags


def _ex() -> Example:
    return Example("kl", {"kl_type": "k1"}, {"log_probs": np.array([[-0.5]], np.float32),
                                             "ref_log_probs": np.array([[-1.0]], np.float32),
                                             "loss_mask": np.array([[1.0]], np.float32)})


def _ans(kl: float) -> dict:
    return {"status": "ok", "outputs": {"kl": np.array([[kl]])}, "grads": {}, "inputs_after": {}}


DIFF = Difference("kl", [[0, 0]], [[0.75]], [[0.5]])


def test_the_rulings_and_why_the_reference_cannot_judge():
    ex = _ex()
    assert rule("kl", ex, DIFF, _ans(0.75), _ans(0.5), _ans(0.5), {}, 1e-5, 1e-4).verdict == "fixed"
    assert rule("kl", ex, DIFF, _ans(0.5), _ans(0.75), _ans(0.5), {}, 1e-5, 1e-4).verdict == "regressed"
    r = rule("kl", ex, DIFF, _ans(0.75), _ans(0.6), _ans(0.5), {}, 1e-5, 1e-4)
    assert (r.verdict, r.reason) == ("changed", "neither side agrees with the reference")
    r = rule("kl", ex, DIFF, _ans(0.75), _ans(0.5), {"status": "unsupported", "reason": "kl_type: none"}, {}, 1e-5, 1e-4)
    assert r.verdict == "changed" and r.reason.startswith("the reference has no such config")
    r = rule("kl", ex, DIFF, _ans(0.75), _ans(0.5), {"status": "ok", "outputs": {}, "grads": {}, "inputs_after": {}},
             {}, 1e-5, 1e-4)
    assert r.verdict == "changed" and r.reason == "the reference does not produce kl"
    dev = {"scaled": {"boundary": "kl", "observables": ["kl"], "when": {}, "reason": "r", "link": "l"}}
    r = rule("kl", ex, DIFF, _ans(0.75), _ans(0.5), _ans(0.5), dev, 1e-5, 1e-4)
    assert r.verdict == "changed" and "deviation 'scaled'" in r.reason
