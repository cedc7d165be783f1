"""The trainer composes, not the adapter (issue 19 item 4): a spy, not a grep.

While every catalog scenario of a target runs through its adapter, `composing.Audit` (a
TorchFunctionMode) sees each torch op with its caller: a tensor the trainer's code made, or one
the adapter derived from it, must not be reduced, normalised or scaled by adapter code outside a
step the boundary declares (`@implements(..., steps=(fn,))`, `fn` marked `@trainer_step(reason)`).
The planted adapters below show it failing; the real targets run in a subprocess each (one
interpreter holds one checkout) and are skipped without their SENTINEL_<T>_REPO.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sentinel import spec
from sentinel.adapters.composing import Audit, adapter_roots, trainer_step
from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.catalog import catalog_path
from sentinel_adapters.reference.adapter import ReferenceAdapter

from compose_audit import audit

HERE = Path(__file__).resolve().parent


@trainer_step("a test's stand-in for a normaliser the trainer applies beyond one process")
def divide(loss: torch.Tensor, n: int) -> torch.Tensor:
    return loss / n


class Planted(ReferenceAdapter):
    """The reference, but loss_agg's result is divided by the batch size in adapter code."""

    @implements("loss_agg", calls=("sentinel_adapters.reference.ops:aggregate",))
    def b_loss_agg(self, inputs, config):
        res = super().b_loss_agg(inputs, config)
        n = inputs["loss_mask"].shape[0]
        return BoundaryResult({"loss": res.outputs["loss"] / n}, function=res.function)


class Declared(ReferenceAdapter):
    """The same division, run in a declared step of loss_agg."""

    @implements("loss_agg", calls=("sentinel_adapters.reference.ops:aggregate",), steps=(divide,))
    def b_loss_agg(self, inputs, config):
        res = super().b_loss_agg(inputs, config)
        return BoundaryResult({"loss": divide(res.outputs["loss"], inputs["loss_mask"].shape[0])},
                              function=res.function)


class Misdeclared(ReferenceAdapter):
    """The declared step run by a boundary that does not declare it (kl)."""

    @implements("kl", calls=("sentinel_adapters.reference.ops:kl_estimator",))
    def b_kl(self, inputs, config):
        res = super().b_kl(inputs, config)
        return BoundaryResult({"kl": divide(res.outputs["kl"], 1)}, function=res.function)


class Masking(ReferenceAdapter):
    """A product with the 0/1 loss mask (masking, not scaling): never a finding."""

    @implements("kl", calls=("sentinel_adapters.reference.ops:kl_estimator",))
    def b_kl(self, inputs, config):
        res = super().b_kl(inputs, config)
        return BoundaryResult({"kl": res.outputs["kl"] * inputs["loss_mask"]}, function=res.function)


class Crashing(ReferenceAdapter):
    """kl crashes on every call: the spy sees nothing of it."""

    @implements("kl", calls=("sentinel_adapters.reference.ops:kl_estimator",))
    def b_kl(self, inputs, config):
        raise RuntimeError("planted: the adapter's glue fails before the trainer runs")


def _scenarios(boundary: str) -> list:
    return [s for s in spec.load_paths([catalog_path()]) if s.boundary == boundary and s.applies_to("reference")][:3]


def _run(cls: type, boundary: str) -> dict:
    adapter = cls(None, torch.device("cpu"))
    adapter.load()
    return audit(adapter, "reference", _scenarios(boundary))


def test_an_undeclared_division_of_the_trainers_loss_is_flagged():
    got = _run(Planted, "loss_agg")
    assert got["calls"] > 0 and got["trainer_ops"] > 0
    assert got["findings"], got
    assert all("loss_agg: Planted.b_loss_agg applies div" in f and "test_composing.py" in f
               for f in got["findings"]), got["findings"]


def test_a_declared_step_is_allowed_only_on_the_boundary_that_declares_it():
    assert _run(Declared, "loss_agg")["findings"] == []
    got = _run(Misdeclared, "kl")
    assert got["findings"] and all("kl: divide applies div" in f for f in got["findings"]), got


def test_masking_a_trainer_value_is_not_scaling_it():
    got = _run(Masking, "kl")
    assert got["calls"] > 0 and got["findings"] == []


def test_a_boundary_whose_every_call_crashed_is_blind_not_clean():
    got = _run(Crashing, "kl")
    assert got["findings"] == [] and got["calls"] == 0
    assert list(got["blind"]) == ["kl"] and "planted" in got["blind"]["kl"], got


def test_the_audit_sees_only_descendants_of_trainer_values():
    """The adapter's own arithmetic on the drawn inputs (a mask sum, a batch size) is layout."""
    mode = Audit([], adapter_roots(ReferenceAdapter(None, torch.device("cpu"))))
    mode.boundary("loss_agg")
    with mode:
        (torch.ones(3) / 3).sum()
    assert mode.findings == [] and mode.trainer_ops == 0


def test_declaring_an_unmarked_step_fails_at_class_creation():
    with pytest.raises(TypeError, match="not marked @trainer_step"):
        implements("loss_agg", steps=(lambda x: x,))


def test_the_reference_adapter_composes_nothing():
    adapter = ReferenceAdapter(None, torch.device("cpu"))
    adapter.load()
    got = audit(adapter, "reference")
    assert got["calls"] > 50 and got["trainer_ops"] > 0 and got["blind"] == {}
    assert got["findings"] == [], got["findings"]


# --- real targets: one interpreter per checkout ---------------------------------------------

REAL = ["slime", "areal", "verl", "openrlhf", "trl"]


@pytest.mark.slow
@pytest.mark.parametrize("target", REAL)
def test_no_real_adapter_recomputes_what_its_trainer_does(target):
    env_name = f"SENTINEL_{target.upper()}_REPO"
    repo = os.environ.get(env_name)
    if not repo:
        pytest.skip(f"{env_name} (path of a {target} checkout) is not set")
    proc = subprocess.run([sys.executable, str(HERE / "compose_audit.py"), target, repo], capture_output=True,
                          text=True, timeout=1800, env={**os.environ, "PYTHONPATH": str(HERE)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["calls"] > 0 and got["trainer_ops"] > 0, got
    assert got["blind"] == {}, got["blind"]  # a boundary the spy never saw run proves nothing
    assert got["findings"] == [], got["findings"]
