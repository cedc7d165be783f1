"""AReaL before its NormConfig and its log-prob-taking loss entry (2025-08 to 2025-10): how the
canonical config and inputs reach the older calling conventions, or why an option cannot.

- advantages: ``PPOActorConfig`` had booleans, not ``NormConfig``s: ``group_reward_norm``
  (per ``group_size`` slice, ``(r - mean) / (std + 1e-9)``, unbiased std), ``adv_norm`` and
  ``group_adv_norm`` (``functional.masked_normalization``: biased std, eps 1e-5). A
  requested normalisation those cannot express is an option that version lacks.
- metrics: ``grpo_loss_fn(logits, input_data, temperature, ...)`` gathered the log-probs
  itself from ``torch.roll(input_ids, -1)``: `logits_for` builds logits whose log-softmax at
  token 0 is the drawn log-prob (temperature 1, every label 0), so AReaL's own gather runs.
"""

from __future__ import annotations

from typing import Any

import torch

from sentinel.errors import Unsupported

# the flags off: how a version without one of them behaves (2025-09 had group_reward_norm, no
# group_adv_norm, and adv_norm as an AdvNormConfig)
OFF_FLAGS = {"group_reward_norm": False, "adv_norm": False, "group_adv_norm": False}
_GROUP_REWARD = {"mean_level": "group", "std_level": "group"}  # what group_reward_norm does
_REWARD_FIXED = {"eps": 1e-9, "std_unbiased": True, "mean_leave1out": False}
_ADV_FIXED = {"eps": 1e-5, "std_unbiased": False, "mean_leave1out": False}


def _fixed(spec: dict, fixed: dict, what: str) -> None:
    for key, value in fixed.items():
        if spec.get(key) is not None and spec[key] != value:
            raise Unsupported(f"option missing: AReaL's {what} at this version always uses {key}={value!r} "
                              f"(no NormConfig), so {key}={spec[key]!r} cannot be applied (boundary 'advantages')")


def norm_flags(reward_spec: Any, adv_spec: Any, group_size: int | None) -> dict[str, Any]:
    """The boolean PPOActorConfig fields of a version without NormConfig for the canonical
    reward and advantage normalisation specs (None: off)."""
    out: dict[str, Any] = dict(OFF_FLAGS)
    if reward_spec:
        spec = dict(reward_spec) if isinstance(reward_spec, dict) else {}
        levels = {k: spec.get(k, "batch") for k in _GROUP_REWARD}
        if levels != _GROUP_REWARD:
            raise Unsupported(f"option missing: AReaL's PPOActor at this version normalises rewards per group only "
                              f"(group_reward_norm: group mean and std), not {levels} (boundary 'advantages')")
        _fixed(spec, _REWARD_FIXED, "group_reward_norm")
        out["group_reward_norm"] = True
    if adv_spec is not None and adv_spec is not False:
        spec = dict(adv_spec) if isinstance(adv_spec, dict) else {}
        levels = (spec.get("mean_level", "batch"), spec.get("std_level", "batch"))
        if levels not in (("batch", "batch"), ("group", "group")):
            raise Unsupported(f"option missing: AReaL's PPOActor at this version whitens advantages over the batch "
                              f"or per group only (adv_norm / group_adv_norm), not {levels} (boundary 'advantages')")
        _fixed(spec, _ADV_FIXED, "adv_norm (masked_normalization)")
        out["group_adv_norm" if levels[0] == "group" else "adv_norm"] = True
    if (out["group_reward_norm"] or out["group_adv_norm"]) and group_size:
        out["group_size"] = int(group_size)
    return out


def logits_for(lp: torch.Tensor) -> torch.Tensor:
    """``[..., 2]`` float32 logits whose log-softmax at token 0 is ``lp`` (token 1 holds the
    rest of the mass; a log-prob of 0 leaves it -1e4). Forward values only: the metrics
    boundary observes logged numbers, no gradient."""
    d = lp.detach().float()
    rest = torch.where(d < 0, torch.log(-torch.expm1(d.clamp_max(-1e-30))), torch.full_like(d, -1e4))
    return torch.stack([d, rest.clamp_min(-1e4)], dim=-1)
