"""Canonical boundaries: the framework-neutral signatures every adapter speaks.

A boundary is one loss-path function of a trainer. Scenarios address it by name with
canonical inputs; each adapter translates those into its target's own conventions and
translates the outputs back. This module is pure data (no torch): the spec loader and the
invariants use it to check shapes and to know which mask governs which tensor.

Canonical layout
- token tensors are ``[B, T]`` padded batches; ``loss_mask[b, t] == 1`` marks a response
  token whose log-prob is trained; ``log_probs[b, t]`` is ``log pi(token t | prefix)``.
- row tensors are ``[B]`` (one value per sequence: a scalar reward, a group id).
- ``attention_mask`` marks real tokens (prompt and response); a row with no padding at all
  ran to the length limit without emitting EOS.
- scalars are 0-d.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["token", "row", "scalar"]
DType = Literal["float", "mask", "int"]


@dataclass(frozen=True)
class Port:
    """One input or output of a boundary."""

    name: str
    kind: Kind
    dtype: DType = "float"
    required: bool = True
    mask: str | None = None  # the mask that says where this tensor's values matter
    doc: str = ""


@dataclass(frozen=True)
class Boundary:
    name: str
    doc: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    config: dict[str, Any] = field(default_factory=dict)  # key -> default
    grad_inputs: tuple[str, ...] = ()  # inputs that may carry requires_grad

    def input(self, name: str) -> Port | None:
        return next((p for p in self.inputs if p.name == name), None)

    def output(self, name: str) -> Port | None:
        return next((p for p in self.outputs if p.name == name), None)

    @property
    def masks(self) -> list[str]:
        return [p.name for p in self.inputs if p.dtype == "mask" and p.kind == "token"]


def _tok(name: str, doc: str = "", *, required: bool = True, dtype: DType = "float", mask: str | None = "loss_mask") -> Port:
    return Port(name, "token", dtype, required, mask if dtype != "mask" else None, doc)


LOSS_MASK = Port("loss_mask", "token", "mask", True, None, "1 where the token is trained")
LOSS_AGG = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

BOUNDARIES: dict[str, Boundary] = {}


def _register(b: Boundary) -> Boundary:
    BOUNDARIES[b.name] = b
    return b


_register(Boundary(
    "opsm_mask",
    "Off-policy sequence masking: reject a whole sequence whose valid-token KL to the old "
    "policy exceeds opsm_delta and whose mean advantage is negative; the PPO loss is then "
    "multiplied by the mask and reduced over valid tokens.",
    inputs=(_tok("log_probs"), _tok("old_log_probs"), _tok("advantages"), LOSS_MASK),
    outputs=(_tok("opsm_mask"), Port("opsm_clipfrac", "scalar"), _tok("pg_loss"),
             Port("reduced_policy_loss", "scalar")),
    config={"opsm_delta": 0.1, "eps_clip": 0.2, "eps_clip_high": 0.2, "loss_agg": "token-mean"},
    grad_inputs=("log_probs",),
))

# Decoupled PPO (AReaL): old_log_probs is the proximal policy, rollout_log_probs the behaviour
# policy; rejection_sampling is a target-specific mapping, passed through.
_DECOUPLED = {"use_decoupled_loss": False, "rejection_sampling": None}
_POLICY_INPUTS = (_tok("log_probs"), _tok("old_log_probs"), _tok("advantages"), LOSS_MASK,
                  _tok("rollout_log_probs", required=False))
_POLICY_OUTPUTS = (_tok("pg_loss"), _tok("clipfrac"), Port("loss", "scalar"), _tok("weights"))

_register(Boundary(
    "policy_loss",
    "PPO clipped surrogate (asymmetric clip, optional dual clip), aggregated over valid tokens; "
    "importance_sampling_level token or sequence (GSPO-style); `weights` is the behaviour "
    "correction when a decoupled loss uses one.",
    inputs=_POLICY_INPUTS,
    outputs=_POLICY_OUTPUTS,
    config={"eps_clip": 0.2, "eps_clip_high": None, "eps_clip_c": None, "loss_agg": "token-mean",
            "importance_sampling_level": "token", **_DECOUPLED},
    grad_inputs=("log_probs",),
))

_register(Boundary(
    "cispo_loss",
    "CISPO: -sg(clip(ratio)) * A * log pi, gradient through log pi even where clipped.",
    inputs=_POLICY_INPUTS,
    outputs=_POLICY_OUTPUTS,
    config={"eps_clip": 1.0, "eps_clip_high": 0.28, "loss_agg": "token-mean", **_DECOUPLED},
    grad_inputs=("log_probs",),
))

_register(Boundary(
    "gspo_kl",
    "GSPO sequence-level KL: the valid-token mean of (old - new) log-prob, broadcast to every token.",
    inputs=(_tok("log_probs"), _tok("old_log_probs"), LOSS_MASK),
    outputs=(_tok("seq_kl"),),
    grad_inputs=("log_probs",),
))

_register(Boundary(
    "kl",
    "Per-token KL estimator between the policy and a reference (k1, k2, k3 / low_var_kl).",
    inputs=(_tok("log_probs"), _tok("ref_log_probs"), LOSS_MASK),
    outputs=(_tok("kl"),),
    config={"kl_type": "k1"},
    grad_inputs=("log_probs",),
))

_register(Boundary(
    "advantages",
    "From scalar rewards (and KL to the reference) to per-token advantages and returns, for "
    "an estimator (gae, grpo, reinforce_plus_plus, reinforce_plus_plus_baseline), with optional "
    "reward normalisation and no-EOS masking. grpo includes its group normalisation (group mean "
    "and std unless reward_norm says otherwise). `logged_kl` is the raw KL as the trainer stores "
    "it for logging after the call; `kl_rewards` is -kl_coef * KL where a trainer logs that instead.",
    inputs=(Port("rewards", "row", doc="scalar reward per sequence"),
            _tok("log_probs", required=False), _tok("ref_log_probs", required=False),
            _tok("values", required=False), LOSS_MASK,
            _tok("attention_mask", required=False, dtype="mask"),
            Port("group", "row", "int", False, None, "group id per sequence (GRPO)")),
    outputs=(_tok("advantages"), _tok("returns"), _tok("logged_kl"), _tok("token_rewards"),
             _tok("kl_rewards")),
    config={"estimator": "gae", "kl_coef": 0.0, "kl_type": "k1", "gamma": 1.0, "lam": 1.0,
            "reward_norm": None, "mask_no_eos_with_zero": False, "reward_clip": None,
            "reward_bias": 0.0, "reward_scaling": 1.0, "adv_norm": None,
            "group_size": None, "normalize_advantages": False},
))

_register(Boundary(
    "reward_norm",
    "Scalar reward normalisation (batch or group mean / std); rows with mask 0 must not "
    "enter the statistics.",
    inputs=(Port("rewards", "row"), Port("mask", "row", "mask", False),
            Port("group", "row", "int", False)),
    outputs=(Port("rewards", "row"),),
    # eps None / mean_leave1out None / std_unbiased None: the target's own default
    config={"mean_level": "batch", "std_level": "batch", "eps": None, "group_size": None,
            "mean_leave1out": None, "std_unbiased": None},
))

_register(Boundary(
    "gae",
    "Generalised advantage estimation over valid tokens (Schulman et al. 2016, eq. 16).",
    inputs=(_tok("token_rewards"), _tok("values"), LOSS_MASK),
    outputs=(_tok("advantages"), _tok("returns")),
    config={"gamma": 1.0, "lam": 1.0},
))

_register(Boundary(
    "is_correction",
    "Importance-sampling correction between the rollout engine and the trainer: a detached "
    "per-token weight (off_policy_is: clip(pi_theta/pi_rollout); vanilla_tis: "
    "clip(pi_old/pi_rollout) on the PPO loss; icepop: masked outside [low, high]) and the "
    "corrected loss, whose gradient must flow only through log pi. vanilla_tis and icepop "
    "apply their weight to the PPO loss with eps_clip / eps_clip_high.",
    inputs=(_tok("log_probs"), _tok("old_log_probs"), _tok("rollout_log_probs"),
            _tok("advantages"), LOSS_MASK),
    outputs=(_tok("weights"), _tok("pg_loss"), Port("loss", "scalar")),
    config={"method": "off_policy_is", "eps_clip": 0.2, "eps_clip_high": 0.2,
            "tis_clip_low": 0.0, "tis_clip": 2.0, "loss_agg": "token-mean"},
    grad_inputs=("log_probs",),
))

_register(Boundary(
    "loss_agg",
    "Loss aggregation over valid tokens: token-mean, seq-mean-token-mean, seq-mean-token-sum.",
    inputs=(_tok("values"), LOSS_MASK),
    outputs=(Port("loss", "scalar"),),
    config={"mode": "token-mean"},
    grad_inputs=("values",),
))


def get(name: str) -> Boundary:
    try:
        return BOUNDARIES[name]
    except KeyError:
        raise KeyError(f"unknown boundary {name!r} (known: {', '.join(sorted(BOUNDARIES))})") from None
