"""The pytest plugin: scenario YAML files are test files (pytester, real subprocess runs)."""

from __future__ import annotations

import os
import shutil

import pytest

from sentinel.catalog import catalog_path

pytest_plugins = ["pytester"]

OPSM = catalog_path() / "seeds" / "opsm-mixed-advantage.yaml"
KL = catalog_path() / "kl" / "kl-estimators.yaml"
# the plugin arrives through its pytest11 entry point; name it where autoloading is off
PLUGIN = ["-p", "sentinel.pytest_plugin"] if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") else []


@pytest.fixture
def scenario_dir(pytester):
    shutil.copy(OPSM, pytester.path / "test_opsm.yaml")
    shutil.copy(KL, pytester.path / "test_kl.yaml")
    return pytester


def test_holding_scenarios_pass(scenario_dir):
    # a YAML file that is not a scenario is left alone
    scenario_dir.path.joinpath("test_config.yaml").write_text("name: ci\nsteps: [a, b]\n")
    result = scenario_dir.runpytest_subprocess(*PLUGIN, "-v")
    result.assert_outcomes(passed=4)  # one OPSM scenario, three KL estimators
    result.stdout.fnmatch_lines(["*test_kl.yaml::kl-k1 PASSED*", "*test_opsm.yaml::opsm-mixed-advantage PASSED*"])
    assert "test_config.yaml" not in result.stdout.str()
    assert result.ret == 0


def test_planted_bug_fails_with_difference_and_positions(scenario_dir):
    result = scenario_dir.runpytest_subprocess(*PLUGIN, "--sentinel-plant", "opsm-token-level")
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*opsm-mixed-advantage on reference+opsm-token-level: violated*"])
    assert "FAILED test_opsm.yaml::opsm-mixed-advantage" in out
    assert "difference: [[0.0, 1.0, 0.0]]" in out
    assert "positions:  [[0, 1]]" in out
    assert "observed:   [[0.0, 1.0, 0.0]]" in out
    assert "difference: -0.030656620860099792" in out
    assert result.ret == 1


def test_malformed_scenario_file_is_a_collection_error_naming_the_line(pytester):
    pytester.path.joinpath("test_bad.yaml").write_text(
        "id: bad\n"
        "title: broken\n"
        "boundary: opsm_mask\n"
        "inputs:\n"
        "  log_probs: [[0.0, 0.0]]\n"
        "  old_log_probs: [[0.0, 0.0]]\n"
        "  advantages: [[0.0, 0.0]]\n"
        "  loss_mask: [[1, 7]]\n"
        "invariants:\n"
        "  - sequence_uniform: {output: opsm_mask}\n")
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "ERROR collecting test_bad.yaml" in out
    assert "test_bad.yaml:8: inputs.loss_mask: a mask holds only 0 and 1" in out


def test_tags_are_markers(scenario_dir):
    # opsm-mixed-advantage is tagged `seed`; the KL estimators are not
    result = scenario_dir.runpytest_subprocess(*PLUGIN, "-m", "seed", "--strict-markers")
    result.assert_outcomes(passed=1, deselected=3)
    assert result.ret == 0


def test_a_scenario_for_other_targets_is_skipped_with_why(pytester):
    """`targets: [trl]` on the default target (the reference): the runner gives it no result, so the
    item skips and says for whom it is written (it raised KeyError)."""
    shutil.copy(catalog_path() / "policy" / "trl-arms.yaml", pytester.path / "test_trl.yaml")
    result = pytester.runpytest_subprocess(*PLUGIN, "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and "failed" not in outcomes and "error" not in outcomes, outcomes
    result.stdout.fnmatch_lines(["*written for trl, not reference*"])
