"""Toy targets for the differential hunt's referee (imported by the worker as
`hunt_referee_adapter:ScaledKl`; the tests put this folder on PYTHONPATH).

ScaledKl's k1 KL is 1.5 * (log_probs - ref_log_probs) at valid tokens: masked positions,
padding, row order and inputs are all handled right, so no invariant family on `kl` tells it
from the correct k1; only the reference math on the same input does. It has k1 only.
"""

from __future__ import annotations

import torch

from sentinel.adapters.contract import Adapter, BoundaryResult
from sentinel.errors import Unsupported


class ScaledKl(Adapter):
    name = "hunt-scaled-kl"

    def b_kl(self, inputs, config):
        if config.get("kl_type", "k1") != "k1":
            raise Unsupported(f"no {config['kl_type']} here")
        m = inputs["loss_mask"].bool()
        d = 1.5 * (inputs["log_probs"] - inputs["ref_log_probs"])
        return BoundaryResult({"kl": torch.where(m, d, torch.zeros_like(d))})
