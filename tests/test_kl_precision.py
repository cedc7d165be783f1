"""The KL estimators' precision scenarios (scenarios/kl/kl-precision.yaml): each holds on the
reference, which computes log r in at least fp32, and is violated by the reference's kl
estimator as it was before (log r subtracted in the log-probs' own dtype: bf16 in, bf16 out)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sentinel import spec
from test_reference_survivors import _verdicts  # the scenario run in-process on an adapter
from sentinel_adapters.reference import ops as R
from sentinel_adapters.reference.adapter import ReferenceAdapter

FILE = Path(__file__).resolve().parents[1] / "scenarios" / "kl" / "kl-precision.yaml"


def _in_their_dtype(log_probs, ref_log_probs, loss_mask, kl_type="k1"):
    """The planted bug: the estimator in the inputs' dtype (the reference before this check)."""
    r = R.keep(log_probs - ref_log_probs, loss_mask)
    kl = {"k1": r, "k2": 0.5 * r ** 2, "k3": torch.exp(-r) - 1.0 + r}[kl_type]
    return R.keep(kl, loss_mask)


@pytest.mark.parametrize("sc", spec.load_file(FILE), ids=lambda s: s.id)
def test_kl_precision_holds_on_the_reference_and_catches_bf16_arithmetic(sc):
    assert _verdicts(sc, ReferenceAdapter()) == {"held"}
    planted = ReferenceAdapter()
    planted.ops.kl_estimator = _in_their_dtype  # this adapter's table only
    assert "violated" in _verdicts(sc, planted)
