"""A `config:` extra a scenario names is observed even where the call left it as it was.

`Watch.changes` names what a call changed on its args/config object; an attribute it did not
change is no change (a hunt compares nothing there), but for a scenario that names it the fact
is an observation: `config:X` 0.0, `config:X.value` the value it kept. Absent only where the
object has no such attribute (the target has no such value: skipped, then `unsupported`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sentinel.runner import TargetSpec, run
from sentinel.spec import load_text

HERE = Path(__file__).parent

SCENARIO = """
id: kl-coef-{name}
title: the args object's kl_coef as observed after a k1 KL call
boundary: kl
config: {{kl_type: k1}}
inputs:
  log_probs:     [[-0.5, -1.0]]
  ref_log_probs: [[-0.6, -0.8]]
  loss_mask:     [[1, 1]]
invariants:
  - close: {{output: "{output}", expected: {expected}, atol: 1.0e-6}}
"""


def _verdict(monkeypatch, adapter: str, name: str, output: str, expected: float) -> tuple[str, str]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    sc, = load_text(SCENARIO.format(name=name, output=output, expected=expected), f"<{name}>")
    res, = run([sc], [TargetSpec(f"hunt_reach_adapter:{adapter}")], timeout=60).results
    return res.verdict, res.reason


@pytest.mark.parametrize("adapter, output, expected, verdict", [
    ("KlWithArgs", "config:kl_coef", 0.0, "holds"),            # left as it was: observed unchanged
    ("KlWithArgs", "config:kl_coef", 1.0, "violated"),         # a scenario that wants it set is told it was not
    ("KlWithArgs", "config:kl_coef.value", 0.1, "holds"),      # the value it kept
    ("KlWithArgs", "config:kl_coef.value", 0.05, "violated"),
    ("KlWritesArgs", "config:kl_coef", 1.0, "holds"),          # set by the call, as before
    ("KlWritesArgs", "config:kl_coef.value", 0.05, "holds"),
    ("KlWithArgs", "config:no_such_attribute", 0.0, "unsupported"),  # nothing of that name to observe
])
def test_a_named_config_extra_is_observed_changed_or_not(monkeypatch, adapter, output, expected, verdict):
    got, reason = _verdict(monkeypatch, adapter, output.replace(":", "-").replace(".", "-").replace("_", "-"),
                           output, expected)
    assert got == verdict, reason
