"""Each invariant family on hand-made observations (numpy only: no worker, no torch):
a held case, a violated case with positions / observed / expected / difference, and a
skipped case where the target did not produce what the check needs. One test runs the
reference in a worker: outputs are compared in their own dtype."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from sentinel.expr import ExprError
from sentinel.invariants import REGISTRY, RunObservation
from sentinel.invariants.base import Missing, compare, evaluate_expected, resolve
from sentinel.spec import load_text

f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731


def scenario(boundary: str, inputs: str, invariant: str, extra: str = ""):
    (sc,) = load_text(f"id: s\ntitle: t\nboundary: {boundary}\ninputs:\n{inputs}{extra}invariants:\n  - {invariant}\n")
    return sc, sc.invariants[0]


def obs(sc_or_inputs, **outputs) -> RunObservation:
    inputs = sc_or_inputs if isinstance(sc_or_inputs, dict) else sc_or_inputs.inputs
    return RunObservation(inputs=dict(inputs), outputs={k: np.asarray(v) for k, v in outputs.items()})


def test_registry_names_every_family_by_its_yaml_key():
    assert set(REGISTRY) == {"equals", "close", "masked_invariance", "finite", "padding_invariant",
                             "sequence_uniform", "permutation_equivariant", "group_isolation", "unmutated",
                             "gradient", "detached", "agree", "unchanged_under", "precision",
                             "straight_through", "batching_invariant"}
    for key, cls in REGISTRY.items():
        assert cls.family == key and cls.__doc__


# --- shared machinery ----------------------------------------------------------------------

def test_compare_is_nan_and_inf_aware_and_reports_positions():
    ok, diff, pos = compare(np.array([[1.0, np.nan, np.inf]]), np.array([[1.0, np.nan, np.inf]]))
    assert ok and pos == []
    ok, diff, pos = compare(np.array([[1.0, 2.0, np.nan]]), np.array([[1.0, 2.5, 0.0]]))
    assert not ok and pos == [[0, 1], [0, 2]]
    assert diff[0, 1] == -0.5
    ok, _, pos = compare(np.array([1.0, 5.0]), np.array([1.0, 0.0]), where=np.array([1, 0]))
    assert ok and pos == []
    ok, _, _ = compare(np.array([1.0, 1.05]), np.array([1.0, 1.0]), atol=0.1)
    assert ok


def test_resolve_outputs_gradients_and_inputs_after():
    o = RunObservation(inputs={"x": f32([1, 2])}, outputs={"y": f32([3])}, grads={"y/x": f32([4, 5]), "z/x": None},
                       inputs_after={"x": f32([9, 9])})
    assert resolve("y", o).tolist() == [3]
    assert resolve("grad:y/x", o).tolist() == [4, 5]
    assert resolve("grad:z/x", o).tolist() == [0, 0]  # no path: a zero gradient
    assert resolve("input:x", o).tolist() == [9, 9]
    with pytest.raises(Missing):
        resolve("w", o)
    with pytest.raises(Missing):
        resolve("grad:w/x", o)


def test_expressions_see_inputs_outputs_and_numpy():
    o = obs({"log_probs": f32([[0.0, -1.0]]), "ref": f32([[-1.0, -1.0]])}, kl=f32([[1.0, 0.0]]))
    np.testing.assert_allclose(evaluate_expected("log_probs - ref", o), [[1.0, 0.0]])
    np.testing.assert_allclose(evaluate_expected("exp(log_probs) * kl + sum(kl)", o), [[2.0, 1.0]])
    np.testing.assert_allclose(evaluate_expected("clip(kl, 0.2, 0.5)", o), [[0.5, 0.2]])
    np.testing.assert_allclose(evaluate_expected([[1, 2]], o), [[1.0, 2.0]])
    assert evaluate_expected(0.5, o) == 0.5


def test_expressions_have_no_builtins():
    o = obs({"x": f32([1.0])})
    with pytest.raises(ExprError, match="__import__"):
        evaluate_expected("__import__('os').getcwd()", o)
    with pytest.raises(ExprError, match="open"):
        evaluate_expected("open('/etc/passwd')", o)


# --- equals / close ----------------------------------------------------------------------

OPSM_INPUTS = """\
  log_probs:     [[0.0, 0.0, 0.0]]
  old_log_probs: [[1.0, 1.0, 1.0]]
  advantages:    [[-0.5, 0.25, -0.25]]
  loss_mask:     [[1, 1, 1]]
"""


def test_equals_held_and_violated_with_positions():
    sc, inv = scenario("opsm_mask", OPSM_INPUTS, "equals: {output: opsm_mask, expected: [[0, 0, 0]]}")
    assert inv.evaluate({"base": obs(sc, opsm_mask=f32([[0, 0, 0]]))}, sc).verdict == "held"
    out = inv.evaluate({"base": obs(sc, opsm_mask=f32([[0, 1, 0]]))}, sc)
    assert out.verdict == "violated"
    assert out.observed == [[0.0, 1.0, 0.0]] and out.expected == [[0.0, 0.0, 0.0]]
    assert out.difference == [[0.0, 1.0, 0.0]] and out.positions == [[0, 1]]
    assert "1 position" in out.message


def test_equals_is_exact():
    sc, inv = scenario("opsm_mask", OPSM_INPUTS, "equals: {output: opsm_clipfrac, expected: 1.0}")
    assert inv.evaluate({"base": obs(sc, opsm_clipfrac=np.float32(1.0))}, sc).verdict == "held"
    assert inv.evaluate({"base": obs(sc, opsm_clipfrac=np.float32(0.9999999))}, sc).verdict == "violated"


def test_close_on_a_scalar_within_and_beyond_tolerance():
    sc, inv = scenario("opsm_mask", OPSM_INPUTS, "close: {output: reduced_policy_loss, expected: 0.0, atol: 1.0e-7}")
    assert inv.evaluate({"base": obs(sc, reduced_policy_loss=np.float32(5e-8))}, sc).verdict == "held"
    out = inv.evaluate({"base": obs(sc, reduced_policy_loss=np.float32(-0.030656620860099792))}, sc)
    assert out.verdict == "violated"
    assert out.observed == pytest.approx(-0.030656620860099792) and out.expected == 0.0
    assert out.difference == pytest.approx(-0.030656620860099792)


KL_INPUTS = """\
  log_probs:     [[-0.5, -1.0, -0.2]]
  ref_log_probs: [[-0.6, -0.8, -0.4]]
  loss_mask:     [[1, 1, 0]]
"""


def test_close_with_an_expression_and_where():
    sc, inv = scenario("kl", KL_INPUTS, 'close: {output: kl, expected: "log_probs - ref_log_probs", where: loss_mask}')
    good = sc.inputs["log_probs"] - sc.inputs["ref_log_probs"]
    held = inv.evaluate({"base": obs(sc, kl=np.where(sc.inputs["loss_mask"] > 0, good, 123.0))}, sc)
    assert held.verdict == "held"  # the masked position may hold anything
    bad = good.copy()
    bad[0, 1] += 0.5
    out = inv.evaluate({"base": obs(sc, kl=bad)}, sc)
    assert out.verdict == "violated" and out.positions == [[0, 1]]
    assert out.difference[0][1] == pytest.approx(0.5)
    np.testing.assert_allclose(out.expected, good, rtol=1e-6)


def test_close_skipped_when_the_output_or_an_expression_name_is_missing():
    sc, inv = scenario("kl", KL_INPUTS, 'close: {output: kl, expected: "log_probs - ref_log_probs"}')
    out = inv.evaluate({"base": obs(sc)}, sc)
    assert out.verdict == "skipped" and "'kl'" in out.message
    # an expression over an output this target did not produce
    sc, inv = scenario("opsm_mask", OPSM_INPUTS, 'close: {output: opsm_mask, expected: "pg_loss * 0"}')
    out = inv.evaluate({"base": obs(sc, opsm_mask=f32([[0, 0, 0]]))}, sc)
    assert out.verdict == "skipped" and "pg_loss" in out.message


def test_close_shape_mismatch_is_a_violation():
    """An expected literal of the wrong shape is refused at load (tests/corpus/malformed); a
    target output of the wrong shape is the target's violation."""
    sc, inv = scenario("kl", KL_INPUTS, "close: {output: kl, expected: [[1.0, 2.0, 3.0]]}")
    out = inv.evaluate({"base": obs(sc, kl=f32([[1, 2]]))}, sc)
    assert out.verdict == "violated" and "shape" in out.message


def test_close_nan_equals_nan_and_nan_is_not_a_number():
    sc, inv = scenario("kl", KL_INPUTS, "close: {output: kl, expected: [[.nan, 1.0, .inf]]}")
    assert inv.evaluate({"base": obs(sc, kl=f32([[math.nan, 1.0, math.inf]]))}, sc).verdict == "held"
    out = inv.evaluate({"base": obs(sc, kl=f32([[0.0, 1.0, -math.inf]]))}, sc)
    assert out.verdict == "violated" and out.positions == [[0, 0], [0, 2]]


def test_close_on_a_variant_run():
    sc, inv = scenario("kl", KL_INPUTS, "close: {output: kl, expected: 0.0, run: same}",
                       extra="variants:\n  same: {inputs: {ref_log_probs: [[-0.5, -1.0, -0.2]]}}\n")
    runs = {"base": obs(sc, kl=f32([[0.1, -0.2, 0.0]])), "same": obs(sc.variants["same"][0], kl=f32([[0, 0, 0]]))}
    assert inv.evaluate(runs, sc).verdict == "held"


def test_close_on_a_gradient_asks_the_worker_for_it():
    sc, inv = scenario("kl", KL_INPUTS, "close: {output: grad:kl/log_probs, expected: 1.0}")
    assert inv.grads(sc) == [("kl", "log_probs")]
    o = obs(sc, kl=f32([[0, 0, 0]]))
    o.grads["kl/log_probs"] = f32([[1, 1, 1]])
    assert inv.evaluate({"base": o}, sc).verdict == "held"


# --- sequence_uniform ------------------------------------------------------------------------

def test_sequence_uniform_violated_names_the_offending_token():
    sc, inv = scenario("opsm_mask", OPSM_INPUTS, "sequence_uniform: {output: opsm_mask}")
    out = inv.evaluate({"base": obs(sc, opsm_mask=f32([[0, 1, 0]]))}, sc)
    assert out.verdict == "violated"
    assert out.positions == [[0, 1]]
    assert out.observed == [[0.0, 1.0, 0.0]] and out.expected == [[0.0, 0.0, 0.0]]
    assert out.difference == [[0.0, 1.0, 0.0]]


def test_sequence_uniform_held_and_ignores_masked_tokens():
    inputs = OPSM_INPUTS.replace("[[0.0, 0.0, 0.0]]", "[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]", 1)
    inputs = inputs.replace("[[1.0, 1.0, 1.0]]", "[[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]")
    inputs = inputs.replace("[[-0.5, 0.25, -0.25]]", "[[-0.5, 0.25, -0.25], [1.0, 1.0, 1.0]]")
    inputs = inputs.replace("[[1, 1, 1]]", "[[1, 1, 1], [1, 1, 0]]")
    sc, inv = scenario("opsm_mask", inputs, "sequence_uniform: {output: opsm_mask}")
    assert inv.evaluate({"base": obs(sc, opsm_mask=f32([[0, 0, 0], [1, 1, 0]]))}, sc).verdict == "held"
    out = inv.evaluate({"base": obs(sc, opsm_mask=f32([[0, 0, 0], [1, 0, 0]]))}, sc)
    assert out.verdict == "violated"
    assert out.positions == [[1, 0]]  # a tie: the sequence's decision is the smaller value, 0


def test_sequence_uniform_claims_nothing_where_a_per_sequence_input_varies():
    """GSPO's loss is one value per sequence only where the advantage is: with per_sequence
    [advantages], a row whose valid tokens carry different advantages is outside the claim
    (a load error), while masked positions may hold anything."""
    inputs = ("  log_probs: [[-1.0, -0.5, -0.25]]\n  old_log_probs: [[-1.0, -0.5, -0.25]]\n"
              "  loss_mask: [[0, 1, 1]]\n  advantages: [[{a}]]\n")
    body = "sequence_uniform: {output: pg_loss, per_sequence: [advantages]}"
    sc, inv = scenario("policy_loss", inputs.format(a="3.0, 0.5, 0.5"), body)  # one advantage over valid tokens
    assert inv.evaluate({"base": obs(sc, pg_loss=f32([[0.0, -0.5, -0.5]]))}, sc).verdict == "held"
    with pytest.raises(Exception, match=r"per_sequence.*advantages varies within the valid tokens of row\(s\) \[0\]"):
        scenario("policy_loss", inputs.format(a="0.0, 0.5, -0.5"), body)


def test_sequence_uniform_skipped_without_the_output():
    sc, inv = scenario("opsm_mask", OPSM_INPUTS, "sequence_uniform: {output: opsm_mask}")
    assert inv.evaluate({"base": obs(sc)}, sc).verdict == "skipped"


# --- masked_invariance / finite / padding_invariant ------------------------------------------

GSPO_INPUTS = """\
  log_probs:     [[-0.5, -1.0, 0.0], [-0.3, -0.7, -0.1]]
  old_log_probs: [[-0.6, -0.8, 0.0], [-0.2, -0.9, -0.1]]
  loss_mask:     [[1, 1, 0], [1, 1, 1]]
"""


def seq_kl(inputs, over_padding=False):
    m = inputs["loss_mask"].astype(bool)
    with np.errstate(invalid="ignore"):
        d = inputs["old_log_probs"].astype(np.float64) - inputs["log_probs"]
        mean = d.mean(-1) if over_padding else np.where(m, d, 0).sum(-1) / m.sum(-1)
    return np.repeat(mean[:, None], d.shape[1], axis=1).astype(np.float32)


def test_masked_invariance_perturbs_only_masked_positions_of_its_mask():
    sc, inv = scenario("gspo_kl", GSPO_INPUTS, "masked_invariance: {}")
    ((name, (inputs, cfg)),) = inv.runs(sc).items()
    assert name == "~masked:loss_mask" and cfg == {}
    m = sc.inputs["loss_mask"].astype(bool)
    for k in ("log_probs", "old_log_probs"):
        np.testing.assert_array_equal(inputs[k][m], sc.inputs[k][m])
        assert (inputs[k][~m] != sc.inputs[k][~m]).all()
    assert not np.array_equal(inputs["log_probs"] - inputs["old_log_probs"],
                              sc.inputs["log_probs"] - sc.inputs["old_log_probs"])
    np.testing.assert_array_equal(inputs["loss_mask"], sc.inputs["loss_mask"])


def test_masked_invariance_held_and_violated():
    sc, inv = scenario("gspo_kl", GSPO_INPUTS, "masked_invariance: {}")
    (perturbed,) = (i for i, _ in inv.runs(sc).values())
    good = {"base": obs(sc, seq_kl=seq_kl(sc.inputs)), "~masked:loss_mask": obs(perturbed, seq_kl=seq_kl(perturbed))}
    out = inv.evaluate(good, sc)
    assert out.verdict == "held" and out.details["compared"] == ["seq_kl"]
    bad = {"base": obs(sc, seq_kl=seq_kl(sc.inputs, True)),
           "~masked:loss_mask": obs(perturbed, seq_kl=seq_kl(perturbed, True))}
    out = inv.evaluate(bad, sc)
    assert out.verdict == "violated"
    assert out.positions == [[0, 0], [0, 1]]  # row 0's valid tokens; its masked token does not count
    assert out.details == {"observable": "seq_kl", "observed_as": "variant run", "expected_as": "base run"}
    assert np.asarray(out.difference)[0, 0] != 0 and np.asarray(out.difference)[1].tolist() == [0, 0, 0]


def test_masked_invariance_skipped_when_nothing_was_observed():
    sc, inv = scenario("gspo_kl", GSPO_INPUTS, "masked_invariance: {}")
    (perturbed,) = (i for i, _ in inv.runs(sc).values())
    assert inv.evaluate({"base": obs(sc), "~masked:loss_mask": obs(perturbed)}, sc).verdict == "skipped"


def test_finite_poisons_masked_positions_with_each_value():
    sc, inv = scenario("gspo_kl", GSPO_INPUTS, "finite: {}")
    runs = inv.runs(sc)
    assert set(runs) == {"~poison:nan", "~poison:inf", "~poison:-inf"}
    lp = runs["~poison:-inf"][0]["log_probs"]
    assert lp[0, 2] == -math.inf and np.isfinite(lp[1]).all()


def test_finite_held_and_violated():
    sc, inv = scenario("gspo_kl", GSPO_INPUTS, "finite: {}")
    runs = inv.runs(sc)
    good = {n: obs(i, seq_kl=np.where(i["loss_mask"] > 0, 0.1, np.nan)) for n, (i, _) in runs.items()}
    assert inv.evaluate(good, sc).verdict == "held"  # non-finite only at masked positions
    bad = {n: obs(i, seq_kl=seq_kl(i, over_padding=True)) for n, (i, _) in runs.items()}
    out = inv.evaluate(bad, sc)
    assert out.verdict == "violated"
    assert out.details == {"poison": "nan", "observable": "seq_kl"}
    assert out.positions == [[0, 0], [0, 1]]
    assert out.expected == "finite"


def test_padding_invariant_appends_masked_columns():
    sc, inv = scenario("gspo_kl", GSPO_INPUTS, "padding_invariant: {width: 2}")
    ((name, (padded, _)),) = inv.runs(sc).items()
    assert name == "~padded"
    assert padded["log_probs"].shape == (2, 5)
    np.testing.assert_array_equal(padded["loss_mask"][:, 3:], 0)
    np.testing.assert_array_equal(padded["log_probs"][:, 3:], 3.0)


def test_padding_invariant_held_and_violated():
    sc, inv = scenario("gspo_kl", GSPO_INPUTS, "padding_invariant: {}")
    (padded,) = (i for i, _ in inv.runs(sc).values())
    good = {"base": obs(sc, seq_kl=seq_kl(sc.inputs)), "~padded": obs(padded, seq_kl=seq_kl(padded))}
    assert inv.evaluate(good, sc).verdict == "held"
    bad = {"base": obs(sc, seq_kl=seq_kl(sc.inputs, True)), "~padded": obs(padded, seq_kl=seq_kl(padded, True))}
    out = inv.evaluate(bad, sc)
    assert out.verdict == "violated"
    assert [1, 0] in out.positions and [0, 0] in out.positions
    assert all(p[1] < 3 for p in out.positions)


def test_padding_invariant_on_a_scalar_output():
    sc, inv = scenario("loss_agg", "  values: [[1.0, 2.0, 3.0]]\n  loss_mask: [[1, 1, 0]]\n", "padding_invariant: {}")
    (padded,) = (i for i, _ in inv.runs(sc).values())
    assert inv.evaluate({"base": obs(sc, loss=np.float32(1.5)), "~padded": obs(padded, loss=np.float32(1.5))},
                        sc).verdict == "held"
    out = inv.evaluate({"base": obs(sc, loss=np.float32(1.0)), "~padded": obs(padded, loss=np.float32(0.6))}, sc)
    assert out.verdict == "violated"
    assert out.observed == pytest.approx(0.6) and out.expected == pytest.approx(1.0)
    assert out.difference == pytest.approx(-0.4)


# --- permutation_equivariant / group_isolation ---------------------------------------------

RN_INPUTS = """\
  rewards: [1.0, 3.0, 10.0, 20.0, 30.0]
  group:   [0, 0, 1, 1, 1]
"""


def group_norm(inputs, per_group=True):
    r, g = inputs["rewards"].astype(np.float64), inputs["group"]
    out = np.zeros_like(r)
    for k in np.unique(g):
        sel = (g == k) if per_group else np.ones_like(g, bool)
        out[g == k] = r[g == k] - r[sel].mean()
    return out.astype(np.float32)


def test_permutation_equivariant_reverses_rows_by_default():
    sc, inv = scenario("reward_norm", RN_INPUTS, "permutation_equivariant: {}")
    ((name, (perm, _)),) = inv.runs(sc).items()
    assert name == "~permuted"
    assert perm["rewards"].tolist() == [30.0, 20.0, 10.0, 3.0, 1.0] and perm["group"].tolist() == [1, 1, 1, 0, 0]


def test_permutation_equivariant_held_and_violated():
    sc, inv = scenario("reward_norm", RN_INPUTS, "permutation_equivariant: {perm: [1, 0, 2, 4, 3]}")
    (perm,) = (i for i, _ in inv.runs(sc).values())
    good = {"base": obs(sc, rewards=group_norm(sc.inputs)), "~permuted": obs(perm, rewards=group_norm(perm))}
    assert inv.evaluate(good, sc).verdict == "held"
    # an order-dependent target: the output is the row index, whatever the rewards
    bad = {"base": obs(sc, rewards=f32([0, 1, 2, 3, 4])), "~permuted": obs(perm, rewards=f32([0, 1, 2, 3, 4]))}
    out = inv.evaluate(bad, sc)
    assert out.verdict == "violated"
    assert out.positions == [[0], [1], [3], [4]]
    assert out.observed == [1.0, 0.0, 2.0, 4.0, 3.0] and out.expected == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_group_isolation_perturbs_only_the_first_rows_group():
    sc, inv = scenario("reward_norm", RN_INPUTS, "group_isolation: {output: rewards, mask: null}")
    (new,) = (i for i, _ in inv.runs(sc).values())
    assert (new["rewards"][:2] != sc.inputs["rewards"][:2]).all()
    np.testing.assert_array_equal(new["rewards"][2:], sc.inputs["rewards"][2:])


def test_group_isolation_held_and_violated():
    sc, inv = scenario("reward_norm", RN_INPUTS, "group_isolation: {output: rewards, mask: null}")
    (new,) = (i for i, _ in inv.runs(sc).values())
    good = {"base": obs(sc, rewards=group_norm(sc.inputs)), "~group": obs(new, rewards=group_norm(new))}
    assert inv.evaluate(good, sc).verdict == "held"
    bad = {"base": obs(sc, rewards=group_norm(sc.inputs, False)), "~group": obs(new, rewards=group_norm(new, False))}
    out = inv.evaluate(bad, sc)
    assert out.verdict == "violated"
    assert out.positions == [[2], [3], [4]]  # only the other group's rows are judged
    assert "group 0" in out.message


# --- unmutated ---------------------------------------------------------------------------

def test_unmutated_held_and_violated_names_run_and_input():
    sc, inv = scenario("kl", KL_INPUTS, "unmutated: {}")
    o = obs(sc, kl=f32([[0, 0, 0]]))
    o.inputs_after = {k: v.copy() for k, v in sc.inputs.items()}
    assert inv.evaluate({"base": o}, sc).verdict == "held"
    o.inputs_after["ref_log_probs"] = sc.inputs["log_probs"] - sc.inputs["ref_log_probs"]
    out = inv.evaluate({"base": obs(sc), "other": o}, sc)
    assert out.verdict == "violated"
    assert out.details == {"run": "other", "input": "ref_log_probs"}
    assert out.positions == [[0, 0], [0, 1], [0, 2]]
    np.testing.assert_allclose(out.expected, sc.inputs["ref_log_probs"])
    np.testing.assert_allclose(out.difference, np.asarray(out.observed) - np.asarray(out.expected))


def test_unmutated_only_checks_the_inputs_it_names():
    sc, inv = scenario("kl", KL_INPUTS, "unmutated: {inputs: [log_probs]}")
    o = obs(sc)
    o.inputs_after = {"log_probs": sc.inputs["log_probs"].copy(), "ref_log_probs": sc.inputs["ref_log_probs"] + 1}
    assert inv.evaluate({"base": o}, sc).verdict == "held"


# --- gradient / detached -----------------------------------------------------------------

IS_INPUTS = """\
  log_probs:         [[-1.0, -0.5, -2.0, -0.7]]
  old_log_probs:     [[-1.0, -0.5, -2.0, -0.7]]
  rollout_log_probs: [[-1.1, -0.2, -2.5, -0.7]]
  advantages:        [[1.0, -0.5, 2.0, 0.3]]
  loss_mask:         [[1, 1, 1, 0]]
"""
GRAD_EXPR = '"-weights * advantages * loss_mask / sum(loss_mask)"'


def is_obs(sc, grad, requires_grad=False, weight_grad=None):
    w = np.clip(np.exp(sc.inputs["log_probs"] - sc.inputs["rollout_log_probs"]), 0.8, 1.2) * sc.inputs["loss_mask"]
    o = obs(sc, weights=w.astype(np.float32), loss=np.float32(0.0))
    o.requires_grad = {"weights": requires_grad, "loss": True}
    o.grads = {"loss/log_probs": grad, "weights/log_probs": weight_grad}
    return o, w


def test_gradient_held_and_violated():
    sc, inv = scenario("is_correction", IS_INPUTS, f"gradient: {{of: loss, wrt: log_probs, expected: {GRAD_EXPR}}}")
    assert inv.grads(sc) == [("loss", "log_probs")]
    o, w = is_obs(sc, None)
    right = (-w * sc.inputs["advantages"] * sc.inputs["loss_mask"] / 3).astype(np.float32)
    o.grads["loss/log_probs"] = right
    assert inv.evaluate({"base": o}, sc).verdict == "held"
    wrong = right.copy()
    wrong[0, 2] *= 2
    o.grads["loss/log_probs"] = wrong
    out = inv.evaluate({"base": o}, sc)
    assert out.verdict == "violated" and out.positions == [[0, 2]]
    assert out.difference[0][2] == pytest.approx(right[0, 2])


def test_gradient_without_a_path_is_a_violation_and_unobserved_is_skipped():
    sc, inv = scenario("is_correction", IS_INPUTS, f"gradient: {{of: loss, wrt: log_probs, expected: {GRAD_EXPR}}}")
    o, _ = is_obs(sc, None)
    out = inv.evaluate({"base": o}, sc)
    assert out.verdict == "violated" and "no gradient path" in out.message
    del o.grads["loss/log_probs"]
    assert inv.evaluate({"base": o}, sc).verdict == "skipped"


def test_detached_held_and_violated():
    sc, inv = scenario("is_correction", IS_INPUTS, "detached: {output: weights}")
    assert inv.grads(sc) == [("weights", "log_probs")]  # the boundary's first grad input by default
    o, _ = is_obs(sc, None)
    out = inv.evaluate({"base": o}, sc)
    assert out.verdict == "held" and out.details == {"requires_grad": False}
    leak = f32([[0.9, 0.0, 1.1, 0.0]])
    o, _ = is_obs(sc, None, requires_grad=True, weight_grad=leak)
    out = inv.evaluate({"base": o}, sc)
    assert out.verdict == "violated"
    assert out.positions == [[0, 0], [0, 2]]
    assert out.details == {"requires_grad": True}
    assert out.difference == leak.tolist()


def test_detached_violated_by_requires_grad_alone_and_skipped_without_output():
    sc, inv = scenario("is_correction", IS_INPUTS, "detached: {output: weights}")
    o, _ = is_obs(sc, None, requires_grad=True)
    out = inv.evaluate({"base": o}, sc)
    assert out.verdict == "violated" and out.observed == "requires_grad"
    assert inv.evaluate({"base": obs(sc)}, sc).verdict == "skipped"


# --- agree / unchanged_under ----------------------------------------------------------------

def test_agree_held_and_violated():
    sc, inv = scenario("is_correction", IS_INPUTS,
                       'agree: {between: [base, tis], observables: [weights, "grad:loss/log_probs"]}',
                       extra="variants:\n  tis: {config: {method: vanilla_tis}}\n")
    assert inv.grads(sc) == [("loss", "log_probs")]
    g = f32([[0.1, 0.2, 0.3, 0.0]])
    a, _ = is_obs(sc, g)
    b, _ = is_obs(sc, g.copy())
    assert inv.evaluate({"base": a, "tis": b}, sc).verdict == "held"
    b.grads["loss/log_probs"] = f32([[0.1, 0.2, 0.3, 5.0]])  # differs only where loss_mask == 0
    assert inv.evaluate({"base": a, "tis": b}, sc).verdict == "held"
    b.grads["loss/log_probs"] = f32([[0.1, 0.25, 0.3, 0.0]])
    out = inv.evaluate({"base": a, "tis": b}, sc)
    assert out.verdict == "violated" and out.positions == [[0, 1]]
    assert out.details == {"observable": "grad:loss/log_probs", "observed_as": "variant run", "expected_as": "base run"}
    assert "'base' and 'tis'" in out.message


NO_EOS_INPUTS = """\
  attention_mask: [[1, 1, 0], [1, 1, 1]]
  loss_mask:      [[0, 1, 0], [0, 1, 1]]
  rewards:        [1.0, 1.0]
"""


def test_unchanged_under_judges_only_the_selected_rows():
    sc, inv = scenario("advantages", NO_EOS_INPUTS, "unchanged_under: {variant: outlier, output: advantages, rows: has_eos}",
                       extra="variants:\n  outlier: {inputs: {rewards: [1.0, 100.0]}}\n")
    base = obs(sc, advantages=f32([[0, 0, 0], [0, 0, 0]]))
    moved_no_eos = obs(sc.variants["outlier"][0], advantages=f32([[0, 0, 0], [0, 5, 5]]))
    assert inv.evaluate({"base": base, "outlier": moved_no_eos}, sc).verdict == "held"
    moved_valid = obs(sc.variants["outlier"][0], advantages=f32([[0, -49.5, 0], [0, 0, 0]]))
    out = inv.evaluate({"base": base, "outlier": moved_valid}, sc)
    assert out.verdict == "violated"
    assert out.positions == [[0, 1]]
    assert out.difference == [[0.0, -49.5, 0.0], [0.0, 0.0, 0.0]]
    assert out.observed[0][1] == -49.5 and out.expected[0][1] == 0.0
    # masked tokens of the selected row do not count either
    masked_only = obs(sc.variants["outlier"][0], advantages=f32([[7, 0, 7], [0, 0, 0]]))
    assert inv.evaluate({"base": base, "outlier": masked_only}, sc).verdict == "held"


def test_unchanged_under_row_lists_and_no_eos():
    extra = "variants:\n  outlier: {inputs: {rewards: [1.0, 100.0]}}\n"
    base_adv = f32([[0, 0, 0], [0, 0, 0]])
    moved = f32([[0, 0, 0], [0, 5, 0]])
    for rows, verdict in (("[0]", "held"), ("[1]", "violated"), ("no_eos", "violated"), ("all", "violated")):
        sc, inv = scenario("advantages", NO_EOS_INPUTS,
                           f"unchanged_under: {{variant: outlier, output: advantages, rows: {rows}}}", extra=extra)
        out = inv.evaluate({"base": obs(sc, advantages=base_adv), "outlier": obs(sc, advantages=moved)}, sc)
        assert out.verdict == verdict, rows


def test_unchanged_under_skipped_without_the_output():
    sc, inv = scenario("advantages", NO_EOS_INPUTS, "unchanged_under: {variant: outlier, output: advantages}",
                       extra="variants:\n  outlier: {inputs: {rewards: [1.0, 100.0]}}\n")
    out = inv.evaluate({"base": obs(sc), "outlier": obs(sc)}, sc)
    assert out.verdict == "skipped" and "advantages" in out.message


def test_summary_is_the_invariant_as_written():
    _, inv = scenario("advantages", NO_EOS_INPUTS, "unchanged_under: {variant: outlier, output: advantages, rows: has_eos}",
                      extra="variants:\n  outlier: {inputs: {rewards: [1.0, 100.0]}}\n")
    assert inv.summary() == {"unchanged_under": {"variant": "outlier", "output": "advantages", "rows": "has_eos"}}


# --- outputs are compared in their own dtype ------------------------------------------------

F64_KL = textwrap.dedent("""\
    id: kl-f64
    title: a float64 KL is compared in float64
    boundary: kl
    inputs:
      log_probs:     {values: [[1.0000000001, -0.5]], dtype: float64}
      ref_log_probs: {values: [[0.0, -0.5]], dtype: float64}
      loss_mask:     [[1, 1]]
    invariants:
      - equals: {output: kl, expected: [[1.0, 0.0]]}
      - close: {output: kl, expected: "log_probs - ref_log_probs", atol: 0, rtol: 0}
      - unmutated: {}
    """)


def test_a_float64_output_is_compared_in_float64(tmp_path):
    """The reference's k1 KL on float64 inputs is 1.0000000001: not 1.0 (a float32 cast of the
    observation would call `equals 1.0` held), and exactly the float64 formula (a float32 cast
    would call it violated), and the float64 inputs come back as sent (a float32 copy of them
    would look mutated)."""
    (tmp_path / "kl.yaml").write_text(F64_KL, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "sentinel", "run", "kl.yaml", "-o", "r.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (result,) = json.loads((tmp_path / "r.json").read_text())["results"]
    equals, close, unmutated = result["invariants"]
    assert (equals["verdict"], close["verdict"], unmutated["verdict"]) == ("violated", "held", "held"), result
    assert equals["observed"][0][0] == 1.0000000001
    assert equals["difference"][0][0] == pytest.approx(1e-10, rel=1e-5)


def test_a_family_name_claimed_twice_is_a_registry_error():
    """Every error a user can meet is a SentinelError: a plugin redefining a family too."""
    from sentinel.errors import RegistryError, SentinelError
    from sentinel.invariants.base import Invariant
    with pytest.raises(RegistryError, match="'close' is defined twice") as e:
        type("Close2", (Invariant,), {"__annotations__": {}, "family": "close", "__doc__": "x"})
    assert isinstance(e.value, SentinelError)


def test_a_token_mask_selects_every_entry_of_a_per_token_vector():
    """A differential finding on grad:log_probs/logits ([B, T, V]) is pinned `where: loss_mask`
    ([B, T]); the replay raised "operands could not be broadcast" instead of comparing."""
    observed = np.zeros((2, 3, 4))
    expected = observed.copy()
    expected[0, 0] = 1.0  # differs only at a masked token
    mask = np.array([[0, 1, 1], [1, 1, 1]])
    assert compare(observed, expected, where=mask)[0]
    expected[1, 2, 3] = 1.0  # and at a valid one
    ok, _, bad = compare(observed, expected, where=mask)
    assert not ok and bad == [[1, 2, 3]]
