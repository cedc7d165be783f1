"""A bare `GRPOTrainer` for calling its loss on one process, and the policy it scores.

TRL keeps the GRPO loss inline in ``GRPOTrainer._compute_loss``, a method of a trainer whose
``__init__`` loads a model, a tokenizer, datasets, reward functions and an accelerator. The
loss itself reads a few attributes of the trainer: `bare_trainer` builds the instance with
``object.__new__`` and sets those (`ATTRIBUTES`), with ``args`` the defaults of the version's
own ``GRPOConfig`` dataclass overridden by the scenario. Reading anything else raises an
AttributeError that `missing_attribute` turns into a one-line message naming it, so a version
that needs more says so instead of failing somewhere inside.

`CanonicalPolicy` is the model ``_compute_loss`` scores: it answers both of TRL's interfaces,
- the fused LM head (``model(..., labels=..., fused_lm_head=True)`` returning per-token
  ``log_probs`` / ``entropy``, TRL 1.11 and later): the canonical log-probs at the label
  positions, 0 where the label is -100 (what TRL's ``add_fused_lm_head`` returns there);
- asked for ``output_router_logits`` (an MoE policy, ``aux_loss_enabled``), an ``aux_loss``
  (`CanonicalPolicy._aux`);
- logits (before): two-token logits ``[lp, log(1 - exp(lp))]`` in float64 at the position
  that predicts each completion token, whose log-softmax at token 0 is the canonical
  log-prob (to 1e-15) with gradient 1; a log-prob above 0 cannot come out of a log-softmax
  and is refused (`Unsupported`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
from collections import defaultdict
from typing import Any

import torch

from sentinel.errors import Unsupported

PROMPT = 1  # prompt tokens in front of every completion (the first completion token needs a predicting position)


class OneProcess:
    """The accelerator of a single process: gathers and reductions are the identity."""

    __sentinel_standin__ = True  # an exported validate.py gets this class's source (export.standins)

    num_processes = 1
    process_index = 0
    is_main_process = True
    sync_gradients = True
    device = torch.device("cpu")

    def gather(self, t):
        return t

    gather_for_metrics = gather

    def reduce(self, t, reduction: str = "sum"):
        return t

    def pad_across_processes(self, t, *args: Any, **kwargs: Any):
        return t

    def autocast(self, *args: Any, **kwargs: Any):
        return contextlib.nullcontext()

    def unwrap_model(self, model, *args: Any, **kwargs: Any):
        return model


class Args:
    """``self.args``: the GRPOConfig defaults of this version, overridden; an unknown name
    raises AttributeError naming ``args.<name>``. Recorded like a config (adapters.options)."""

    __sentinel_options__ = True

    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"'GRPOConfig' object has no attribute {name!r} (args.{name})")


def config_defaults(config_cls: type) -> dict[str, Any]:
    """Every GRPOConfig field with its default (a field without one is absent)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config_cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return out


# What _compute_loss (and _get_per_token_logps*) read on self at the versions since v0.17, set
# for one process, one gradient-accumulation step, training mode, no vLLM, no entropy terms;
# `tools` (a non-empty list turns tool_mask on, 0.2x) and `ref_model` (versions that score the
# reference inside the loss) are set per call.
ATTRIBUTES: dict[str, Any] = {
    "current_gradient_accumulation_steps": 1, "num_iterations": 2, "temperature": 1.0,
    "top_entropy_quantile": 1.0, "use_vllm": False, "vllm_importance_sampling_correction": False,
    "use_liger_loss": False, "use_liger_kernel": False, "aux_loss_enabled": False, "_entropy_bonus_enabled": False,
    "use_adaptive_entropy": False, "entropy_coef": 0.0, "model_kwarg_keys": (), "importance_sampling_level": "token",
    "off_policy_mask_threshold": None, "mask_truncated_completions": False, "token_entropy_percentile_threshold": 0.0,
    "router_aux_loss_coef": 0.0, "_entropy_window_stats": None, "_last_world_entropy": 0.0, "tools": [],
    "ref_model": None,
}


# GRPOConfig fields whose dataclass default is None and that __post_init__ derives: one
# generation batch per optimizer step, one accumulation step.
DERIVED_ARGS: dict[str, Any] = {"steps_per_generation": 1, "gradient_accumulation_steps": 1}


def bare_trainer(trainer_cls: type, config_cls: type, model: torch.nn.Module, **values: Any) -> Any:
    """``object.__new__(GRPOTrainer)`` with `ATTRIBUTES`, the scenario's `values`, ``args`` (this
    version's GRPOConfig defaults, with ``values`` whose name is a GRPOConfig field), the
    accelerator of one process, and `model` as ``self.model``."""
    trainer = object.__new__(trainer_cls)
    defaults = config_defaults(config_cls)
    args = {**defaults, **{k: v for k, v in DERIVED_ARGS.items() if k in defaults},
            **{k: v for k, v in values.items() if k in defaults}}
    attrs = {**ATTRIBUTES, **values, "args": Args(args), "model": model, "accelerator": OneProcess(),
             "_metrics": {"train": defaultdict(list), "eval": defaultdict(list)},
             "control": types.SimpleNamespace(should_evaluate=False),
             # TrainerState: read by trl.extras.profiling's context (0.27-0.28 wrap the loss in it)
             "state": types.SimpleNamespace(global_step=0, epoch=0.0, num_input_tokens_seen=0)}
    for name, value in attrs.items():
        setattr(trainer, name, value)
    return trainer


_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")


def missing_attribute(e: AttributeError, version: str) -> str | None:
    """The one-line reason for an attribute the bare trainer lacks (None: another AttributeError)."""
    m = _MISSING.search(str(e))
    if not m:
        return None
    owner, name = m.groups()
    where = "self.args" if owner == "GRPOConfig" else "self" if owner.endswith("Trainer") else None
    if where is None:
        return None
    return (f"TRL {version}: GRPOTrainer._compute_loss reads {where}.{name}, which the bare trainer does not set "
            f"(adapters/trl/bare.py: ATTRIBUTES)")


def representable(log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`log_probs` with each value above 0 at a masked position reflected to minus itself.

    No model gives a log-prob above 0, so `CanonicalPolicy` refuses one; but a value a mask hides
    is garbage by contract, and the families that move it (masked_invariance's bump, finite's
    +Inf) would otherwise find every TRL call unsupported. Reflected, it is a log-prob a model
    can give and still moves with the value it stands for; valid positions are left as they are."""
    return torch.where((mask == 0) & (log_probs.detach() > 0), -log_probs, log_probs)


class CanonicalPolicy(torch.nn.Module):
    """A policy whose log-prob of completion token j of row b is ``log_probs[b, j]``."""

    __sentinel_standin__ = True  # an exported validate.py gets this class's source (export.standins)

    def __init__(self, log_probs: torch.Tensor):
        super().__init__()
        self.log_probs = log_probs

    def forward(self, input_ids=None, attention_mask=None, logits_to_keep=None, fused_lm_head=False, labels=None,
                **kwargs: Any):
        lp = self.log_probs
        B, L = input_ids.shape
        K = lp.shape[1]
        if fused_lm_head:  # per-token log-probs of the next token, [B, L - 1]; 0 where the label is -100
            out = torch.cat([lp.new_zeros(B, L - 1 - K), lp], dim=1)
            out = torch.where(labels[:, 1:] != -100, out, torch.zeros_like(out))
            return types.SimpleNamespace(log_probs=out, entropy=torch.zeros_like(out), aux_loss=self._aux(kwargs))
        high = lp.detach() > 0
        if bool(high.any()):
            where = [list(map(int, p)) for p in high.nonzero()[:3]]
            raise Unsupported(f"TRL scores log-probs with a log-softmax of the model's logits at this version: a "
                              f"log-prob above 0 (at {where}) is not one")
        x = lp.double()
        x = torch.where(x.detach() > -1e-12, x - 1e-12, x)  # p = 1 saturates the softmax: keep p just below it
        pair = torch.stack([x, torch.log(-torch.expm1(x))], dim=-1)  # log p, log(1 - p): logsumexp 0
        logits = torch.cat([pair.new_zeros(B, L - K - 1, 2), pair, pair.new_zeros(B, 1, 2)], dim=1)
        if logits_to_keep:
            logits = logits[:, -int(logits_to_keep):]
        return types.SimpleNamespace(logits=logits, aux_loss=self._aux(kwargs))

    def _aux(self, kwargs: dict[str, Any]) -> torch.Tensor | None:
        """An MoE policy's load-balancing loss, asked for with ``output_router_logits``: the stand-in
        has no experts, so it is the mean squared probability of the tokens it scores, a
        differentiable scalar (what _compute_loss does with it, scaling, dividing, logging, is observed).
        At fp32 or wider whatever the log-probs' dtype: a bf16 model's aux loss is fp32, transformers'
        load_balancing_loss_func sums the router probabilities in float32 (qwen3_moe, mixtral; transformers
        5.24; older releases took the softmax in the router logits' dtype)."""
        if not kwargs.get("output_router_logits"):
            return None
        return self.log_probs.to(torch.promote_types(self.log_probs.dtype, torch.float32)).exp().pow(2).mean()
