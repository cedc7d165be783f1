"""A misbehaving target for the hunt's isolation tests (imported by the worker as
`hunt_crash_adapter:CrashAdapter`; the tests put this folder on PYTHONPATH).

- loss_agg segfaults on any batch of two rows or more;
- kl is correct, but has only kl_type k1 (Unsupported for the others);
- policy_loss is Unsupported whatever the config;
- NoDefaultAdapter: kl lacks only its default kl_type k1;
- JointAdapter: reward_norm's group std runs only beside the group mean and eps 1e-6.
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


class JointAdapter(Adapter):
    """reward_norm whose std over groups runs only beside the mean over groups and eps 1e-6, two
    other keys off their first choice (slime's RolloutManager._post_process_rewards: std and mean
    over the same groups, eps fixed): refused alone and beside any one other change."""

    name = "hunt-joint"

    def b_reward_norm(self, inputs, config):
        mean_level, std_level, eps = config["mean_level"], config["std_level"], config["eps"]
        if std_level == "group" and (mean_level != "group" or eps != 1e-6):
            raise Unsupported("std over groups only beside the mean over groups and eps 1e-6")
        r = inputs["rewards"]
        if mean_level is None:
            return BoundaryResult({"rewards": r.clone()})
        ids = inputs["group"] if mean_level == "group" else torch.zeros_like(r, dtype=torch.long)
        out = torch.empty_like(r)
        for g in ids.unique():
            at = ids == g
            x = r[at] - r[at].mean()
            out[at] = x / (x.std(unbiased=False) + eps) if std_level else x
        return BoundaryResult({"rewards": out})
