"""The surfaces beside the loss: log-probs from [B, T, V] logits, the critic's values, logged
metrics and masked reductions. Their reference math, the vocab port kind through the spec
loader, the contracts, the schema and the strategies, and reports that show a 3-D input."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from rich.console import Console

from sentinel import boundaries, contracts, strategies
from render_helpers import page
from sentinel.invariants import formulas
from render_helpers import console_report, markdown
from sentinel.runner import TargetSpec, run
from sentinel.schema import scenario_schema
from sentinel.spec import ScenarioModel, SpecError, load_text
from sentinel import expr
from sentinel_adapters.reference import ops as R
from sentinel_adapters.reference.adapter import ReferenceAdapter

t = torch.tensor


def call(boundary, inputs, config=None):
    return ReferenceAdapter(None).call(boundary, inputs, config or {}).outputs


# --- reference math ----------------------------------------------------------------------------

def test_log_probs_are_log_softmax_at_temperature_and_leave_the_logits():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=g)
    tokens = torch.randint(0, 5, (2, 3), generator=g)
    mask = t([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    before = logits.clone()
    out = call("logprobs", {"logits": logits, "tokens": tokens, "loss_mask": mask}, {"temperature": 0.7})
    logp = torch.log_softmax(before / 0.7, -1)
    want = logp.gather(-1, tokens[..., None])[..., 0] * mask
    assert torch.allclose(out["log_probs"], want, atol=1e-6)
    assert torch.allclose(out["entropy"], -(logp.exp() * logp).sum(-1) * mask, atol=1e-6)
    assert torch.equal(logits, before)


def test_log_probs_ignore_nan_logits_at_masked_positions_and_their_gradient_stays_finite():
    logits = t([[[0.0, 1.0], [math.nan, math.inf]]], requires_grad=True)
    out = R.token_log_probs(logits, t([[1, 0]]), t([[1.0, 0.0]]), 2.0)
    assert out[0].tolist() == [[pytest.approx(math.log(1 / (1 + math.exp(-0.5)))), 0.0]]
    out[0].sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_values_are_the_head_output_unscaled():
    out = call("values", {"value_head": t([[0.5, 2.0, 9.0]]), "loss_mask": t([[1.0, 1.0, 0.0]])}, {"temperature": 0.5})
    assert out["values"].tolist() == [[0.5, 2.0, 0.0]]


def test_metrics_by_hand():
    # two valid tokens: A=1 with r = e^0.5 (clipped branch taken), A=-1 with r = e^1.5 (the dual clip at 3 binds)
    inputs = {"log_probs": t([[0.0, 0.0, 5.0]]), "old_log_probs": t([[-0.5, -1.5, 0.0]]),
              "advantages": t([[1.0, -1.0, 9.0]]), "loss_mask": t([[1.0, 1.0, 0.0]]),
              "ref_log_probs": t([[0.0, -1.0, 0.0]])}
    out = call("metrics", inputs, {"eps_clip": 0.2, "eps_clip_c": 3.0})
    assert float(out["clipfrac"]) == pytest.approx(0.5)
    assert float(out["clipfrac_lower"]) == pytest.approx(0.5)
    assert float(out["approx_kl"]) == pytest.approx(-1.0)
    assert float(out["ratio_max"]) == pytest.approx(math.exp(1.5))
    assert float(out["ratio_min"]) == pytest.approx(math.exp(0.5))
    assert float(out["kl_loss"]) == pytest.approx(0.5)  # k1: (0 + 1) / 2


def test_metrics_of_an_empty_batch_are_zero_not_nan():
    z = torch.zeros(1, 2)
    out = call("metrics", {"log_probs": z, "old_log_probs": z, "advantages": z, "loss_mask": z})
    assert all(float(v) == 0.0 for v in out.values())


@pytest.mark.parametrize("op,dim,want", [
    ("mean", "all", 7 / 3), ("sum", "all", 7.0), ("var", "all", 7 / 3),
    ("mean", "row", [1.5, 4.0, 0.0]), ("sum", "row", [3.0, 4.0, 0.0]), ("var", "row", [0.5, 0.0, 0.0]),
])
def test_masked_reductions_select_valid_values(op, dim, want):
    values = t([[1.0, 2.0, math.nan], [4.0, math.inf, 9.0], [math.nan, 3.0, 3.0]])
    mask = t([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    out = call("masked_reduce", {"values": values, "loss_mask": mask}, {"op": op, "dim": dim})
    got = out["result" if dim == "all" else "row_result"]
    assert got.tolist() == pytest.approx(want)


def test_masked_whiten_and_shift_mean():
    values, mask = t([[1.0, 2.0, 3.0, math.nan]]), t([[1.0, 1.0, 1.0, 0.0]])
    out = call("masked_reduce", {"values": values, "loss_mask": mask}, {"op": "whiten"})["whitened"]
    assert out.tolist()[0] == pytest.approx([-1.0, 0.0, 1.0, 0.0], abs=1e-6)
    out = call("masked_reduce", {"values": values, "loss_mask": mask}, {"op": "whiten", "shift_mean": False})["whitened"]
    assert out.tolist()[0] == pytest.approx([1.0, 2.0, 3.0, 0.0], abs=1e-6)


# --- the reference formulas of the hunt agree with the reference math ----------------------------

@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.examples("logprobs"))
def test_log_prob_formulas_match_the_reference(ex):
    out = call("logprobs", {n: torch.as_tensor(a) for n, a in ex.inputs.items()}, ex.config)
    m = ex.inputs["loss_mask"] > 0
    for name, f in (("log_probs", formulas.log_probs_formula), ("entropy", formulas.entropy_formula)):
        want = expr.evaluate(f(ex.config["temperature"]), ex.inputs)
        assert np.allclose(out[name].numpy()[m], want[m], atol=1e-5, rtol=1e-5)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.examples("masked_reduce"))
def test_reduce_formulas_match_the_reference(ex):
    cfg = boundaries.get("masked_reduce").normalise(ex.config)
    out = call("masked_reduce", {n: torch.as_tensor(a) for n, a in ex.inputs.items()}, cfg)
    name, f = formulas.masked_reduce_formula(cfg)
    with np.errstate(all="ignore"):
        want = expr.evaluate(f, ex.inputs)
    got = out[name].numpy()
    where = ex.inputs["loss_mask"] > 0 if name == "whitened" else np.ones(got.shape, bool)
    assert np.allclose(got[where], np.broadcast_to(want, got.shape)[where], atol=1e-4, rtol=1e-4)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.examples("metrics"))
def test_metric_formulas_match_the_reference(ex):
    cfg = boundaries.get("metrics").normalise(ex.config)
    out = call("metrics", {n: torch.as_tensor(a) for n, a in ex.inputs.items()}, cfg)
    for name, expected in (("clipfrac", formulas.clipfrac_formula(cfg)),
                           ("approx_kl", formulas.masked_mean("old_log_probs - log_probs", cfg["metric_agg"])),
                           ("ratio_mean", formulas.masked_mean(formulas.RATIO, cfg["metric_agg"]))):
        with np.errstate(all="ignore"):
            want = expr.evaluate(expected, ex.inputs)
        assert np.allclose(out[name].numpy(), want, atol=1e-5, rtol=1e-5), name


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_loss_agg_formulas_match_the_reference(agg):
    values = np.array([[1.0, 2.0, 9.0], [4.0, 0.0, 0.0], [7.0, 7.0, 7.0]], np.float32)
    mask = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], np.float32)  # a hole, a tail, a fully masked row
    want = {"token-mean": 7 / 3, "seq-mean-token-mean": (1.5 + 4) / 2, "seq-mean-token-sum": (3 + 4) / 2}[agg]
    got = expr.evaluate(formulas.loss_agg_formula(agg, "values"), {"values": values, "loss_mask": mask})
    assert float(got) == pytest.approx(want)
    assert float(call("loss_agg", {"values": torch.as_tensor(values), "loss_mask": torch.as_tensor(mask)},
                      {"mode": agg})["loss"]) == pytest.approx(want)


# --- the vocab port kind ---------------------------------------------------------------------

SCENARIO = """id: x
title: t
boundary: logprobs
config: {temperature: 0.5}
inputs:
  logits: [[[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]]]
  tokens: [[2, 0]]
  loss_mask: [[1, 0]]
invariants:
  - unmutated: {}
"""


def test_a_vocab_input_loads_as_b_t_v():
    sc, = load_text(SCENARIO)
    assert sc.inputs["logits"].shape == (1, 2, 3) and sc.inputs["tokens"].dtype == np.int64


@pytest.mark.parametrize("old,new,message", [
    ("[[2, 0]]", "[[3, 0]]", "token ids must lie in [0, 3)"),
    ("[[2, 0]]", "[[1.5, 0]]", "whole numbers only"),
    ("[1.0, 0.0, 0.0]]]", "[1.0, 0.0]]]", "a vocab input is [B, T, V]"),
    ("logits: [[[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]]]", "logits: [[0.0, 1.0]]", "vocab input needs 3-d values"),
    ("[[1, 0]]", "[[1, 0, 1]]", "logits [1, 2, 3], tokens [1, 2], loss_mask [1, 3]"),
])
def test_bad_vocab_inputs_are_refused_with_their_line(old, new, message):
    with pytest.raises(SpecError) as e:
        load_text(SCENARIO.replace(old, new))
    assert message in str(e.value) and "<string>:" in str(e.value)


def test_schema_types_a_vocab_input_and_token_ids():
    s = scenario_schema(ScenarioModel.model_json_schema())
    then = next(c["then"] for c in s["allOf"] if c["if"]["properties"]["boundary"]["const"] == "logprobs")
    logits = then["properties"]["inputs"]["properties"]["logits"]["anyOf"][0]
    assert logits["items"]["items"]["type"] == "array"
    tokens = then["properties"]["inputs"]["properties"]["tokens"]["anyOf"][0]
    assert tokens["items"]["items"] == {"type": "integer"}


def test_options_are_declared_with_default_values_and_doc():
    for name in ("logprobs", "values", "metrics", "masked_reduce"):
        for o in boundaries.get(name).options:
            assert o.doc and o.allowed(), (name, o.name)


# --- contracts: the output an option asks for ----------------------------------------------------

def _returned(**shapes):
    return {n: contracts.Returned("tensor", "f", s) for n, s in shapes.items()}


def test_masked_reduce_must_return_the_output_its_op_asks_for():
    b = boundaries.get("masked_reduce")
    assert contracts.problems("masked_reduce", _returned(result=()), (2, 3), b.normalise({})) == []
    bad = contracts.problems("masked_reduce", _returned(result=()), (2, 3), b.normalise({"op": "whiten"}))
    assert bad == ["output 'whitened' is missing (the masked_reduce boundary requires it under op whiten)"]
    bad = contracts.problems("masked_reduce", _returned(row_result=(3,)), (2, 3), b.normalise({"dim": "row"}))
    assert bad == ["output 'row_result' has shape [3], expected [2] (row)"]


def test_metrics_require_clipfrac_only():
    assert contracts.problems("metrics", _returned(clipfrac=()), (2, 3)) == []
    assert contracts.problems("metrics", _returned(approx_kl=()), (2, 3)) == [
        "output 'clipfrac' is missing (the metrics boundary requires it)"]


# --- strategies --------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.examples("logprobs", need_masked=True))
def test_drawn_logits_have_a_small_vocabulary_and_valid_ids(ex):
    logits, tokens = ex.inputs["logits"], ex.inputs["tokens"]
    assert logits.ndim == 3 and logits.shape[2] in strategies.VOCAB_SIZES and logits.dtype == np.float32
    assert tokens.dtype == np.int64 and (tokens >= 0).all() and (tokens < logits.shape[2]).all()
    valid = logits[ex.inputs["loss_mask"] > 0]
    assert np.all(valid * 4 == np.round(valid * 4))  # a dyadic grid
    assert (ex.inputs["loss_mask"] == 0).any()


# --- reports with a 3-D input ------------------------------------------------------------------

def test_reports_render_a_violation_on_a_vocab_input():
    sc, = load_text(SCENARIO.replace("unmutated: {}", "unmutated: {inputs: [logits]}"))
    report = run([sc], [TargetSpec("reference", plant="logprobs-temperature-inplace")])
    r, = report.results
    assert r.verdict == "violated" and r.invariants[0].family == "unmutated"
    md = markdown(report)
    assert "the call mutated input 'logits' in place" in md
    html = page(report)
    assert "logprobs" in html and "<table" in html
    out = io.StringIO()
    console_report(report, Console(file=out, width=160), verbose=True)
    assert "unmutated" in out.getvalue()
    json.loads(report.model_dump_json())


@pytest.mark.parametrize("masked_rows, verdict", [(True, "violated"), (False, "held")])
def test_finite_on_a_fully_masked_row_is_checked_only_when_asked(masked_rows, verdict):
    """`finite: {masked_rows: true}` (the surfaces' hunt properties): a row with no valid value
    must reduce to a finite value too. The plant multiplies by the mask, so a NaN there makes
    the fully masked row's mean NaN; row 0 is all valid and stays finite."""
    sc, = load_text(f"""id: row-mean
title: t
boundary: masked_reduce
config: {{op: mean, dim: row}}
inputs: {{values: [[1.0, 2.0], [3.0, 4.0]], loss_mask: [[1, 1], [0, 0]]}}
invariants:
  - finite: {{values: [nan], masked_rows: {str(masked_rows).lower()}}}
""", "row-mean.yaml")
    r, = run([sc], [TargetSpec("reference", plant="masked-reduce-multiplies")]).results
    inv, = r.invariants
    assert inv.verdict == verdict, inv.message
    r, = run([sc], [TargetSpec("reference")]).results
    assert r.invariants[0].verdict == "held"  # the reference selects: 0 for a row with no valid value
