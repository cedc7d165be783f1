"""Toy targets for the hunt's reach (imported by the worker as `hunt_reach_adapter:NAME`; the
tests put this folder on PYTHONPATH).

UnclampedLowVarKl: the reference, but its low_var_kl is k3 without the [-10, 10] clamp. k3
passes 10 only where |log pi - log ref| is about 11 or more, which the value grids (log-probs
in [-1.5, 0]) never draw: only a far log-ratio (relations.RELATIONS "far") reaches it.

KlWithArgs / KlWritesArgs: a k1 KL through a trainer-style function that reads an args object;
the second also halves args.kl_coef in place. Outputs and inputs are identical: only the
args change (an extra, `config:kl_coef`) tells them apart.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sentinel.adapters.contract import BoundaryResult
from sentinel.adapters.observables import Watch, returned
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


def _trainer_kl(args, log_probs, ref_log_probs, mask, *, writes: bool):
    """A trainer-style KL that reads its args object (and, `writes`, changes it in place, as a
    function that folds a schedule into its config would)."""
    kl = (log_probs - ref_log_probs) * mask
    if writes:
        args.kl_coef = args.kl_coef * 0.5
    return kl, {"kl_mean": kl.sum() / mask.sum().clamp_min(1) * args.kl_coef}


class KlWithArgs(ReferenceAdapter):
    """k1 through `_trainer_kl`; its metrics dict and its args changes as extras."""

    name = "hunt-kl-with-args"
    writes = False

    def b_kl(self, inputs, config):
        if config.get("kl_type") != "k1":
            return super().b_kl(inputs, config)
        args = SimpleNamespace(kl_coef=0.1)
        watch = Watch(args)
        kl, metrics = _trainer_kl(args, inputs["log_probs"], inputs["ref_log_probs"], inputs["loss_mask"],
                                  writes=self.writes)
        return BoundaryResult({"kl": kl}, extras={**returned({"metrics": metrics}), **watch.changes()})


class KlWritesArgs(KlWithArgs):
    """KlWithArgs whose function halves args.kl_coef in place: only `config:kl_coef` shows it."""

    name = "hunt-kl-writes-args"
    writes = True
