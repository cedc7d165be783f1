"""Scenario files: every bad input is a SpecError naming file, line and field; good inputs
decode to the arrays they say. YAML is written to tmp_path with known line numbers."""

from __future__ import annotations

import math
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from sentinel.boundaries import BOUNDARIES
from sentinel.catalog import catalog_path
from sentinel import yamlfile
from sentinel.spec import MultiSpecError, SpecError, load_file, load_paths, load_text

# Line numbers below refer to this text (line 1 is `id: opsm`).
OPSM = """\
id: opsm
title: OPSM on one sequence
boundary: opsm_mask
config:
  opsm_delta: 0.1
inputs:
  log_probs:     [[0.0, 0.0, 0.0]]
  old_log_probs: [[1.0, 1.0, 1.0]]
  advantages:    [[-0.5, 0.25, -0.25]]
  loss_mask:     [[1, 1, 1]]
invariants:
  - sequence_uniform:
      output: opsm_mask
"""

# Line numbers: 1 id, 4 config, 7 inputs, 8 rewards, 9 loss_mask, 10 attention_mask, 13 invariants.
ADV = """\
id: adv
title: advantages of two rows
boundary: advantages
config:
  estimator: gae
  kl_coef: 0.0
inputs:
  rewards:        [1.0, 2.0]
  loss_mask:      [[0, 1, 0], [0, 1, 1]]
  attention_mask: [[1, 1, 0], [1, 1, 1]]
variants:
  outlier: {inputs: {rewards: [1.0, 100.0]}}
invariants:
  - unchanged_under: {variant: outlier, output: advantages, rows: has_eos}
"""


# ADV without its variant (line numbers unchanged up to `variants`).
ADV_PLAIN = ADV.replace("variants:\n  outlier: {inputs: {rewards: [1.0, 100.0]}}\n", "").replace(
    "  - unchanged_under: {variant: outlier, output: advantages, rows: has_eos}", "  - unmutated: {}")


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def problems(tmp_path: Path, text: str) -> tuple[Path, SpecError]:
    p = write(tmp_path, text)
    with pytest.raises(SpecError) as ei:
        load_file(p)
    return p, ei.value


def only(err: SpecError) -> tuple[int | None, str, str]:
    assert len(err.problems) == 1, err.lines()
    return err.problems[0]


def assert_problem(tmp_path: Path, text: str, line: int, field: str, *words: str) -> SpecError:
    """Exactly one problem, at `line`, on `field`, its message containing `words`; and the
    rendered line reads `FILE:LINE: FIELD: message`."""
    p, err = problems(tmp_path, text)
    got_line, got_field, msg = only(err)
    assert (got_line, got_field) == (line, field), err.lines()
    for w in words:
        assert w in msg, err.lines()
    (rendered,) = err.lines()
    assert rendered.startswith(f"{p}:{line}: {field}: " if field else f"{p}:{line}: "), rendered
    assert err.file == str(p)
    assert str(p) in str(err)
    return err


def replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# --- good files ------------------------------------------------------------------------

def test_good_file_decodes_inputs_config_and_invariants(tmp_path):
    (sc,) = load_file(write(tmp_path, OPSM))
    assert sc.id == "opsm" and sc.boundary == "opsm_mask" and sc.line == 1
    assert sc.file == str(tmp_path / "scenario.yaml")
    assert sc.inputs["advantages"].dtype == np.float32
    np.testing.assert_array_equal(sc.inputs["loss_mask"], [[1, 1, 1]])
    assert [i.family for i in sc.invariants] == ["sequence_uniform"]
    # defaults of the boundary are filled, the scenario's config wins
    assert sc.full_config() == {**BOUNDARIES["opsm_mask"].config, "opsm_delta": 0.1}
    assert sc.full_config()["eps_clip"] == BOUNDARIES["opsm_mask"].config["eps_clip"]
    assert sc.full_config({"opsm_delta": 0.5})["opsm_delta"] == 0.5
    assert sc.applies_to("reference") and sc.applies_to("slime")


def test_multi_document_file_gives_every_scenario_its_own_line(tmp_path):
    second = replace(OPSM, "id: opsm", "id: opsm-two")
    text = OPSM + "---\n" + second + "---\n" + ADV
    scs = load_file(write(tmp_path, text))
    assert [s.id for s in scs] == ["opsm", "opsm-two", "adv"]
    n = OPSM.count("\n")
    assert [s.line for s in scs] == [1, n + 2, 2 * n + 3]


def test_error_in_a_later_document_reports_the_file_line(tmp_path):
    n = OPSM.count("\n")
    bad = replace(ADV, "  kl_coef: 0.0", "  kl_cof: 0.0")
    assert_problem(tmp_path, OPSM + "---\n" + bad, n + 1 + 6, "config.kl_cof", "unknown config key")


def test_empty_documents_between_scenarios_are_ignored(tmp_path):
    scs = load_file(write(tmp_path, "---\n" + OPSM + "---\n---\n# only a comment\n"))
    assert [s.id for s in scs] == ["opsm"]
    assert scs[0].line == 2


def test_nan_and_inf_strings_become_non_finite_floats(tmp_path):
    text = replace(OPSM, "  log_probs:     [[0.0, 0.0, 0.0]]", "  log_probs:     [[nan, inf, -inf]]")
    text = replace(text, "  old_log_probs: [[1.0, 1.0, 1.0]]", "  old_log_probs: [['+inf', NaN, 'Inf']]")
    (sc,) = load_file(write(tmp_path, text))
    lp, old = sc.inputs["log_probs"][0], sc.inputs["old_log_probs"][0]
    assert math.isnan(lp[0]) and lp[1] == math.inf and lp[2] == -math.inf
    assert old[0] == math.inf and math.isnan(old[1]) and old[2] == math.inf


def test_ragged_token_inputs_that_ask_for_padding_are_padded_with_a_derived_loss_mask(tmp_path):
    text = """\
id: ragged
title: ragged rows
boundary: kl
inputs:
  log_probs:     {values: [[-0.5, -1.0, -0.2], [-0.3]], pad: 0.0}
  ref_log_probs: {values: [[-0.6, -0.8, -0.4], [-0.2]], pad: 0}
invariants:
  - unmutated: {}
"""
    (sc,) = load_file(write(tmp_path, text))
    np.testing.assert_allclose(sc.inputs["log_probs"], [[-0.5, -1.0, -0.2], [-0.3, 0.0, 0.0]])
    np.testing.assert_allclose(sc.inputs["ref_log_probs"], [[-0.6, -0.8, -0.4], [-0.2, 0.0, 0.0]])
    np.testing.assert_array_equal(sc.inputs["loss_mask"], [[1, 1, 1], [1, 0, 0]])
    assert sc.inputs["loss_mask"].dtype == np.float32


def test_ragged_token_input_pads_with_its_own_pad_value(tmp_path):
    text = """\
id: ragged-pad
title: ragged rows with a pad value
boundary: loss_agg
inputs:
  values: {values: [[1.0, 2.0], [3.0]], pad: nan}
invariants:
  - unmutated: {}
"""
    (sc,) = load_file(write(tmp_path, text))
    v = sc.inputs["values"]
    assert v[0].tolist() == [1.0, 2.0] and v[1, 0] == 3.0 and math.isnan(v[1, 1])
    np.testing.assert_array_equal(sc.inputs["loss_mask"], [[1, 1], [1, 0]])


def test_tensor_mapping_dtype(tmp_path):
    text = replace(OPSM, "  advantages:    [[-0.5, 0.25, -0.25]]",
                   "  advantages:    {values: [[-0.5, 0.25, -0.25]], dtype: float64}")
    (sc,) = load_file(write(tmp_path, text))
    assert sc.inputs["advantages"].dtype == np.float64


def test_variant_inputs_overlay_the_base(tmp_path):
    (sc,) = load_file(write(tmp_path, ADV))
    inputs, config = sc.variants["outlier"]
    np.testing.assert_array_equal(inputs["rewards"], [1.0, 100.0])
    np.testing.assert_array_equal(inputs["loss_mask"], sc.inputs["loss_mask"])
    assert config == {}


def test_the_catalog_loads():
    scs = load_paths([catalog_path()])
    assert len(scs) >= 20
    assert len({s.id for s in scs}) == len(scs)


# --- bad files: one class per test, each with its exact line ------------------------------

def test_malformed_yaml(tmp_path):
    text = "id: x\ntitle: [a, b\nboundary: opsm_mask\n"
    assert_problem(tmp_path, text, 3, "", "malformed YAML")


def test_malformed_yaml_bad_indentation(tmp_path):
    text = replace(OPSM, "boundary: opsm_mask", "boundary: opsm_mask\n  oops: : 1")
    err = assert_problem(tmp_path, text, 4, "", "malformed YAML")
    assert "mapping values are not allowed" in err.problems[0][2]


def test_empty_file(tmp_path):
    assert_problem(tmp_path, "", 1, "", "no scenario in file")


def test_file_of_comments_only(tmp_path):
    assert_problem(tmp_path, "# nothing here\n\n", 1, "", "no scenario in file")


def test_missing_file(tmp_path):
    p = tmp_path / "absent.yaml"
    with pytest.raises(SpecError) as ei:
        load_file(p)
    (line,) = ei.value.lines()
    assert line.startswith(f"{p}:") and "no such file" in line
    with pytest.raises(SpecError):
        load_paths([p])


def test_not_a_mapping(tmp_path):
    assert_problem(tmp_path, "- 1\n- 2\n", 1, "", "must be a mapping")


def test_unknown_top_level_key(tmp_path):
    text = replace(OPSM, "boundary: opsm_mask\n", "boundary: opsm_mask\nbondary: x\n")
    assert_problem(tmp_path, text, 4, "bondary", "unknown key", "allowed:", "boundary")


def test_wrong_type_of_top_level_field(tmp_path):
    text = replace(OPSM, "title: OPSM on one sequence", "title:\n  - a list")
    assert_problem(tmp_path, text, 2, "title", "valid string")


def test_wrong_type_of_config(tmp_path):
    text = replace(OPSM, "config:\n  opsm_delta: 0.1\n", "config: 0.1\n")
    assert_problem(tmp_path, text, 4, "config", "dictionary")


def test_wrong_type_of_invariant_field(tmp_path):
    text = OPSM + "  - close:\n      output: opsm_clipfrac\n      expected: 1.0\n      atol: lots\n"
    assert_problem(tmp_path, text, 17, "invariants.1.close.atol", "number")


def test_missing_required_top_level_field(tmp_path):
    text = replace(OPSM, "title: OPSM on one sequence\n", "")
    assert_problem(tmp_path, text, 1, "title", "required")


def test_bad_id(tmp_path):
    assert_problem(tmp_path, replace(OPSM, "id: opsm", "id: Not Kebab"), 1, "id", "pattern")


def test_unknown_boundary(tmp_path):
    text = replace(OPSM, "boundary: opsm_mask", "boundary: opsm")
    assert_problem(tmp_path, text, 3, "boundary", "unknown boundary 'opsm'", "opsm_mask")


def test_unknown_invariant_family(tmp_path):
    text = OPSM + "  - sequence_uniformity:\n      output: opsm_mask\n"
    assert_problem(tmp_path, text, 14, "invariants.1.sequence_uniformity", "unknown invariant", "sequence_uniform")


def test_invariant_must_be_a_single_key_mapping(tmp_path):
    text = OPSM + "  - {close: {output: opsm_mask, expected: 0}, equals: {output: opsm_mask, expected: 0}}\n"
    assert_problem(tmp_path, text, 14, "invariants.1", "single-key mapping")


def test_unknown_invariant_field(tmp_path):
    text = replace(OPSM, "      output: opsm_mask\n", "      output: opsm_mask\n      msk: loss_mask\n")
    assert_problem(tmp_path, text, 14, "invariants.0.sequence_uniform.msk", "unknown key")


def test_invariant_naming_an_unknown_output(tmp_path):
    text = replace(OPSM, "      output: opsm_mask\n", "      output: opsm_masks\n")
    assert_problem(tmp_path, text, 13, "invariants.0.sequence_uniform.output", "no output 'opsm_masks'")


def test_unknown_config_key(tmp_path):
    text = replace(OPSM, "  opsm_delta: 0.1\n", "  opsm_delta: 0.1\n  opsm_delat: 0.2\n")
    assert_problem(tmp_path, text, 6, "config.opsm_delat", "unknown config key", "opsm_delta")


def test_unknown_input(tmp_path):
    text = replace(OPSM, "  loss_mask:     [[1, 1, 1]]\n", "  loss_mask:     [[1, 1, 1]]\n  logprobs: [[0.0, 0.0, 0.0]]\n")
    assert_problem(tmp_path, text, 11, "inputs.logprobs", "has no input 'logprobs'")


def test_ragged_mask(tmp_path):
    text = replace(OPSM, "  loss_mask:     [[1, 1, 1]]", "  loss_mask:     [[1, 1, 1], [1]]")
    assert_problem(tmp_path, text, 10, "inputs.loss_mask", "ragged", "rectangular")


def test_mask_with_values_other_than_0_and_1(tmp_path):
    text = replace(OPSM, "  loss_mask:     [[1, 1, 1]]", "  loss_mask:     [[1, 2, 1]]")
    assert_problem(tmp_path, text, 10, "inputs.loss_mask", "only 0 and 1")


def test_mask_with_nan(tmp_path):
    text = replace(OPSM, "  loss_mask:     [[1, 1, 1]]", "  loss_mask:     [[1, nan, 1]]")
    assert_problem(tmp_path, text, 10, "inputs.loss_mask", "only 0 and 1")


def test_ragged_row_input(tmp_path):
    assert_problem(tmp_path, replace(ADV_PLAIN, "[1.0, 2.0]", "[1.0, [2.0, 3.0]]"), 8, "inputs.rewards", "not a numeric tensor")


def test_row_input_given_as_a_matrix(tmp_path):
    assert_problem(tmp_path, replace(ADV_PLAIN, "[1.0, 2.0]", "[[1.0], [2.0]]"), 8, "inputs.rewards", "1-d", "got 2-d")


def test_token_input_given_as_a_vector(tmp_path):
    text = replace(OPSM, "  advantages:    [[-0.5, 0.25, -0.25]]", "  advantages:    [-0.5, 0.25, -0.25]")
    assert_problem(tmp_path, text, 9, "inputs.advantages", "2-d", "got 1-d")


def test_non_numeric_value(tmp_path):
    assert_problem(tmp_path, replace(ADV_PLAIN, "[1.0, 2.0]", "[1.0, two]"), 8, "inputs.rewards", "not a number: 'two'")


def test_token_tensors_whose_shapes_disagree(tmp_path):
    text = replace(OPSM, "  advantages:    [[-0.5, 0.25, -0.25]]", "  advantages:    [[-0.5, 0.25]]")
    err = assert_problem(tmp_path, text, 6, "inputs", "one [B, T] shape", "advantages [1, 2]", "log_probs [1, 3]")
    assert "loss_mask [1, 3]" in err.problems[0][2]


def test_ragged_token_inputs_whose_lengths_disagree(tmp_path):
    text = """\
id: ragged
title: ragged rows
boundary: kl
inputs:
  log_probs:     {values: [[-0.5, -1.0, -0.2], [-0.3]], pad: 0.0}
  ref_log_probs: {values: [[-0.6, -0.8], [-0.2]], pad: 0.0}
invariants:
  - unmutated: {}
"""
    assert_problem(tmp_path, text, 6, "inputs.ref_log_probs", "ragged lengths [2, 1]", "[3, 1]")


# --- a typo never becomes data ------------------------------------------------------------

@pytest.mark.parametrize("values", ["[[1.0], [2.0, 3.0, 4.0]]", "[[1.0, 2.0, 3.0], [4.0, 5.0]]",
                                    "{values: [[1.0], [2.0, 3.0, 4.0]]}", "{values: [[1.0], [2.0, 3.0, 4.0]], dtype: float64}"])
def test_ragged_rows_are_an_error_unless_the_tensor_asks_for_padding(tmp_path, values):
    text = f"""\
id: ragged
title: a typo in a row
boundary: loss_agg
inputs:
  values:    {values}
  loss_mask: [[1, 1, 1], [1, 1, 1]]
invariants:
  - unmutated: {{}}
"""
    assert_problem(tmp_path, text, 5, "inputs.values", "ragged rows", "pad:")
    padded = text.replace(values, "{values: [[1.0], [2.0, 3.0, 4.0]], pad: 0.0}")
    (sc,) = load_file(write(tmp_path, padded))
    assert sc.inputs["values"].tolist() == [[1.0, 0.0, 0.0], [2.0, 3.0, 4.0]]


def test_sentinel_check_calls_a_ragged_file_invalid(tmp_path):
    from typer.testing import CliRunner
    from sentinel.cli import app
    p = write(tmp_path, OPSM.replace("advantages:    [[-0.5, 0.25, -0.25]]", "advantages:    [[-0.5], [0.25, -0.25, 1.0]]"))
    r = CliRunner().invoke(app, ["check", str(p)])
    assert r.exit_code == 2, r.output
    assert f"{p}:9: inputs.advantages: ragged rows" in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["0.99999999", "1e-46", "1.0000000001", "-0.0000000001", "0.5"])
def test_a_mask_holds_exactly_0_and_1(tmp_path, value):
    """0.99999999 and 1e-46 round to 1 and 0 in the mask's float32: checked before that cast."""
    text = replace(OPSM, "  loss_mask:     [[1, 1, 1]]", f"  loss_mask:     [[1, {value}, 1]]")
    assert_problem(tmp_path, text, 10, "inputs.loss_mask", "only 0 and 1", repr(float(value)))


def test_a_mask_of_exact_zeros_and_ones_in_any_spelling_loads(tmp_path):
    text = replace(OPSM, "  loss_mask:     [[1, 1, 1]]", "  loss_mask:     [[1.0, 0.0, true]]")
    (sc,) = load_file(write(tmp_path, text))
    assert sc.inputs["loss_mask"].tolist() == [[1.0, 0.0, 1.0]]


@pytest.mark.parametrize("family", ["close", "equals"])
@pytest.mark.parametrize("field", ["atol", "rtol"])
@pytest.mark.parametrize("value, words", [(".nan", "finite"), ("nan", "number"), (".inf", "finite"),
                                          ("-1.0e-6", "greater than or equal to 0"), ("'1e-3'", "number"),
                                          ("abc", "number"), ("[1]", "number"), ("true", "number")])
def test_a_tolerance_is_a_finite_non_negative_number(tmp_path, family, field, value, words):
    text = OPSM + f"  - {family}: {{output: opsm_mask, expected: 0.0, {field}: {value}}}\n"
    assert_problem(tmp_path, text, 14, f"invariants.1.{family}.{field}", words)


def test_tolerances_of_every_family_are_checked(tmp_path):
    for inv in ("agree: {between: [base, base], observables: [opsm_mask], atol: -1}",
                "masked_invariance: {rtol: .nan}", "sequence_uniform: {output: opsm_mask, atol: .inf}"):
        p, err = problems(tmp_path, OPSM + f"  - {inv}\n")
        assert any(line == 14 and fld.endswith(("atol", "rtol")) for line, fld, _ in err.problems), err.lines()


@pytest.mark.parametrize("pad, words", [("1e39", "float32"), ("-1e39", "float32"), ("'7'", "not a number"),
                                        ("abc", "not a number"), ("[0]", "not a number")])
def test_a_pad_value_must_fit_the_dtype(tmp_path, pad, words):
    for values in ("[[1.0, 2.0], [3.0]]", "[[1.0, 2.0], [3.0, 4.0]]"):  # used or not, it is checked
        text = f"""\
id: pad
title: a pad beyond float32
boundary: loss_agg
inputs:
  values: {{values: {values}, pad: {pad}}}
invariants:
  - unmutated: {{}}
"""
        assert_problem(tmp_path, text, 5, "inputs.values.pad", words)


def test_a_pad_value_beyond_int64_is_refused(tmp_path):
    text = """\
id: grpo-pad
title: an int pad beyond int64
boundary: logprobs
inputs:
  logits: [[[0.0, 1.0], [1.0, 0.0]]]
  tokens: {values: [[0, 1]], pad: 99999999999999999999}
  loss_mask: [[1, 1]]
invariants:
  - unmutated: {}
"""
    assert_problem(tmp_path, text, 6, "inputs.tokens.pad", "int64")
    assert_problem(tmp_path, text.replace("99999999999999999999", "0.5"), 6, "inputs.tokens.pad", "whole number")


def test_row_input_length_vs_batch(tmp_path):
    assert_problem(tmp_path, replace(ADV_PLAIN, "[1.0, 2.0]", "[1.0, 2.0, 3.0]"), 8, "inputs.rewards",
                   "3 rows", "B=2")


def test_row_inputs_disagreeing_without_token_inputs(tmp_path):
    text = """\
id: rn
title: reward norm
boundary: reward_norm
inputs:
  rewards: [1.0, 2.0, 3.0]
  mask:    [1, 0]
invariants:
  - unmutated: {}
"""
    assert_problem(tmp_path, text, 4, "inputs", "row inputs disagree", "rewards [3]", "mask [2]")


def test_a_bad_base_input_does_not_make_variants_report_spurious_errors(tmp_path):
    """The variant inherits loss_mask from the base; when the base's rewards are wrong, the
    only problem is the base's rewards (not a 'missing loss_mask' in the variant)."""
    assert_problem(tmp_path, replace(ADV, "[1.0, 2.0]", "[1.0, two]"), 8, "inputs.rewards", "not a number")


def test_missing_required_input(tmp_path):
    text = replace(OPSM, "  advantages:    [[-0.5, 0.25, -0.25]]\n", "")
    assert_problem(tmp_path, text, 6, "inputs", "missing required input 'advantages'")


def test_variant_with_an_unknown_input(tmp_path):
    text = replace(ADV, "{inputs: {rewards: [1.0, 100.0]}}", "{inputs: {reward: [1.0, 100.0]}}")
    assert_problem(tmp_path, text, 12, "variants.outlier.inputs.reward", "has no input 'reward'")


def test_variant_whose_shape_disagrees_with_the_base(tmp_path):
    text = replace(ADV, "{inputs: {rewards: [1.0, 100.0]}}", "{inputs: {rewards: [1.0, 100.0, 5.0]}}")
    assert_problem(tmp_path, text, 12, "variants.outlier.inputs.rewards", "3 rows", "B=2")


def test_variant_with_an_unknown_config_key(tmp_path):
    text = replace(ADV, "{inputs: {rewards: [1.0, 100.0]}}", "{config: {kl_coeff: 0.1}}")
    assert_problem(tmp_path, text, 12, "variants.outlier.config.kl_coeff", "unknown config key")


def test_invariant_naming_an_unknown_variant(tmp_path):
    text = replace(ADV, "{variant: outlier,", "{variant: outliers,")
    assert_problem(tmp_path, text, 14, "invariants.0.unchanged_under.variant", "no variant named 'outliers'", "outlier")


def test_agree_naming_an_unknown_run(tmp_path):
    text = ADV + "  - agree: {between: [base, nope], observables: [advantages]}\n"
    assert_problem(tmp_path, text, 15, "invariants.1.agree.between", "no variant named 'nope'")


def test_close_on_an_unknown_run(tmp_path):
    text = ADV + "  - close: {output: advantages, expected: 0.0, run: nope}\n"
    assert_problem(tmp_path, text, 15, "invariants.1.close.run", "no variant named 'nope'")


def test_gradient_wrt_an_input_that_takes_none(tmp_path):
    text = OPSM + "  - gradient: {of: reduced_policy_loss, wrt: advantages, expected: 0.0}\n"
    assert_problem(tmp_path, text, 14, "invariants.1.gradient.wrt", "log_probs")


def test_masked_family_needs_a_masked_position(tmp_path):
    text = OPSM + "  - masked_invariance: {}\n"
    assert_problem(tmp_path, text, 14, "invariants.1.masked_invariance.mask", "no masked position")


def test_duplicate_ids_in_one_file(tmp_path):
    n = OPSM.count("\n")
    assert_problem(tmp_path, OPSM + "---\n" + OPSM, n + 2, "id", "duplicate scenario id 'opsm'", "line 1")


def test_duplicate_ids_across_files(tmp_path):
    a = write(tmp_path, OPSM, "a.yaml")
    b = write(tmp_path, ADV + "---\n" + OPSM, "b.yaml")
    with pytest.raises(SpecError) as ei:
        load_paths([tmp_path])
    text = "\n".join(ei.value.lines())
    assert f"{b}:{ADV.count(chr(10)) + 2}: id: duplicate scenario id 'opsm'" in text
    assert f"{a}:1" in text


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    text = replace(OPSM, "  opsm_delta: 0.1\n", "  opsm_delta: 0.1\n  nope: 1\n")
    text = replace(text, "  loss_mask:     [[1, 1, 1]]", "  loss_mask:     [[1, 3, 1]]")
    _, err = problems(tmp_path, text)
    assert sorted((line, fld) for line, fld, _ in err.problems) == [(6, "config.nope"), (11, "inputs.loss_mask")]


def test_errors_of_several_files_are_all_reported(tmp_path):
    write(tmp_path, replace(OPSM, "boundary: opsm_mask", "boundary: nope"), "a.yaml")
    write(tmp_path, "", "b.yaml")
    write(tmp_path, ADV, "c.yaml")
    with pytest.raises(MultiSpecError) as ei:
        load_paths([tmp_path])
    lines = ei.value.lines()
    assert any(ln.startswith(f"{tmp_path / 'a.yaml'}:3: boundary:") for ln in lines), lines
    assert any(ln.startswith(f"{tmp_path / 'b.yaml'}:1:") for ln in lines), lines
    assert not any("c.yaml" in ln for ln in lines)


def test_expression_naming_nothing_the_boundary_knows_is_a_spec_error(tmp_path):
    """A typo in an `expected` expression can never be evaluated: the invariant would be
    skipped on every target, a check that cannot fail. It must be caught at load time."""
    text = textwrap.dedent("""\
        id: kl-typo
        title: k1 with a typo in the expected formula
        boundary: kl
        inputs:
          log_probs:     [[-0.5, -1.0]]
          ref_log_probs: [[-0.6, -0.8]]
          loss_mask:     [[1, 1]]
        invariants:
          - close: {output: kl, expected: "log_prob - ref_log_probs"}
        """)
    assert_problem(tmp_path, text, 9, "invariants.0.close.expected", "log_prob")


def test_gradient_reference_that_can_never_be_observed_is_a_spec_error(tmp_path):
    """`grad:loss/log_prob` (typo) is never requested from the worker, so the invariant would
    be skipped on every target."""
    text = OPSM + '  - close: {output: "grad:reduced_policy_loss/log_prob", expected: 0.0}\n'
    assert_problem(tmp_path, text, 14, "invariants.1.close.output", "grad:reduced_policy_loss/log_prob", "log_probs")


def test_input_reference_to_an_unknown_input_is_a_spec_error(tmp_path):
    text = OPSM + '  - close: {output: "input:logprobs", expected: 0.0}\n'
    assert_problem(tmp_path, text, 14, "invariants.1.close.output", "logprobs")


GRPO = """\
id: grpo
title: groups
boundary: advantages
config: {estimator: grpo}
inputs:
  rewards:   [1.0, 2.0, 3.0, 4.0]
  group:     [0, 0, 1, 1]
  loss_mask: [[1, 1], [1, 1], [1, 1], [1, 0]]
invariants:
  - group_isolation: {perturb: rewards}
"""


def test_group_isolation_perturbing_an_unknown_input_is_a_spec_error(tmp_path):
    """Unchecked, it crashed the whole run with a KeyError traceback (CLI exit 1, read as 'a violation')."""
    assert load_file(write(tmp_path, GRPO))[0].invariants[0].perturb == "rewards"
    assert_problem(tmp_path, replace(GRPO, "perturb: rewards", "perturb: reward"), 10,
                   "invariants.0.group_isolation.perturb", "reward")


def test_group_isolation_perturbing_an_absent_input_is_a_spec_error(tmp_path):
    assert_problem(tmp_path, replace(GRPO, "perturb: rewards", "perturb: values"), 10,
                   "invariants.0.group_isolation.perturb", "values")


@pytest.mark.parametrize("family", ["masked_invariance", "finite"])
def test_masked_family_perturbing_an_absent_input_is_a_spec_error(tmp_path, family):
    """`values` is an optional input of `advantages`; perturbing it when the scenario gives
    none crashed the run (KeyError) instead of failing validation."""
    text = replace(GRPO, "  - group_isolation: {perturb: rewards}", f"  - {family}: {{perturb: [values]}}")
    assert_problem(tmp_path, text, 10, f"invariants.0.{family}.perturb", "values")


# --- declared option values (issue 9) -------------------------------------------------------

def test_config_value_typo_names_line_and_allowed_values():
    text = _scenario_text_with_config("loss_agg", "  mode: seq-mean-tokn-mean\n")
    with pytest.raises(SpecError) as e:
        load_text(text, "typo.yaml")
    line = e.value.lines()[0]
    assert line.startswith("typo.yaml:5:") and "seq-mean-tokn-mean" in line and "seq-mean-token-sum" in line


def test_nested_reward_norm_value_checked():
    text = ("id: t\ntitle: t\nboundary: advantages\nconfig:\n  reward_norm: {mean_level: grp}\n"
            "inputs:\n  rewards: [1.0]\n  loss_mask: [[1]]\ninvariants:\n  - finite: {}\n")
    with pytest.raises(SpecError) as e:
        load_text(text, "n.yaml")
    assert "n.yaml:5:" in e.value.lines()[0] and "'grp'" in e.value.lines()[0] and "batch, group" in e.value.lines()[0]


def test_option_requires_its_input():
    text = ("id: t\ntitle: t\nboundary: policy_loss\nconfig:\n  use_decoupled_loss: true\ninputs:\n"
            "  log_probs: [[0.0]]\n  old_log_probs: [[0.0]]\n  advantages: [[1.0]]\n  loss_mask: [[1]]\n"
            "invariants:\n  - finite: {}\n")
    with pytest.raises(SpecError) as e:
        load_text(text, "d.yaml")
    assert "d.yaml:5:" in e.value.lines()[0] and "rollout_log_probs" in e.value.lines()[0]


def test_derived_default_resolved_once():
    from sentinel.boundaries import get
    assert get("policy_loss").normalise({"eps_clip": 0.3})["eps_clip_high"] == 0.3
    assert get("policy_loss").normalise({"eps_clip": 0.3, "eps_clip_high": 0.28})["eps_clip_high"] == 0.28


def _scenario_text_with_config(boundary: str, config: str) -> str:
    return (f"id: t\ntitle: t\nboundary: {boundary}\nconfig:\n{config}inputs:\n  values: [[1.0, 2.0]]\n"
            "  loss_mask: [[1, 1]]\ninvariants:\n  - finite: {}\n")


# --- parser limits -----------------------------------------------------------------------

ALIAS_BOMB = "".join(f"{k}: &{k} [{','.join([v] * 9)}]\n" for k, v in  # 9**9 strings from 342 bytes
                     zip("abcdefghi", ['"lol"', "*a", "*b", "*c", "*d", "*e", "*f", "*g", "*h"]))


@pytest.fixture(params=["libyaml", "pure"])
def loader(request, monkeypatch):
    """Run a test with the C loader (libyaml, the default where built) and the pure-Python one."""
    if request.param == "libyaml":
        if yamlfile.LOADERS[0] is yamlfile._PyLoader:
            pytest.skip("PyYAML without libyaml")
    else:
        monkeypatch.setattr(yamlfile, "LOADERS", [yamlfile._PyLoader])
    return request.param


def test_yaml_12_number_forms_are_numbers(tmp_path, loader):
    text = replace(OPSM, "log_probs:     [[0.0, 0.0, 0.0]]", "log_probs:     [[1e-3, 1E5, .5]]")
    text = replace(text, "old_log_probs: [[1.0, 1.0, 1.0]]", "old_log_probs: [[-.inf, 1.0e5, -2e+2]]")
    text = replace(text, "opsm_delta: 0.1", "opsm_delta: 1e-3")
    (sc,) = load_file(write(tmp_path, text))
    np.testing.assert_allclose(sc.inputs["log_probs"], [[1e-3, 1e5, 0.5]], rtol=1e-6)
    assert sc.inputs["old_log_probs"].tolist() == [[-math.inf, 1e5, -200.0]]
    assert sc.config["opsm_delta"] == 1e-3


def test_both_loaders_give_the_same_lines(tmp_path, loader):
    assert_problem(tmp_path, replace(OPSM, "boundary: opsm_mask", "boundary: nope"), 3, "boundary", "nope")
    assert_problem(tmp_path, OPSM + "  - close: {output: opsm_mask, expected: [1, 2]}\n", 14,
                   "invariants.1.close.expected", "shape [2]", "[1, 3]")
    assert_problem(tmp_path, "id: a\n\ttitle: b\n", 2, "", "malformed YAML")


def test_duplicate_keys_are_refused_at_the_second(tmp_path, loader):
    assert_problem(tmp_path, OPSM.replace("config:\n", "title: again\nconfig:\n"), 4, "title",
                   "duplicate key 'title'", "first at line 2")
    assert_problem(tmp_path, replace(OPSM, "  loss_mask:     [[1, 1, 1]]\n",
                                     "  loss_mask:     [[1, 1, 1]]\n  log_probs: [[0.0, 0.0, 0.0]]\n"),
                   11, "inputs.log_probs", "duplicate key 'log_probs'", "first at line 7")


def test_an_alias_bomb_fails_fast_with_its_line(tmp_path, loader):
    assert len(ALIAS_BOMB.encode()) < 400
    p, err = problems(tmp_path, ALIAS_BOMB)
    (line,) = err.lines()
    assert line.startswith(f"{p}:5: e.") and "alias" in line, line  # e: where the expansion passes the budget


@pytest.mark.parametrize("text,line", [
    ("id: x\ninputs: " + "[" * 3000 + "]" * 3000 + "\n", 2),
    ("id: x\ninputs:\n  log_probs: " + "[" * 100 + "]" * 100 + "\n", 3),
    ("id: x\nrec: &r [*r]\n", 2),
])
def test_deep_nesting_is_refused_with_a_line(tmp_path, loader, text, line):
    p, err = problems(tmp_path, text)
    assert only(err)[0] == line and "nest" in only(err)[2], err.lines()


def test_a_million_value_row_is_refused(tmp_path):
    """Refused on its count (no timed assertion: tests/test_malformed.py prints the CPU time and
    memory that refusals of this kind take)."""
    row = "[[" + ", ".join(["0.5"] * 1_000_000) + "]]"
    text = replace(OPSM, "log_probs:     [[0.0, 0.0, 0.0]]", f"log_probs:     {row}")
    t0 = time.process_time()
    assert_problem(tmp_path, text, 7, "inputs.log_probs", "100000", "SENTINEL_MAX_ELEMENTS")
    print(f"a million-value row refused in {time.process_time() - t0:.2f} s of CPU")


def test_the_size_limit_is_set_by_an_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SENTINEL_MAX_ELEMENTS", "2")
    assert_problem(tmp_path, OPSM, 7, "inputs.log_probs", "more than 2")
    monkeypatch.setenv("SENTINEL_MAX_ELEMENTS", "3")
    assert load_file(write(tmp_path, OPSM))
    monkeypatch.setenv("SENTINEL_MAX_ELEMENTS", "lots")
    assert_problem(tmp_path, OPSM, 1, "", "SENTINEL_MAX_ELEMENTS")


def test_empty_inputs_are_refused(tmp_path):
    assert_problem(tmp_path, replace(OPSM, "[[-0.5, 0.25, -0.25]]", "[[]]"), 9, "inputs.advantages", "empty")
    assert_problem(tmp_path, replace(ADV, "rewards:        [1.0, 2.0]", "rewards:        []"), 8, "inputs.rewards", "empty")


def test_values_beyond_their_dtype_are_refused(tmp_path):
    assert_problem(tmp_path, replace(GRPO, "group:     [0, 0, 1, 1]", "group:     [0, 0, 1, 99999999999999999999]"),
                   7, "inputs.group", "int64")
    assert_problem(tmp_path, replace(OPSM, "[[-0.5, 0.25, -0.25]]", "[[-0.5, 0.25, 1e39]]"), 9,
                   "inputs.advantages", "float32")


def test_bytes_that_are_not_utf8_name_their_line(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes(OPSM.replace("title: OPSM on one sequence", "title: caf\xe9").encode("latin-1"))
    with pytest.raises(SpecError) as ei:
        load_file(p)
    assert ei.value.lines() == [f"{p}:2: not UTF-8: byte 0xe9 at offset {OPSM.index('OPSM on') + 3}"]


def test_a_scenario_for_other_targets_is_neither_run_nor_reported():
    """`targets: [trl]` (TRL's own arms, scenarios/policy/trl-arms.yaml) on the reference: no result
    at all, not `unsupported` (which says the target lacks a function or option)."""
    from sentinel.catalog import catalog_path
    from sentinel.runner import TargetSpec, run
    from sentinel.spec import load_paths

    mine = [s for s in load_paths([catalog_path() / "policy" / "trl-arms.yaml"])]
    assert mine and all(s.targets == ["trl"] for s in mine)
    assert run(mine, [TargetSpec("reference")]).results == []
