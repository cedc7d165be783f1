"""Toy targets for the hunt's reach (imported by the worker as `hunt_reach_adapter:NAME`; the
tests put this folder on PYTHONPATH).

UnclampedLowVarKl: the reference, but its low_var_kl is k3 without the [-10, 10] clamp. k3
passes 10 only where |log pi - log ref| is about 11 or more, which the value grids (log-probs
in [-1.5, 0]) never draw: only a far log-ratio (strategies.RELATIONS "far") reaches it.
"""

from __future__ import annotations

import torch

from sentinel.adapters.contract import BoundaryResult
from sentinel_adapters.reference.adapter import ReferenceAdapter
from sentinel_adapters.reference.ops import keep


class UnclampedLowVarKl(ReferenceAdapter):
    name = "hunt-unclamped-low-var-kl"

    def b_kl(self, inputs, config):
        if config.get("kl_type") != "low_var_kl":
            return super().b_kl(inputs, config)
        m = inputs["loss_mask"]
        log_ratio = keep(inputs["log_probs"] - inputs["ref_log_probs"], m)
        kl = torch.exp(-log_ratio) - 1.0 + log_ratio  # the clamp to [-10, 10] forgotten
        return BoundaryResult({"kl": keep(kl, m)})
