"""The precision family (sentinel/invariants/precision.py): the loss path keeps fp32 accuracy
when the policy's log-probs arrive in bf16 or fp16.

It holds on the reference and turns `violated` on the plant `ratio-in-low-precision` (the
log-ratio taken in the log-probs' dtype, which rounds the fp32 old log-probs), in the catalog and
in the hunt; its runs hand the trainer exactly the dtypes they name; its bound is far above a
correct fp32 implementation's error; bad bodies are spec errors with file and line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import untimed
from sentinel import hunt as H
from sentinel.invariants import RunObservation
from sentinel.invariants.precision import gamma, off_grid
from sentinel.observe import observe
from sentinel.runner import TargetSpec, plan, run
from sentinel.spec import SpecError, load_file, load_text
from sentinel_adapters.reference.adapter import ReferenceAdapter

CATALOG = Path(__file__).resolve().parents[1] / "scenarios" / "policy" / "precision.yaml"
PLANT = "ratio-in-low-precision"


def _observe_all(sc, plant: str | None = None) -> dict[str, RunObservation]:
    ad = ReferenceAdapter(options={"plant": plant} if plant else {})
    ad.load()
    out = {}
    for r in plan(sc):
        o, _ = observe(ad, torch.device("cpu"), sc.boundary, r.inputs, r.config, r.grads, r.casts)
        out[r.name] = RunObservation(inputs=r.inputs, **{k: v for k, v in o.items() if k != "extras"})
    return out


def test_off_grid_keeps_signs_and_zeros_and_leaves_the_bf16_grid():
    a = np.array([[-1.375, -0.125, 0.0, 0.5, 2.0, -20.0]], np.float32)
    b = off_grid(a)
    assert np.array_equal(np.sign(a), np.sign(b)) and b[0, 2] == 0.0
    assert np.all(np.abs(b - a) <= np.abs(a) * 2.0 ** -5)
    rounded = torch.tensor(b).to(torch.bfloat16).float().numpy()
    assert (rounded != b).sum() >= 4  # on the grid a bf16 cast rounds nothing; off it, it does
    assert np.array_equal(off_grid(a), b)  # fixed, not random: both precision runs see the same values


def test_the_runs_hand_over_the_dtypes_they_name():
    (sc,) = load_file(CATALOG)
    runs = {r.name: r for r in plan(sc)}
    low, wide = "precision:bfloat16:log_probs", "precision:bfloat16:log_probs:float64"
    assert runs[low].casts == {"log_probs": ["bfloat16"]}
    assert runs[wide].casts == {"log_probs": ["bfloat16", "float64"], "old_log_probs": ["float64"],
                                "advantages": ["float64"]}
    assert np.array_equal(runs[low].inputs["log_probs"], runs[wide].inputs["log_probs"])

    seen = {}

    class Spy(ReferenceAdapter):
        def call(self, boundary, inputs, config):
            seen[len(seen)] = {n: t.dtype for n, t in inputs.items()}
            return super().call(boundary, inputs, config)

    ad = Spy()
    ad.load()
    for name in (low, wide):
        r = runs[name]
        observe(ad, torch.device("cpu"), sc.boundary, r.inputs, r.config, r.grads, r.casts)
    assert seen[0]["log_probs"] == torch.bfloat16 and seen[0]["old_log_probs"] == torch.float32
    assert seen[1]["log_probs"] == seen[1]["old_log_probs"] == seen[1]["advantages"] == torch.float64


def test_the_bound_sits_far_above_a_correct_fp32_error_and_below_the_plant():
    (sc,) = load_file(CATALOG)
    good, bad = _observe_all(sc), _observe_all(sc, PLANT)
    for inv in sc.invariants:
        low, wide = inv.runs_named
        b = inv.bound(sc, good[low].inputs, good[wide].outputs["loss"], None)
        err_good = abs(float(good[low].outputs["loss"] - good[wide].outputs["loss"]))
        err_bad = abs(float(bad[low].outputs["loss"] - bad[wide].outputs["loss"]))
        print(f"{inv.dtype}: correct error {err_good:.3g}, bound {b:.3g}, planted error {err_bad:.3g}")
        assert err_good < b / 100 and err_bad > b
        assert inv.evaluate(good, sc).verdict == "held"
        assert inv.evaluate(bad, sc).verdict == "violated"
    assert gamma(16, 2.0 ** -24) == pytest.approx(16 * 2.0 ** -24, rel=1e-6)


def test_catalog_holds_on_the_reference_and_is_violated_on_the_plant():
    scenarios = load_file(CATALOG)
    report = run(scenarios, [TargetSpec("reference"), TargetSpec("reference", plant=PLANT)])
    by = {r.target: r for r in report.results}
    assert by["reference"].verdict == "holds"
    planted = by[TargetSpec("reference", plant=PLANT).key]
    assert planted.verdict == "violated"
    assert {i.family for i in planted.invariants if i.verdict == "violated"} == {"precision"}
    assert "exceeds the float32 bound" in planted.reason


def test_the_plant_changes_nothing_in_fp32():
    """The planted bug is a precision bug only: the rest of the policy catalog holds on it."""
    scenarios = [s for s in load_file(CATALOG.parent / "ppo-clip.yaml")]
    report = run(scenarios, [TargetSpec("reference", plant=PLANT)])
    assert all(r.verdict == "holds" for r in report.results), [(r.id, r.reason) for r in report.results]


@pytest.mark.slow  # two hunts; the plant's run stays in the default set
def test_hunt_finds_the_plant_and_nothing_on_the_reference(tmp_path):
    props = ["policy_loss.precision.bf16", "policy_loss.precision.fp16"]
    kw = {**untimed.HUNT, "max_examples": 80, "names": props}
    bad = H.hunt(TargetSpec("reference", plant=PLANT), seed=0, db=None, out_dir=tmp_path / "bad", **kw)
    assert bad.hunt.findings and {f.family for f in bad.hunt.findings} == {"precision"}
    assert all(f.reproduced is True for f in bad.hunt.findings)
    good = H.hunt(TargetSpec("reference"), seed=0, db=None, out_dir=tmp_path / "good", **kw)
    assert not good.hunt.findings and all(p.status == "holds" for p in good.hunt.properties)


BODY = """\
id: p
title: t
boundary: policy_loss
inputs:
  log_probs: [[-1.0, -2.0]]
  old_log_probs: [[-1.1, -2.1]]
  advantages: [[1.0, -1.0]]
  loss_mask: [[1, 1]]
invariants:
  - precision: {body}
"""


@pytest.mark.parametrize("body, words", [
    ("{dtype: bfloat16, cast: [logprobs]}", "no input 'logprobs'"),
    ("{dtype: bfloat16, cast: [loss_mask]}", "not a float tensor"),
    ("{dtype: bfloat16, cast: []}", "at least one float input"),
    ("{dtype: int8, cast: [log_probs]}", "bfloat16"),
    ("{dtype: float16, cast: [log_probs], ops: 0}", "at least one operation"),
    ("{dtype: float16, cast: [log_probs], observables: ['grad:loss/log_probs']}", "not compared across"),
])
def test_bad_bodies_are_spec_errors_with_file_and_line(tmp_path, body, words):
    path = tmp_path / "p.yaml"
    path.write_text(BODY.format(body=body))
    with pytest.raises(SpecError) as e:
        load_file(path)
    assert "p.yaml:10" in str(e.value) and words in str(e.value)


def test_a_valid_body_loads():
    (sc,) = load_text(BODY.format(body="{dtype: float16, cast: [log_probs, old_log_probs]}"))
    assert sc.invariants[0].family == "precision"
