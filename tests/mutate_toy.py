"""A toy target for `sentinel mutate`'s tests: one function, `kl_k1`, whose nine mutants are
known (the worker imports `mutate_toy:ToyAdapter`; the tests put this folder on PYTHONPATH).

Of its mutants, five change what the catalog or the hunt observes (killed), one swaps
`torch.where`'s condition with a float tensor and fails the same way on every input (error),
and two cannot change anything: `.detach()` removed from a bool mask, and added to a
tensor of zeros (neither has a gradient) - one is claimed equivalent in the test's
equivalent.yaml, the other is left a survivor. `ReachToyAdapter` maps `kl_k1_clipped`, whose
`clip` branch no scenario or hunt example runs (its survivors are not reached).
"""

from __future__ import annotations

import torch

from sentinel.adapters.contract import Adapter, BoundaryResult, FunctionRef, implements
from sentinel.errors import Unsupported


def kl_k1(log_probs, ref_log_probs, loss_mask):
    """k1 = log pi - log ref at valid tokens, 0 elsewhere (selected, never multiplied)."""
    valid = loss_mask.bool().detach()
    diff = (log_probs - ref_log_probs) * 1.0
    zeros = torch.zeros_like(diff)
    return torch.where(valid, diff, zeros)


class ToyAdapter(Adapter):
    name = "mutate-toy"

    @implements("kl", calls=("mutate_toy:kl_k1",))
    def b_kl(self, inputs, config):
        return _k1(kl_k1, inputs, config)


def _k1(fn, inputs, config) -> BoundaryResult:
    if config.get("kl_type", "k1") not in ("k1", "kl"):
        raise Unsupported("the toy has k1 only")
    kl = fn(inputs["log_probs"], inputs["ref_log_probs"], inputs["loss_mask"])
    return BoundaryResult({"kl": kl}, function=FunctionRef.of(fn))


def kl_k1_clipped(log_probs, ref_log_probs, loss_mask, clip=None):
    """k1 at valid tokens, bounded by `clip`: the adapter never passes one, so no scenario and no
    hunt example runs that branch (its mutants survive, not reached)."""
    diff = log_probs - ref_log_probs
    if clip is not None:
        diff = diff.clamp(-clip, clip)
    zeros = torch.zeros_like(diff)
    return torch.where(loss_mask.bool(), diff, zeros)


class ReachToyAdapter(ToyAdapter):
    name = "mutate-toy-reach"

    @implements("kl", calls=("mutate_toy:kl_k1_clipped",))
    def b_kl(self, inputs, config):
        return _k1(kl_k1_clipped, inputs, config)


def kl_k1_sized(log_probs, ref_log_probs, loss_mask):
    """k1 at valid tokens, 0 elsewhere from a zeros tensor built by shape: its mutant that swaps
    `rows, cols` raises on every non-square batch (every catalog scenario) and answers on a
    square one (drawn by the hunt), so the hunt tells it apart: killed, not an error."""
    rows, cols = loss_mask.shape
    zeros = torch.zeros(rows, cols, dtype=log_probs.dtype)
    return torch.where(loss_mask.bool(), log_probs - ref_log_probs, zeros)


class SizedToyAdapter(ToyAdapter):
    name = "mutate-toy-sized"

    @implements("kl", calls=("mutate_toy:kl_k1_sized",))
    def b_kl(self, inputs, config):
        return _k1(kl_k1_sized, inputs, config)
