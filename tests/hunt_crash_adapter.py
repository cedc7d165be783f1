"""A misbehaving target for the hunt's isolation tests (imported by the worker as
`hunt_crash_adapter:CrashAdapter`; the tests put this folder on PYTHONPATH).

- loss_agg segfaults on any batch of two rows or more;
- kl is correct, but has only kl_type k1 (Unsupported for the others);
- policy_loss is Unsupported whatever the config;
- NoDefaultAdapter: kl lacks only its default kl_type k1.
"""

from __future__ import annotations

import os
import signal

import torch

from sentinel.adapters.contract import Adapter, BoundaryResult
from sentinel.errors import Unsupported


class CrashAdapter(Adapter):
    name = "hunt-crash"

    def b_loss_agg(self, inputs, config):
        m = inputs["loss_mask"].bool()
        if m.shape[0] >= 2:
            os.kill(os.getpid(), signal.SIGSEGV)
        x = torch.where(m, inputs["values"], torch.zeros_like(inputs["values"]))
        return BoundaryResult({"loss": x.sum() / m.sum().clamp_min(1)})

    def b_kl(self, inputs, config):
        if config.get("kl_type", "k1") != "k1":
            raise Unsupported(f"no {config['kl_type']} here")
        m = inputs["loss_mask"].bool()
        d = inputs["log_probs"] - inputs["ref_log_probs"]
        return BoundaryResult({"kl": torch.where(m, d, torch.zeros_like(d))})

    def b_policy_loss(self, inputs, config):
        raise Unsupported("this target has no policy loss")


class NoDefaultAdapter(Adapter):
    """kl without its default kl_type k1 (Unsupported), every other kl_type answered (the same
    on both sides of a hunt of it against itself): slime's is_correction lacks its default method."""

    name = "hunt-no-default"

    def b_kl(self, inputs, config):
        if config.get("kl_type", "k1") == "k1":
            raise Unsupported("no k1 here")
        m = inputs["loss_mask"].bool()
        d = inputs["log_probs"] - inputs["ref_log_probs"]
        return BoundaryResult({"kl": torch.where(m, d, torch.zeros_like(d))})
