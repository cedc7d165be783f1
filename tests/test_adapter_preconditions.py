"""Declared preconditions (sentinel/adapters/contract.py `Precondition`): an adapter names, once, an input
its trainer's real data path never produces. `Adapter.call` refuses it before any target
code runs; `sentinel run` reports the scenario `excluded` with the precondition's name (not
`unsupported`, which means a function or option is absent); the hunt rejects such examples
and counts them per precondition in its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sentinel import hunt as H
from sentinel.runner import TargetSpec
from sentinel.adapters.contract import Adapter, Precondition
from sentinel.errors import PreconditionUnmet
from sentinel_adapters.reference.adapter import ReferenceAdapter
from untimed import HUNT

HERE = Path(__file__).resolve().parent
TARGET = "test_adapter_preconditions:NoEmptyRowReference"


def _every_row_trains(inputs, config) -> bool:
    return bool(torch.as_tensor(inputs["loss_mask"]).bool().any(-1).all())


class NoEmptyRowReference(ReferenceAdapter):
    """The reference, with one declared precondition on `kl` (a test double)."""

    name = "reference-no-empty-row"
    preconditions = {"every-row-trains": Precondition(
        _every_row_trains, "this trainer drops a sample with no trained token before the loss", "https://example.org/x",
        boundaries=("kl",))}


FULLY_MASKED = """id: kl-fully-masked-row
title: a fully masked row
boundary: kl
config: {kl_type: k1}
inputs:
  log_probs:     [[-0.5, -1.0], [-0.25, -0.5]]
  ref_log_probs: [[-0.5, -0.75], [-0.5, -0.5]]
  loss_mask:     [[1, 1], [0, 0]]
invariants:
  - finite: {}
"""


def test_call_refuses_before_the_target_runs():
    a = NoEmptyRowReference(None, torch.device("cpu"))
    a.load()
    t = torch.tensor
    ok = {"log_probs": t([[-0.5]]), "ref_log_probs": t([[-0.25]]), "loss_mask": t([[1.0]])}
    assert a.call("kl", ok, {}).outputs["kl"].shape == (1, 1)
    with pytest.raises(PreconditionUnmet) as e:
        a.call("kl", {**ok, "loss_mask": t([[0.0]])}, {})
    assert e.value.name == "every-row-trains" and "drops a sample" in str(e.value)
    # another boundary is not covered by it
    assert a.unmet("loss_agg", {"loss_mask": t([[0.0]])}, {}) is None


def test_a_precondition_must_be_declared_as_one():
    with pytest.raises(TypeError):
        type("Bad", (Adapter,), {"preconditions": {"x": (lambda i, c: True, "why", "")}})


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}


def test_run_reports_excluded_with_the_precondition(tmp_path):
    sc = tmp_path / "kl.yaml"
    sc.write_text(FULLY_MASKED)
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", "run", str(sc), "--target", TARGET, "-o", str(out)],
                       capture_output=True, text=True, env=_env())
    assert p.returncode == 5, p.stdout + p.stderr  # nothing ran: neither a violation nor a target error, nor a pass
    r, = json.loads(out.read_text())["results"]
    assert r["verdict"] == "excluded" and r["precondition"] == "every-row-trains"
    assert "drops a sample" in r["reason"]
    assert json.loads(out.read_text())["statistics"]["excluded"] == 1
    assert "excluded" in p.stdout


def test_hunt_counts_examples_per_precondition(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    rep = H.hunt(TargetSpec(TARGET), names=["kl.finite.nan"], max_examples=60, seed=3, db=None, out_dir=tmp_path,
                 **HUNT)
    prop, = rep.hunt.properties
    assert prop.status == "holds" and prop.examples > 0
    (reason, n), = prop.preconditions.items()
    assert reason.startswith("every-row-trains:") and n > 0
    assert prop.rejected >= n
