"""Toy targets for what a differential hunt observes (imported by the worker as
`hunt_observe_adapter:NAME`; the tests put this folder on PYTHONPATH).

UndetachedTis: the reference, but its vanilla_tis weight clip(pi_old / pi_rollout) is not
detached. Its values are the reference's; only a gradient through old_log_probs (an input a
trainer may hand over still in the graph: Boundary.graph_inputs) tells them apart.

KlLogged / KlShifted: a k1 KL that also logs the sum of the raw log-ratio over every position
(masked ones included: a logged copy that sees junk). KlShifted adds 0.5 at every masked
position and at valid ones where log pi < -1.4, so the logged copy differs on many more
examples (any with a masked position) than the output (a valid position that low): the hunt
must still report the output.
"""

from __future__ import annotations

import torch

from sentinel.adapters.contract import BoundaryResult
from sentinel.adapters.observables import returned
from sentinel_adapters.reference.adapter import ReferenceAdapter
from sentinel_adapters.reference.ops import keep


class UndetachedTis(ReferenceAdapter):
    name = "hunt-undetached-tis"

    def b_is_correction(self, inputs, config):
        if config.get("method") != "vanilla_tis":
            return super().b_is_correction(inputs, config)
        m = inputs["loss_mask"]
        lp, old, roll, adv = (keep(inputs[k], m) for k in ("log_probs", "old_log_probs", "rollout_log_probs",
                                                          "advantages"))
        w = torch.exp(old - roll).clamp(config["tis_clip_low"], config["tis_clip"])  # the detach forgotten
        high = config["eps_clip"] if config["eps_clip_high"] is None else config["eps_clip_high"]
        token, _ = self.ops.ppo_policy_loss(lp, old, adv, config["eps_clip"], high)
        pg_loss = keep(w * token, m)
        return BoundaryResult({"weights": keep(w, m), "pg_loss": pg_loss,
                               "loss": self.ops.aggregate(pg_loss, m, config["loss_agg"])})


class KlLogged(ReferenceAdapter):
    name = "hunt-kl-logged"
    shift = 0.0

    def b_kl(self, inputs, config):
        if config.get("kl_type") != "k1":
            return super().b_kl(inputs, config)
        lp, ref, m = inputs["log_probs"], inputs["ref_log_probs"], inputs["loss_mask"]
        # the shift: on every masked position (junk the output drops, the logged copy keeps), on a
        # valid one only where log pi < -1.4
        raw = lp - ref + self.shift * torch.where(m.bool(), lp < -1.4, torch.ones_like(m, dtype=torch.bool))
        finite = torch.nan_to_num(raw, nan=0.0, posinf=0.0, neginf=0.0)
        return BoundaryResult({"kl": keep(raw, m)}, extras=returned({"metrics": {"raw_sum": finite.sum()}}))


class KlShifted(KlLogged):
    name = "hunt-kl-shifted"
    shift = 0.5


class KlLoggedOnly(KlLogged):
    """The output is KlLogged's; only the logged copy (an extra) differs, at every position."""

    name = "hunt-kl-logged-only"

    def b_kl(self, inputs, config):
        res = super().b_kl(inputs, config)
        if config.get("kl_type") == "k1":
            res.extras["returned:metrics.raw_sum"] = res.extras["returned:metrics.raw_sum"] + 0.25
        return res


class KlNeedsMissing(ReferenceAdapter):
    """Its k1 KL needs a third-party package this environment lacks (as verl's batched
    log-probs need tensordict): a MissingDependency on every call, the harness's limit."""
    name = "hunt-kl-needs-missing"

    def b_kl(self, inputs, config):
        from sentinel.errors import MissingDependency
        raise MissingDependency("the k1 KL batches over a TensorDict: the tensordict package is not installed")


class KlOwnImportBroken(ReferenceAdapter):
    """Its k1 KL imports a module of its own package that this commit broke: TargetLoadError, the
    target's own regression, which a differential hunt must report."""
    name = "hunt-kl-own-import-broken"

    def b_kl(self, inputs, config):
        from sentinel.errors import TargetLoadError
        raise TargetLoadError("importing verl.trainer.ppo.core_algos needs module 'verl.utils.gone'")
