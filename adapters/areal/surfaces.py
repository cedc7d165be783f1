"""AReaL's surfaces beside the loss: log-probs and entropy from logits, the metrics its actor
loss logs, and its masked normalisation.

`Surfaces` is mixed into `ArealAdapter` (it uses the adapter's `_functional`, `_actor_mod`,
`_data`, `_norm_config`, `_ref` and `options`).

=============  =================================================================================
logprobs       ``areal.utils.functional.gather_logprobs_entropy(logits, labels, temperature)``; the
               canonical ``logits[b, t]`` predicts ``tokens[b, t]``, AReaL's layout once its
               engine has rolled the labels (``torch.roll(input_ids, -1)``). AReaL wraps the
               kernel in ``torch.compile``; it runs eagerly unless options.compile (the same math).
metrics        ``trainer.ppo.actor.grpo_loss_fn`` (-> ``ppo_actor_loss_fn``) with a fresh
               ``stats_tracker``, exported as ``PPOActor.ppo_update`` reports it:
               ``clip_ratio/avg`` -> clipfrac, ``dual_clip_ratio/avg`` -> clipfrac_lower,
               ``approx_kl/avg`` -> approx_kl, ``importance_weight/avg|max|min`` -> ratio_*.
               The proximal policy is ``old_log_probs`` (``prox_logp``); the batch's behaviour
               log-probs are the old ones, or ``rollout_log_probs`` under the drawn
               ``trainer:use_decoupled_loss``. grpo_loss_fn's own options (surrogate, ratio level,
               proximal method, M2PO, rejection sampling, versions, joint distillation against
               ``ref_log_probs`` as the teacher) are drawn (options.actor_loss_options), and the
               gradient of its returned loss w.r.t. the log-probs is observed (extra
               ``loss_grad:log_probs``).
               AReaL reduces every metric over ``n_valid_tokens``: metric_agg
               seq-mean-token-mean does not exist there; with no valid token its tracker
               reports nothing.
masked_reduce  ``areal.utils.data.Normalization`` with batch-level mean and std over the loss
               mask (op whiten over the batch, ``unbiased`` as ``std_unbiased``, ``eps``): the
               advantage normalisation ``PPOActor.compute_advantages`` runs for ``adv_norm``.
               (``functional.masked_normalization`` is exported but no AReaL code calls it.)
=============  =================================================================================

Not in AReaL (declined): ``values``. The critic's values are the train engine's forward output,
squeezed and concatenated by ``PPOCritic._compute_values``; no function maps a head output to
per-token values outside the engine.
"""

from __future__ import annotations

import contextlib
import importlib

import torch

from sentinel.adapters.binding import bind, parameters
from sentinel.adapters.contract import BoundaryResult, Precondition, implements
from sentinel.adapters.observables import extras
from sentinel.adapters.options import recorded
from sentinel.errors import Unsupported

from .conventions import STATS_EXPORT
from .legacy import logits_for
from .options import ACTOR_LOSS_ABSENT, actor_loss_options

FUNCTIONAL = "areal.utils.functional"
ACTOR = "areal.trainer.ppo.actor"
# AReaL's logged metric (stats_tracker key) -> the canonical output
_LOGGED = {"clip_ratio/avg": "clipfrac", "dual_clip_ratio/avg": "clipfrac_lower", "approx_kl/avg": "approx_kl",
           "importance_weight/avg": "ratio_mean", "importance_weight/max": "ratio_max",
           "importance_weight/min": "ratio_min"}


def _finite_policies(inputs, config) -> bool:
    """The proximal log-probs (old_log_probs) finite at every position, and the policy's too where
    they are the proximal (reuse_train_logp) or mixed into it (loglinear)."""
    mixed = config.get("trainer:prox_logp_method") in ("loglinear", "reuse_train_logp")
    names = ("old_log_probs", "log_probs") if mixed else ("old_log_probs",)
    return all(bool(torch.isfinite(inputs[n]).all()) for n in names if inputs.get(n) is not None)


class Surfaces:
    """AReaL's log-prob, metric and normalisation helpers, for `ArealAdapter`."""

    preconditions = {
        "areal-finite-proximal": Precondition(
            _finite_policies, boundaries=("metrics",), link=f"{ACTOR}:_resolve_proximal_logp",
            reason="AReaL's proximal log-probs come from a forward pass (compute_logp, or the training forward's "
                   "own under reuse_train_logp) or its loglinear mix of the rollout's and the policy's, finite at every "
                   "position, padding included: grpo_loss_fn raises on a NaN or Inf anywhere in them"),
    }

    declines = {
        "values": "AReaL's values are its train engine's forward output, squeezed and concatenated by "
                  "PPOCritic._compute_values; no function maps the value head's output to per-token values "
                  "outside the engine",
    }

    def _eager(self):
        """AReaL compiles its log-prob kernel with torch.compile; eager unless options.compile."""
        if self.options.get("compile"):
            return contextlib.nullcontext()
        import torch._dynamo
        return torch._dynamo.config.patch(disable=True)

    def _helper(self, name: str, boundary: str):
        fn = getattr(self._functional, name, None)
        if not callable(fn):
            raise Unsupported(f"AReaL has no areal.utils.functional.{name} at this version (boundary {boundary!r})")
        return fn

    @implements("logprobs", calls=(f"{FUNCTIONAL}:gather_logprobs_entropy",))
    def b_logprobs(self, inputs, config):
        fn = self._helper("gather_logprobs_entropy", "logprobs")
        kw = bind(fn, "logprobs", {"logits": inputs["logits"], "labels": inputs["tokens"]},
                  {"temperature": float(config["temperature"])})
        with self._eager():
            log_probs, entropy = fn(**kw)
        return BoundaryResult({"log_probs": log_probs, "entropy": entropy}, function=self._ref(fn))

    @implements("metrics", calls=(f"{ACTOR}:grpo_loss_fn", f"{FUNCTIONAL}:ppo_actor_loss_fn",
                                  STATS_EXPORT))
    def b_metrics(self, inputs, config):
        if config["metric_agg"] != "token-mean":
            raise Unsupported("AReaL reduces every logged actor metric over n_valid_tokens (a token mean); it has no "
                              f"{config['metric_agg']} metric reduction")
        fn = getattr(self._actor_mod, "grpo_loss_fn", None)
        if not callable(fn):
            raise Unsupported("AReaL has no trainer.ppo.actor.grpo_loss_fn at this version (boundary 'metrics')")
        # the tracker grpo_loss_fn logs to (areal.utils's, or realhf.base's before 2025-09)
        stats_tracker = getattr(self._actor_mod, "stats_tracker", None) or importlib.import_module(
            "areal.utils.stats_tracker")

        mask, old = inputs["loss_mask"], inputs["old_log_probs"]
        # the policy's log-probs as the trainer hands them: in the graph (a leaf here when the call
        # did not attach them), so the gradient of the returned loss is observed (`loss_grad:log_probs`)
        lp = inputs["log_probs"] if inputs["log_probs"].requires_grad else \
            inputs["log_probs"].detach().clone().requires_grad_(True)
        batch, options = actor_loss_options(fn, inputs, config)
        if "rejection_sampling" in options:  # AReaL's own config class, its reads recorded
            options["rejection_sampling"] = self._rejection_sampling("metrics", options["rejection_sampling"])
        data = {"logprobs": old, "prox_logp": old, "advantages": inputs["advantages"], "loss_mask": mask.bool(),
                "attention_mask": torch.ones_like(mask, dtype=torch.bool), **batch}
        data = {k: v for k, v in data.items() if v is not None}  # loglinear: no recomputed prox_logp
        if "logits" in parameters(fn):  # older entry: it gathers the log-probs itself from packed
            # [tokens, vocab] logits (legacy.py); every label (rolled input_ids) is token 0
            data = {k: v.reshape(-1) if isinstance(v, torch.Tensor) else v for k, v in data.items()}
            data["input_ids"] = torch.zeros_like(data["loss_mask"], dtype=torch.long)
            if config.get("trainer:full_loss_mask", True):  # what its engine's Ulysses split kept (2025-10/11);
                data["full_loss_mask"] = data["loss_mask"]  # its loss reads it only when the batch has it
            taken = {"logits": logits_for(lp.reshape(-1)), "temperature": 1.0}
        else:
            if not config.get("trainer:full_loss_mask", True):
                raise Unsupported("option missing: AReaL's grpo_loss_fn reads no full_loss_mask at this version "
                                  "(it gathers no log-probs itself)")
            taken = {"logprobs": lp, "entropy": torch.zeros_like(lp)}
        eps = float(config["eps_clip"])
        kw = bind(fn, "metrics", {**taken, "input_data": data, "eps_clip": eps,
                                  "eps_clip_higher": float(config["eps_clip_high"]),
                                  "c_clip": None if config["eps_clip_c"] is None else float(config["eps_clip_c"])},
                  options, absent={"eps_clip_higher": eps, "behav_imp_weight_cap": None, "behave_imp_weight_cap": None,
                                   **ACTOR_LOSS_ABSENT})
        tracker = stats_tracker.DEFAULT_TRACKER
        tracker.export(reset=True)  # nothing logged before this call counts
        loss = fn(**kw)
        logged = tracker.export(reset=True)
        outputs = {ours: torch.as_tensor(float(logged[k])) for k, ours in _LOGGED.items() if k in logged}
        g = None  # a loss with no path to the log-probs has gradient 0 there (observed as such: an
        if isinstance(loss, torch.Tensor) and loss.requires_grad:  # observable one side lacks is no difference)
            (g,) = torch.autograd.grad(loss, lp, retain_graph=True, allow_unused=True)
        grad = {"loss_grad:log_probs": torch.zeros_like(lp) if g is None else g}
        # the loss grpo_loss_fn returns, its gradient and every stat it logged, beside the canonical
        # metrics: a differential hunt compares them (`returned:0`, `returned:1.<stat>`, `loss_grad:log_probs`)
        return BoundaryResult(outputs, function=self._ref(fn).with_also(self._ref(self._functional.ppo_actor_loss_fn)),
                              extras={**extras((loss, dict(logged))), **grad})

    @implements("masked_reduce", calls=("areal.utils.data:Normalization",))  # the class it builds and calls
    def b_masked_reduce(self, inputs, config):
        """The trainer's advantage whitening: Normalization with batch-level mean and std over the
        loss mask (what PPOActor.compute_advantages runs for adv_norm), on the canonical batch."""
        if config["op"] != "whiten" or config["dim"] != "all":
            raise Unsupported("AReaL's masked reduction helpers whiten over the batch (utils.data.Normalization, and "
                              "the exported but unused functional.masked_normalization); its masked means and sums "
                              "are inline in its losses and its stats_tracker")
        if not config["shift_mean"]:
            raise Unsupported("AReaL's Normalization always centres (no shift_mean=False)")
        spec = {"mean_level": "batch", "std_level": "batch", "std_unbiased": bool(config["unbiased"]),
                "eps": None if config["eps"] is None else float(config["eps"])}
        cls = self._need(self._data, "Normalization", "masked_reduce")
        # before NormConfig held them (2025-09/10), unbiased and eps were arguments of the call
        fields, takes = parameters(self._need(self._cli, "NormConfig", "masked_reduce")), parameters(cls.__call__)
        call = {arg: spec.pop(key) for key, arg in (("std_unbiased", "unbiased"), ("eps", "eps"))
                if key not in fields and arg in takes and spec[key] is not None}
        norm = cls(recorded(self._norm_config("masked_reduce", spec, sizes=[], has_groups=False, group_size=None)))
        mask = inputs["loss_mask"]
        return BoundaryResult({"whitened": norm(inputs["values"], mask.to(inputs["values"].dtype), **call)},
                              function=self._ref(cls.__call__))
