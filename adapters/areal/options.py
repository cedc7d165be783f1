"""AReaL's trainer options as hunt axes (sentinel.adapters.options: `trainer:<name>`, AReaL's
default first) and the options its code reads that the adapter keeps at one value, with why.

advantages: ``PPOActorConfig`` fields that `PPOActor._compute_advantages` branches on and no
canonical config key holds:

- the DAPO overlong penalty (``overlong_reward_penalty`` with ``overlong_tokens``,
  ``overlong_penalty_factor`` and ``max_new_tokens``: the penalty starts at
  ``max_new_tokens - overlong_tokens`` response tokens). AReaL's ``overlong_tokens`` and
  ``overlong_penalty_factor`` default to None, which it asserts against once the penalty is on,
  so their first values are a recipe's, not a default; ``max_new_tokens`` 1024 (AReaL's
  default) never penalises a drawn batch, 4 does.
- the GAE timestep (``gae_timestep_unit``): a token, or a generated turn, with the rollout's
  ``turn_ids`` (AReaL's multi-turn layout: ``k`` on the k-th generated turn's tokens, -1 on the
  prompt and tool outputs between), which the adapter derives from ``loss_mask``: each run of
  trained tokens is one turn, the masked holes between them the observations.
- the GAE lambda: the canonical constant ``lam``, or one of AReaL's per-trajectory lambda
  functions (``gae_lambda`` as a dotted path into ``areal/trainer/ppo/lambda_fn.py`` with its
  ``gae_lambda_kwargs``: VAPO's length-adaptive lambda, the relative-position one).
- where the old policy's log-probs come from: the rollout's (rolled by AReaL) or, with
  ``recompute_logprob``, the recomputed ``prox_logp`` (already predict-aligned); with
  ``use_decoupled_loss`` the rollout's again and ``prox_logp`` left as given. The adapter hands
  ``prox_logp`` (the drawn log-probs, predict-aligned, as `compute_logp` would return them)
  whenever either is on.

metrics: ``grpo_loss_fn``'s keyword options and the batch keys it reads when present
(`actor_loss_options`): the surrogate (``use_cispo_loss`` / ``use_sapo_loss``), the ratio level,
``prox_logp_method`` (recompute, loglinear, metrics, reuse_train_logp), ``m2_threshold``, rejection
sampling, ``current_version`` with per-token ``versions``, and the joint distillation loss
(``teacher_logp`` = the drawn ref_log_probs, ``rl_loss_weight``, ``distill_loss_weight``).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from sentinel.adapters.loading import source_of
from sentinel.adapters.options import pin
from sentinel.errors import Unsupported

# canonical options AReaL reads that the boundaries' own hunt values leave at one value: the
# NormConfig fields beside the levels, the reward affine map, the decoupled loss and AReaL's
# RejectionSamplingConfig (every level, action, metric and aggregation once)
# (batch level only: a group-level NormConfig needs group ids, which most advantages properties
# do not draw, and the adapter refuses it without them)
_NORMS = ({"mean_level": "batch", "std_level": None, "mean_leave1out": True, "std_unbiased": False, "eps": 1e-6},
          {"mean_level": "batch", "std_level": "batch", "std_unbiased": False})
_RS = ({"level": "token", "action": "mask", "metric": "ratio", "upper": 2.0},
       {"level": "sequence", "action": "clamp", "metric": "ratio", "upper": 2.0, "lower": 0.5, "agg": "mean"},
       {"level": "token", "action": "mask", "metric": "kl_k3", "upper": 0.5},
       {"level": "sequence", "action": "mask", "metric": "kl_k2", "upper": 0.5, "agg": "max"},
       {"level": "sequence", "action": "mask", "metric": "kl_k1", "upper": 0.5, "lower": -0.5, "agg": "sum"})
_LOSS = {"use_decoupled_loss": (True,), "rejection_sampling": _RS}
# a trainer option's values are plain: each of _RS named, so the actor's loss step (metrics) draws
# every metric (ratio, kl_k1/k2/k3), both bounds and every sequence aggregation as policy_loss does
_RS_NAMED = {"token-mask": _RS[0], "sequence-clamp": _RS[1], "token-mask-k3": _RS[2],
             "sequence-mask-k2-max": _RS[3], "sequence-mask-k1-sum": _RS[4]}
# grpo_loss_fn's own keyword options and batch keys (the actor's loss step, metrics boundary;
# surfaces.actor_loss_options): the surrogate (PPO, CISPO, SAPO), the ratio level, where the
# proximal policy comes from, M2PO's mask, rejection sampling, the policy versions, and the joint
# distillation KL against a teacher (the drawn ref_log_probs, AReaL's batch `teacher_logp`)
_ACTOR_LOSS = {
    "trainer:use_decoupled_loss": (False, True),  # batch logprobs = the drawn rollout_log_probs
    "trainer:prox_logp_method": ("recompute", "loglinear", "metrics", "reuse_train_logp"),
    "trainer:current_version": (None, 3),  # with it the batch holds per-token `versions`
    "trainer:m2_threshold": (None, 0.04),
    "trainer:importance_sampling_level": ("token", "sequence"),
    "trainer:use_cispo_loss": (False, True),
    "trainer:use_sapo_loss": (False, True),
    "trainer:rejection_sampling": (None, *_RS_NAMED),
    "trainer:teacher_logp": (False, True),
    # None: the key left out of the batch, so grpo_loss_fn's own defaults (1.0, 0.005) are read
    "trainer:rl_loss_weight": (1.0, 0.0, 0.5, None),
    "trainer:distill_loss_weight": (0.005, 0.5, None),
}
# AReaL's own per-trajectory GAE lambda functions (areal/trainer/ppo/lambda_fn.py), set as
# gae_lambda = their dotted path with gae_lambda_kwargs; the keyword values give a lambda in
# (0, 1) at the drawn rows' few tokens or turns
LAMBDA_FNS = {"vapo": ("areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae", {"alpha": 1.0}),
              "relative_position": ("areal.trainer.ppo.lambda_fn.relative_position_gae_lambda", {"q": 0.5})}
OPTION_DOMAINS = {
    # the batch with and without its engine's `full_loss_mask` (grpo_loss_fn of 2025-10/11 reads
    # `input_data.get("full_loss_mask", loss_mask)`; one process: equal to loss_mask where present)
    "metrics": {"trainer:full_loss_mask": (True, False), **_ACTOR_LOSS},
    "policy_loss": _LOSS,
    "cispo_loss": _LOSS,
    "reward_norm": {"mean_leave1out": (True,), "std_unbiased": (False,)},
    "masked_reduce": {"eps": (1e-6,)},
    "advantages": {
        "reward_norm": _NORMS, "adv_norm": _NORMS, "reward_bias": (0.5,), "reward_scaling": (2.0,),
        "trainer:overlong_reward_penalty": (False, True),
        "trainer:overlong_tokens": (2, 4),
        "trainer:overlong_penalty_factor": (1.0, 0.5),
        "trainer:max_new_tokens": (1024, 4),
        "trainer:recompute_logprob": (False, True),
        "trainer:use_decoupled_loss": (False, True),
        # turn: each generated turn one GAE timestep; the adapter hands AReaL's rollout turn_ids,
        # one turn per run of trained tokens (turn_ids in adapter.py)
        "trainer:gae_timestep_unit": ("token", "turn"),
        # None: the constant lam; else one of the per-trajectory lambda functions AReaL ships
        "trainer:gae_lambda_fn": (None, *LAMBDA_FNS),
    },
}
# how a PPOActorConfig without one of these fields behaves (old commits: bind's `absent`)
TRAINER_OFF = {"overlong_reward_penalty": False, "recompute_logprob": False, "use_decoupled_loss": False,
               "gae_timestep_unit": "token", "gae_lambda_kwargs": {}}

_LOGGED = "read only by PPOActor._log_configuration, which writes it to the log (no boundary value depends on it)"
_UPDATE = "copied by PPOActor.__init__ for ppo_update / compute_logp, which need the train engine (no boundary calls them)"
PINNED = (
    *pin("advantages", "eps_clip", "importance_sampling_level", "prox_logp_method", "rejection_sampling",
         reason=_LOGGED),
    *pin("advantages", "temperature", "m2_threshold", reason=_UPDATE),
    *pin("advantages", "adv_norm.mean_level", "adv_norm.group_size",
         reason="group-level advantage whitening (and its group size) needs group ids, which most advantages "
                "properties do not draw; it is the same Normalization code as reward_norm's, drawn at group level"),
    *pin("advantages", "reward_norm.group_size",
         reason="Normalization.__init__ copies it; only group-level slicing without group sizes uses it, and the "
                "advantages boundary's reward_norm is batch level (_NORMS); group-level reward normalisation, "
                "group_size included, is drawn on the reward_norm boundary through the same Normalization"),
    *pin("is_correction", "rejection_sampling.level", "rejection_sampling.metric",
         reason="the is_correction boundary is AReaL's token-level ratio correction (vanilla_tis: clamp, icepop: "
                "mask); policy_loss and cispo_loss draw every level, metric and aggregation"),
    *pin("masked_reduce", "mean_level", "std_level", "group_size", "mean_leave1out",
         reason="the masked_reduce boundary is the batch whitening PPOActor runs for adv_norm; levels, groups and "
                "leave-one-out are drawn on reward_norm and advantages (adv_norm), through the same Normalization"),
)


def actor_options(config: dict[str, Any]) -> dict[str, Any]:
    """The PPOActorConfig fields the drawn trainer options set (only those off AReaL's default:
    an old PPOActorConfig without a field then still builds where the option is off)."""
    out: dict[str, Any] = {}
    if config["trainer:overlong_reward_penalty"]:
        out.update(overlong_reward_penalty=True, overlong_tokens=int(config["trainer:overlong_tokens"]),
                   overlong_penalty_factor=float(config["trainer:overlong_penalty_factor"]),
                   max_new_tokens=int(config["trainer:max_new_tokens"]))
    for key in ("recompute_logprob", "use_decoupled_loss"):
        if config[f"trainer:{key}"]:
            out[key] = True
    if config["trainer:gae_lambda_fn"] is not None:
        path, kwargs = LAMBDA_FNS[config["trainer:gae_lambda_fn"]]
        out.update(gae_lambda=path, gae_lambda_kwargs=dict(kwargs))
    if config["trainer:gae_timestep_unit"] != "token":
        out["gae_timestep_unit"] = config["trainer:gae_timestep_unit"]
    return out


# how a grpo_loss_fn without one of its later keyword options behaves (bind's `absent`)
ACTOR_LOSS_ABSENT = {"use_decoupled_loss": False, "prox_logp_method": "recompute", "current_version": None,
                     "m2_threshold": None, "importance_sampling_level": "token", "use_cispo_loss": False,
                     "use_sapo_loss": False, "rejection_sampling": None}
_BATCH_KEYS = {"teacher_logp": "joint distillation", "versions": "per-token policy versions"}


def actor_loss_options(fn: Any, inputs: dict[str, Any], config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch keys and keyword options the drawn `_ACTOR_LOSS` trainer options give AReaL's
    grpo_loss_fn (keywords only off their default; `rejection_sampling` as its dict of fields).
    Combinations AReaL has no surrogate for are refused as it refuses them."""
    t = {k[len("trainer:"):]: config[k] for k in _ACTOR_LOSS}
    kw = {k: t[k] for k in ACTOR_LOSS_ABSENT if t[k] != ACTOR_LOSS_ABSENT[k]}
    if "rejection_sampling" in kw:
        kw["rejection_sampling"] = dict(_RS_NAMED[kw["rejection_sampling"]])
    if t["use_cispo_loss"] and (t["use_sapo_loss"] or t["importance_sampling_level"] != "token"):
        raise Unsupported("AReaL has no CISPO beside SAPO or at sequence level (grpo_loss_fn raises ValueError)")
    if t["use_sapo_loss"] and t["use_decoupled_loss"]:
        raise Unsupported("AReaL has no decoupled SAPO loss (grpo_loss_fn raises ValueError)")
    batch: dict[str, Any] = {}
    if t["use_decoupled_loss"] and inputs.get("rollout_log_probs") is not None:
        batch["logprobs"] = inputs["rollout_log_probs"]  # behaviour; prox_logp stays the proximal (old)
    if t["prox_logp_method"] in ("loglinear", "reuse_train_logp"):  # compute_logp skipped: no prox_logp
        if t["prox_logp_method"] == "loglinear" and t["current_version"] is None:
            raise Unsupported("AReaL's loglinear proximal policy needs the rollout's versions (current_version)")
        batch["prox_logp"] = None
    if t["current_version"] is not None:  # layout: row b generated at version current - 1 - b % 3
        mask = inputs["loss_mask"]
        rows = torch.arange(mask.shape[0], device=mask.device) % 3
        batch["versions"] = (int(t["current_version"]) - 1 - rows)[:, None].expand(mask.shape).contiguous()
    if t["teacher_logp"]:
        if inputs.get("ref_log_probs") is None:
            raise ValueError("trainer:teacher_logp needs input ref_log_probs (the teacher's log-probs)")
        batch["teacher_logp"] = inputs["ref_log_probs"]
        batch.update({k: float(t[k]) for k in ("rl_loss_weight", "distill_loss_weight") if t[k] is not None})
    try:
        src = source_of(inspect.unwrap(fn))
    except (OSError, TypeError):
        src = ""
    if t["prox_logp_method"] == "reuse_train_logp" and "REUSE_TRAIN_LOGP" not in src:
        raise Unsupported("option missing: AReaL's grpo_loss_fn has no prox_logp_method 'reuse_train_logp' here")
    for key, what in _BATCH_KEYS.items():
        if key in batch and f'"{key}"' not in src:
            raise Unsupported(f"option missing: AReaL's grpo_loss_fn reads no batch {key!r} ({what}) at this version")
    return batch, kw
