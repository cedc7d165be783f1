"""verl's surfaces beside the loss: log-probs and entropy from logits, the metrics its policy
loss logs, and its masked reductions.

`Surfaces` is mixed into `VerlAdapter` (it uses the adapter's `core`, `_fn`, `_ref`,
`_import`, `_verl_F`, `_actor_config` and `_kl_name`).

=============  =================================================================================
logprobs       ``verl.utils.torch_functional``: ``logprobs_from_logits`` and ``entropy_from_logits``
               on logits scaled by the engine's ``_scale_logits_by_temperature``
               (``verl.workers.engine.fsdp.transformer_impl``), composed as
               ``FSDPEngineWithLMHead.prepare_model_outputs`` does without remove-padding: scale,
               entropy, log-probs at the (already rolled) labels. The canonical ``logits[b, t]``
               predicts ``tokens[b, t]``, which is verl's layout after its ``input_ids`` roll.
               ``trainer:flash_attn_cross_entropy`` draws the arm of logprobs_from_logits
               (`cross_entropy_arm`; the actor's too).
metrics        the metrics dict of the registered policy loss ("vanilla":
               ``compute_policy_loss_vanilla``; before the registry ``compute_policy_loss``'s
               tuple): ``actor/pg_clipfrac`` -> clipfrac, ``actor/ppo_kl`` -> approx_kl,
               ``actor/pg_clipfrac_lower`` -> clipfrac_lower; ``kl_loss`` as
               ``workers/utils/losses.ppo_loss`` logs it (``kl_penalty`` then ``agg_loss``).
               verl reduces these with ``masked_mean`` over all valid tokens: metric_agg
               seq-mean-token-mean does not exist there.
masked_reduce  ``verl.utils.torch_functional``: ``masked_mean`` / ``masked_sum`` (``axis=-1`` for
               dim row), ``masked_var`` (``unbiased``), ``masked_whiten`` (``shift_mean``; its
               variance is unbiased and its eps 1e-8, fixed).
=============  =================================================================================

Not in verl (declined): ``values``. The critic's head output becomes per-token values inside
``FSDPEngineWithValueHead.prepare_model_outputs``, a method of the FSDP engine over a
TensorDict of nested tensors; no function of its own maps head outputs to values.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from sentinel.adapters.binding import bind, parameters
from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.adapters.kernels import flash_attn_cross_entropy_loss
from sentinel.adapters.loading import module_exists
from sentinel.adapters.options import trainer_options
from sentinel.adapters.shims import is_stub, module_exists_anywhere
from sentinel.errors import Unsupported

from .conventions import CORE
from .losses import global_batch_info

TF = "verl.utils.torch_functional"
FLASH_FLAG = "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE"  # verl's spelling, at every version
FLASH_KERNEL = "flash_attn.ops.triton.cross_entropy"
ENGINE = "verl.workers.engine.fsdp.transformer_impl"
_METRIC_KEYS = {"clipfrac": ("actor/pg_clipfrac", "pg_clipfrac"), "approx_kl": ("actor/ppo_kl", "ppo_kl"),
                "clipfrac_lower": ("actor/pg_clipfrac_lower", "pg_clipfrac_lower")}


class Surfaces:
    """verl's log-prob, metric and masked-reduction helpers, for `VerlAdapter`."""

    declines = {
        "values": "verl maps the critic's head output to per-token values inside "
                  "FSDPEngineWithValueHead.prepare_model_outputs (a method of the FSDP engine over a TensorDict "
                  "of nested tensors); no standalone function does it",
    }

    def _tf(self, name: str, boundary: str):
        fn = getattr(self._verl_F(), name, None)
        if not callable(fn):
            raise Unsupported(f"verl {self.facts.get('version')} has no {name} in verl/utils/torch_functional.py "
                              f"(boundary {boundary!r})")
        return fn

    # --- logprobs -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def cross_entropy_arm(self, config):
        """``trainer:flash_attn_cross_entropy`` (conventions.OPTION_DOMAINS): the arm of verl's
        logprobs_from_logits the call takes. verl chooses it once, at import (flash-attn's Triton
        cross-entropy where flash-attn imports, else a log-softmax gather); for the call its module
        takes the drawn one. The kernel is flash-attn's own only where it can run: flash-attn really
        installed (not another target's stub of it) and the call on CUDA; anywhere else (every CPU
        call) it is sentinel.adapters.kernels' stand-in, so verl's own code in that arm (its reshapes,
        its view back, the arguments it passes) runs. Not in the config (a direct adapter call):
        verl's own choice. Yields whether the flash-attn arm was drawn."""
        drawn = trainer_options(config).get("flash_attn_cross_entropy")
        tf = self._verl_F()
        if drawn is None or (not drawn and not getattr(tf, FLASH_FLAG, False)):
            yield bool(drawn)
            return
        if not hasattr(tf, FLASH_FLAG):
            raise Unsupported("flash_attn_cross_entropy: this verl's logprobs_from_logits has no flash-attn arm")
        saved = {n: tf.__dict__[n] for n in (FLASH_FLAG, "cross_entropy_loss") if n in tf.__dict__}
        setattr(tf, FLASH_FLAG, bool(drawn))
        real = saved[FLASH_FLAG] and not is_stub(saved.get("cross_entropy_loss")) and self.device.type == "cuda" \
            and module_exists_anywhere(FLASH_KERNEL)
        if drawn and not real:
            tf.cross_entropy_loss = flash_attn_cross_entropy_loss
        try:
            yield bool(drawn)
        finally:
            for n in (FLASH_FLAG, "cross_entropy_loss"):
                if n in saved:
                    setattr(tf, n, saved[n])
                else:
                    tf.__dict__.pop(n, None)

    def _temperature_scaler(self):
        """The engine's `_scale_logits_by_temperature`; None where this verl has no such function."""
        if not module_exists(self.root, ENGINE):  # older verl scales inside its actor, with no function of its own
            return None
        mod = self._import(ENGINE)
        fn = getattr(mod, "_scale_logits_by_temperature", None)
        return fn if callable(fn) else None

    @implements("logprobs", calls=(f"{TF}:logprobs_from_logits", f"{TF}:entropy_from_logits",
                                   f"{ENGINE}:_scale_logits_by_temperature"))
    def b_logprobs(self, inputs, config):
        logits, tokens = inputs["logits"], inputs["tokens"]
        temperature = float(config["temperature"])
        logp_fn, ent_fn = self._tf("logprobs_from_logits", "logprobs"), self._tf("entropy_from_logits", "logprobs")
        scale = self._temperature_scaler()
        if scale is not None:  # per-sample temperatures [B, 1, 1], as prepare_model_outputs builds them
            temps = torch.full((logits.shape[0], 1, 1), temperature, dtype=torch.float32, device=logits.device)
            unit = "is_unit_temperature" in parameters(scale)
            kw = bind(scale, "logprobs", {"logits": logits, "temperature": temps},
                      {"is_unit_temperature": (temperature == 1.0) if unit else None})
            scaled = scale(**kw)
        elif temperature != 1.0:
            raise Unsupported(f"verl {self.facts.get('version')} divides the logits by the temperature inside its actor "
                              f"(DataParallelPPOActor._forward_micro_batch); it has no function that does it")
        else:
            scaled = logits
        entropy = ent_fn(scaled)
        # the engine's no-padding path hands logprobs_from_logits a copy of the logits it took the entropy of
        # (torch.cat of the rows): flash-attn's kernel, whose backward writes into the logits it was given
        # (inplace_backward, verl's default), must not write into those
        with self.cross_entropy_arm(config) as flash:
            log_probs = logp_fn(**bind(logp_fn, "logprobs", {"logits": scaled.clone() if flash else scaled,
                                                             "labels": tokens}))
        return BoundaryResult({"log_probs": log_probs, "entropy": entropy},
                              function=self._ref(logp_fn).with_also(self._ref(ent_fn),
                                                                    *((self._ref(scale),) if scale else ())))

    # --- metrics ------------------------------------------------------------------------------
    @implements("metrics", steps=(global_batch_info,), calls=(f"{CORE}:get_policy_loss_fn", f"{CORE}:compute_policy_loss_vanilla",
                                  f"{CORE}:kl_penalty", f"{CORE}:agg_loss", f"{TF}:masked_mean"))
    def b_metrics(self, inputs, config):
        if config["metric_agg"] != "token-mean":
            raise Unsupported("verl reduces its logged policy metrics with masked_mean over all valid tokens; it has "
                              f"no {config['metric_agg']} metric reduction")
        mask = inputs["loss_mask"]
        lp, old, adv = inputs["log_probs"], inputs["old_log_probs"], inputs["advantages"]
        low, high = float(config["eps_clip"]), float(config["eps_clip_high"])
        c = math.inf if config["eps_clip_c"] is None else float(config["eps_clip_c"])
        mask_t = self._actor_mask(mask)
        getter = getattr(self.core, "get_policy_loss_fn", None)
        registry = getattr(self.core, "POLICY_LOSS_REGISTRY", None) or {}
        if getter is not None and "vanilla" in registry:
            fn = getter("vanilla")
            cfg = self._actor_config("metrics", clip_low=low, clip_high=high, clip_c=c, loss_agg="token-mean",
                                     loss_mode="vanilla", mask=mask)
            kw = bind(fn, "metrics", {"old_log_prob": old, "log_prob": lp, "advantages": adv, "response_mask": mask_t},
                      {"loss_agg_mode": "token-mean", "config": cfg}, aliases={"response_mask": ("eos_mask",)})
        else:  # before the registry: compute_policy_loss(..., cliprange...) -> (loss, clipfrac, ppo_kl[, lower])
            fn = self._fn("compute_policy_loss", boundary="metrics")
            params = parameters(fn)
            kw = bind(fn, "metrics", {"old_log_prob": old, "log_prob": lp, "advantages": adv, "response_mask": mask_t,
                                      "cliprange": low},
                      {"cliprange_low": low if "cliprange_low" in params else None,
                       "cliprange_high": high if "cliprange_high" in params else None,
                       "clip_ratio_c": c if "clip_ratio_c" in params else None},
                      aliases={"response_mask": ("eos_mask",)})
        out = fn(**kw)
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
            logged = out[1]
            metrics = {k: logged[n] for k, names in _METRIC_KEYS.items() for n in names if n in logged}
        else:
            metrics = dict(zip(("clipfrac", "approx_kl", "clipfrac_lower"), out[1:]))
        outputs: dict[str, Any] = {k: torch.as_tensor(float(v)) if not isinstance(v, torch.Tensor) else v
                                   for k, v in metrics.items()}
        if "ref_log_probs" in inputs:  # workers/utils/losses.ppo_loss: kl_penalty, then agg_loss, logged as kl_loss
            kl_fn = self._fn("kl_penalty", boundary="metrics")
            kld = kl_fn(**bind(kl_fn, "metrics", {"logprob": lp, "ref_logprob": inputs["ref_log_probs"],
                                                  "kl_penalty": self._kl_name(config["kl_type"], config["kl_type"])}))
            agg = getattr(self.core, "agg_loss", None)
            if callable(agg):
                optional = global_batch_info(mask) if self.batch_info == "engine" else {}
                outputs["kl_loss"] = agg(**bind(agg, "metrics", {"loss_mat": kld, "loss_mask": mask_t,
                                                                "loss_agg_mode": "token-mean"}, optional))
            else:  # before agg_loss (early 2025) dp_actor logged kl_loss = masked_mean(kld, response_mask)
                mean = self._tf("masked_mean", "metrics")
                outputs["kl_loss"] = mean(**bind(mean, "metrics", {"values": kld, "mask": mask_t}))
        return BoundaryResult(outputs, function=self._ref(fn))

    # --- masked reductions --------------------------------------------------------------------
    @implements("masked_reduce", calls=(f"{TF}:masked_mean", f"{TF}:masked_sum", f"{TF}:masked_var",
                                        f"{TF}:masked_whiten"))
    def b_masked_reduce(self, inputs, config):
        op, row = config["op"], config["dim"] == "row"
        values, mask = inputs["values"], inputs["loss_mask"].to(torch.int64)  # the trainer's int response_mask
        if op in ("mean", "sum"):
            fn = self._tf(f"masked_{op}", "masked_reduce")
            kw = bind(fn, "masked_reduce", {"values": values, "mask": mask}, {"axis": -1 if row else None})
            return BoundaryResult({"row_result" if row else "result": fn(**kw)}, function=self._ref(fn))
        if row:
            raise Unsupported(f"verl's masked_{'var' if op == 'var' else 'whiten'} reduces over the whole tensor: it "
                              f"has no per-row (axis) form")
        if op == "var":
            fn = self._tf("masked_var", "masked_reduce")
            kw = bind(fn, "masked_reduce", {"values": values, "mask": mask}, {"unbiased": bool(config["unbiased"])})
            return BoundaryResult({"result": fn(**kw)}, function=self._ref(fn))
        if not config["unbiased"]:
            raise Unsupported("verl's masked_whiten always uses the unbiased variance (masked_var's default)")
        if config["eps"] is not None and float(config["eps"]) != 1e-8:
            raise Unsupported(f"verl's masked_whiten adds a fixed eps of 1e-8 to the variance (eps={config['eps']})")
        fn = self._tf("masked_whiten", "masked_reduce")
        kw = bind(fn, "masked_reduce", {"values": values, "mask": mask},
                  {"shift_mean": None if config["shift_mean"] else False})
        return BoundaryResult({"whitened": fn(**kw)}, function=self._ref(fn))
