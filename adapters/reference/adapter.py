"""The bundled reference target's adapter: each boundary composed from the correct math of
`ops.py`, called through its table `REFERENCE_OPS`.

With options {"plant": NAME} one entry of that table is replaced by the plant's known-wrong
function (`plants.py`: one record per plant).
"""

from __future__ import annotations

from types import SimpleNamespace
from pathlib import Path
from typing import Any

import torch

from sentinel.adapters.contract import Adapter, BoundaryResult, FunctionRef, implements
from sentinel.errors import TargetLoadError, Unsupported

from . import ops as R
from .ops import REFERENCE_OPS, keep
from .plants import PLANTS

# --- the table, with a plant ------------------------------------------------------------

def ops_for(plant: str | None) -> SimpleNamespace:
    """The reference table, with one entry replaced when a plant is named."""
    if not plant:
        return SimpleNamespace(**REFERENCE_OPS)
    if plant not in PLANTS:
        raise TargetLoadError(f"unknown plant {plant!r} (known: {', '.join(sorted(PLANTS))})")
    return SimpleNamespace(**{**REFERENCE_OPS, PLANTS[plant].replaces: PLANTS[plant].code})


# --- the adapter ------------------------------------------------------------------------

# The reference's "trainer" is its math (ops.py) and the planted bugs (plants.py): fixed paths,
# resolved once, not on every call.
_HERE = Path(__file__).resolve().parent
_ROOTS = (str(_HERE / "ops.py"), str(_HERE / "plants.py"))


def _version() -> str:
    try:
        from sentinel import __version__
        return __version__
    except Exception:
        return "bundled"


class ReferenceAdapter(Adapter):
    """The bundled correct implementation; options {"plant": NAME} swap in one planted bug."""

    name = "reference"
    description = "Bundled reference implementation of the loss-path math (optionally with a planted bug)."
    # the hunt draws the decoupled loss too (its weight and product were reached by scenarios only;
    # a trainer without it refuses it: Unsupported, excluded from a differential hunt against it)
    option_domains = {"policy_loss": {"use_decoupled_loss": (True,)}, "cispo_loss": {"use_decoupled_loss": (True,)}}
    stateless = ("ops.py is functions of their arguments (no module state, no caches); the adapter object "
                 "holds only its plant, set when the worker loads it, before any scenario")
    # each raises on a choice outside its boundary's declared option values, which a scenario
    # file or a hunt draw can never pass (spec.py refuses it when the file loads)
    _GUARD = "raises on an option value outside the boundary's declared choices, which no scenario can pass"
    unreachable = {f"{R.__name__}:aggregate": {'elif mode != "seq-mean-token-sum" -> raise ValueError': _GUARD},
                   f"{R.__name__}:metric_mean": {"if agg not in -> raise ValueError": _GUARD},
                   f"{R.__name__}:kl_estimator": {'elif kl_type in ("k3", "low_var_kl") -> raise ValueError': _GUARD},
                   f"{R.__name__}:masked_reduce": {"if dim not in -> raise ValueError": _GUARD,
                                                   'elif op == "var" -> raise ValueError': _GUARD}}

    def __init__(self, root=None, device=torch.device("cpu"), options=None):
        super().__init__(root, device, options)
        self.plant = self.options.get("plant")
        self.ops = ops_for(self.plant)

    def trainer_roots(self) -> list[str]:
        """ops.py and plants.py (`_ROOTS`)."""
        return list(_ROOTS)

    def load(self) -> dict[str, Any]:
        facts = {"version": _version()}
        if self.plant:
            facts["plant"] = self.plant
        return facts

    def _result(self, outputs: dict[str, Any], fn_name: str) -> BoundaryResult:
        return BoundaryResult(outputs, function=FunctionRef.of(getattr(self.ops, fn_name)))

    def _policy(self, fn_name, inputs, config, *clip):
        m = inputs["loss_mask"]
        lp, old, adv = (keep(inputs[k], m) for k in ("log_probs", "old_log_probs", "advantages"))
        if config.get("rejection_sampling") is not None:
            raise Unsupported("rejection_sampling maps a target's own option (AReaL's behav_imp_weight_cap, ...); "
                              "the reference has none")
        weights = None
        if config.get("use_decoupled_loss"):
            if "rollout_log_probs" not in inputs:
                raise ValueError("use_decoupled_loss needs input rollout_log_probs (the behaviour policy)")
            weights = keep(self.ops.decoupled_weight(old, keep(inputs["rollout_log_probs"], m)), m)
        level = config.get("importance_sampling_level") or "token"
        if level == "sequence":  # the ratio against old is the sequence ratio
            lp, old = self.ops.gspo_token_log_ratio(lp, old, m), torch.zeros_like(old)
        elif level != "token":
            raise Unsupported(f"importance_sampling_level {level!r}: the reference has token and sequence")
        loss, clipfrac = getattr(self.ops, fn_name)(lp, old, adv, *clip)
        loss, clipfrac = keep(loss, m), keep(clipfrac, m)
        outputs = {"pg_loss": loss, "clipfrac": clipfrac}
        if weights is not None:
            loss = outputs["pg_loss"] = self.ops.decoupled_loss(loss, weights)
            outputs["weights"] = weights
        outputs["loss"] = self.ops.aggregate(loss, m, config.get("loss_agg", "token-mean"))
        return self._result(outputs, fn_name)

    @implements("policy_loss", calls=(R.ppo_policy_loss, R.gspo_token_log_ratio, R.decoupled_weight, R.decoupled_loss,
                                      R.aggregate))
    def b_policy_loss(self, inputs, config):
        clip = (config.get("eps_clip", 0.2), config.get("eps_clip_high"), config.get("eps_clip_c"))
        return self._policy("ppo_policy_loss", inputs, config, *clip)

    @implements("cispo_loss", calls=(R.cispo_loss, R.gspo_token_log_ratio, R.decoupled_weight, R.decoupled_loss,
                                      R.aggregate))
    def b_cispo_loss(self, inputs, config):
        clip = (config.get("eps_clip", 1.0), config.get("eps_clip_high", 0.28))
        return self._policy("cispo_loss", inputs, config, *clip)

    @implements("opsm_mask", calls=(R.opsm_mask, R.ppo_policy_loss, R.aggregate))
    def b_opsm_mask(self, inputs, config):
        m = inputs["loss_mask"]
        lp, old, adv = inputs["log_probs"], inputs["old_log_probs"], inputs["advantages"]
        # the KL to the policy that sampled the sequence: the rollout engine's where given
        sampled = inputs.get("rollout_log_probs", old)
        mask, clipfrac = self.ops.opsm_mask(lp, sampled, adv, m, config.get("opsm_delta", 0.1))
        clip = (config.get("eps_clip", 0.2), config.get("eps_clip_high"), config.get("eps_clip_c"))
        token_loss, _ = self.ops.ppo_policy_loss(keep(lp, m), keep(old, m), keep(adv, m), *clip)
        pg_loss = keep(token_loss, m) * mask
        reduced = self.ops.aggregate(pg_loss, m, "token-mean")
        return self._result({"opsm_mask": mask, "opsm_clipfrac": clipfrac, "pg_loss": pg_loss,
                             "reduced_policy_loss": reduced}, "opsm_mask")

    @implements("gspo_kl", calls=(R.gspo_seq_kl,))
    def b_gspo_kl(self, inputs, config):
        seq_kl = self.ops.gspo_seq_kl(inputs["log_probs"], inputs["old_log_probs"], inputs["loss_mask"])
        return self._result({"seq_kl": seq_kl}, "gspo_seq_kl")

    @implements("kl", calls=(R.kl_estimator,))
    def b_kl(self, inputs, config):
        kl = self.ops.kl_estimator(inputs["log_probs"], inputs["ref_log_probs"], inputs["loss_mask"],
                                   config.get("kl_type", "k1"))
        return self._result({"kl": kl}, "kl_estimator")

    @implements("gae", calls=(R.gae,))
    def b_gae(self, inputs, config):
        adv, ret = self.ops.gae(inputs["token_rewards"], inputs["values"], inputs["loss_mask"],
                                config.get("gamma", 1.0), config.get("lam", 1.0))
        return self._result({"advantages": adv, "returns": ret}, "gae")

    @implements("reward_norm", calls=(R.group_index, R.reward_norm))
    def b_reward_norm(self, inputs, config):
        if config.get("mean_leave1out") or config.get("std_unbiased") is False:
            raise Unsupported("the reference normalises with the plain group mean and the unbiased std")
        r = inputs["rewards"]
        rows = inputs["mask"].bool() if "mask" in inputs else torch.ones_like(r, dtype=torch.bool)
        index = self.ops.group_index(inputs.get("group"), config.get("group_size"), r.shape[0]).to(r.device)
        out = self.ops.reward_norm(r, rows, index, config.get("mean_level", "batch"),
                                   config.get("std_level", "batch"),
                                   1e-5 if config.get("eps") is None else config["eps"])
        return self._result({"rewards": out}, "reward_norm")

    @implements("advantages", calls=(R.kl_estimator, R.group_index, R.task_rewards, R.reward_norm, R.shape_token_rewards,
                                      R.gae, R.whiten))
    def b_advantages(self, inputs, config):
        """Scalar rewards -> (advantages, returns, logged_kl, token_rewards) for one estimator."""
        m, r = inputs["loss_mask"], inputs["rewards"]
        estimator, kl_coef = config.get("estimator", "gae"), config.get("kl_coef", 0.0)
        if config.get("reward_bias", 0.0) != 0.0 or config.get("reward_scaling", 1.0) != 1.0 or config.get("adv_norm"):
            raise Unsupported("the reference has no reward_bias / reward_scaling / adv_norm (AReaL options)")
        if "log_probs" in inputs and "ref_log_probs" in inputs:
            kl = self.ops.kl_estimator(inputs["log_probs"], inputs["ref_log_probs"], m, config.get("kl_type", "k1"))
        else:
            kl = torch.zeros_like(m)
        rows = torch.ones_like(r, dtype=torch.bool)
        if config.get("mask_no_eos_with_zero") and "attention_mask" in inputs:
            rows = ~inputs["attention_mask"].bool().all(-1)  # a row with no padding never emitted EOS
        index = self.ops.group_index(inputs.get("group"), config.get("group_size"), r.shape[0]).to(r.device)
        norm = config.get("reward_norm")
        if estimator == "grpo" and not norm:
            norm = {"mean_level": "group", "std_level": "group", "eps": 1e-6}
        if estimator == "reinforce_plus_plus_baseline":  # reward minus its group mean
            norm = {**(norm or {}), "mean_level": "group", "std_level": (norm or {}).get("std_level")}
        r = self.ops.task_rewards(r, rows, index, norm, config.get("reward_clip"), self.ops.reward_norm)
        token_rewards = self.ops.shape_token_rewards(kl, r, m, kl_coef)

        if estimator == "gae":
            values = inputs.get("values", torch.zeros_like(m))
            adv, ret = self.ops.gae(token_rewards, values, m, config.get("gamma", 1.0), config.get("lam", 1.0))
        elif estimator == "reinforce_plus_plus":  # discounted return of the shaped rewards
            adv, ret = self.ops.gae(token_rewards, torch.zeros_like(m), m, config.get("gamma", 1.0), 1.0)
        elif estimator == "grpo":
            adv = keep(r[:, None].expand_as(m), m)
            ret = adv
        elif estimator == "reinforce_plus_plus_baseline":
            adv = keep(r[:, None] - kl_coef * kl, m)
            ret = adv
        else:
            raise Unsupported(f"the reference has no estimator {estimator!r} "
                              "(gae, grpo, reinforce_plus_plus, reinforce_plus_plus_baseline)")
        if config.get("normalize_advantages"):
            adv = self.ops.whiten(adv, m)
        outputs = {"advantages": adv, "returns": ret, "logged_kl": kl, "token_rewards": token_rewards}
        return self._result(outputs, "gae" if estimator == "gae" else "task_rewards")

    @implements("is_correction", calls=(R.off_policy_is, R.vanilla_tis, R.icepop, R.aggregate))
    def b_is_correction(self, inputs, config):
        m = inputs["loss_mask"]
        names = ("log_probs", "old_log_probs", "rollout_log_probs", "advantages")
        lp, old, roll, adv = (keep(inputs[k], m) for k in names)
        method = config.get("method", "off_policy_is")
        if method not in ("off_policy_is", "vanilla_tis", "icepop"):
            raise ValueError(f"unknown is_correction method {method!r}")
        cfg = {"eps_clip": 0.2, "eps_clip_high": 0.2, "tis_clip_low": 0.0, "tis_clip": 2.0, **config}
        if cfg["eps_clip_high"] is None:
            cfg["eps_clip_high"] = cfg["eps_clip"]
        w, pg_loss = getattr(self.ops, method)(lp, old, roll, adv, cfg)
        w, pg_loss = keep(w, m), keep(pg_loss, m)
        loss = self.ops.aggregate(pg_loss, m, config.get("loss_agg", "token-mean"))
        return self._result({"weights": w, "pg_loss": pg_loss, "loss": loss}, method)

    @implements("loss_agg", calls=(R.aggregate,))
    def b_loss_agg(self, inputs, config):
        loss = self.ops.aggregate(inputs["values"], inputs["loss_mask"], config.get("mode", "token-mean"))
        return self._result({"loss": loss}, "aggregate")

    # --- surfaces beside the loss ---------------------------------------------------------

    @implements("logprobs", calls=(R.token_log_probs,))
    def b_logprobs(self, inputs, config):
        log_probs, entropy = self.ops.token_log_probs(inputs["logits"], inputs["tokens"], inputs["loss_mask"],
                                                      config["temperature"])
        return self._result({"log_probs": log_probs, "entropy": entropy}, "token_log_probs")

    @implements("actor_logprobs", calls=(R.actor_log_probs, R.micro_batches, R.forward_micro_batch, R.restore_order,
                                         R.token_log_probs))
    def b_actor_logprobs(self, inputs, config):
        options = {k: config[k] for k in ("temperature", "micro_batch_size", "use_dynamic_bsz", "max_token_len",
                                          "use_remove_padding")}
        log_probs, entropy = self.ops.actor_log_probs(
            inputs["logits"], inputs["tokens"], inputs["attention_mask"], inputs["loss_mask"], **options,
            split=self.ops.micro_batches, forward=self.ops.forward_micro_batch, restore=self.ops.restore_order)
        return self._result({"log_probs": log_probs, "entropy": entropy}, "actor_log_probs")

    @implements("values", calls=(R.critic_values,))
    def b_values(self, inputs, config):
        # the rollout temperature is the policy's; the value path takes none
        return self._result({"values": self.ops.critic_values(inputs["value_head"], inputs["loss_mask"])},
                            "critic_values")

    @implements("metrics", calls=(R.policy_metrics, R.kl_estimator, R.metric_mean))
    def b_metrics(self, inputs, config):
        m = inputs["loss_mask"]
        agg = config["metric_agg"]
        out = self.ops.policy_metrics(inputs["log_probs"], inputs["old_log_probs"], inputs["advantages"], m,
                                      config["eps_clip"], config["eps_clip_high"], config["eps_clip_c"], agg)
        if "ref_log_probs" in inputs:
            kl = self.ops.kl_estimator(inputs["log_probs"], inputs["ref_log_probs"], m, config["kl_type"])
            out["kl_loss"] = self.ops.metric_mean(kl, m, agg)
        return self._result(out, "policy_metrics")

    @implements("masked_reduce", calls=(R.masked_reduce,))
    def b_masked_reduce(self, inputs, config):
        op, dim = config["op"], config["dim"]
        eps = 1e-8 if config["eps"] is None else float(config["eps"])
        out = self.ops.masked_reduce(inputs["values"], inputs["loss_mask"], op, dim, config["unbiased"],
                                     config["shift_mean"], eps)
        name = "whitened" if op == "whiten" else "result" if dim == "all" else "row_result"
        return self._result({name: out}, "masked_reduce")
