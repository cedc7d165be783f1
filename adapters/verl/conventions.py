"""verl's own names and shapes, as the adapter speaks them: the modules that hold its loss
path, the heavy dependencies they import, its KL and estimator names, and stand-ins for the
objects its trainer functions read (``uid`` arrays, a DataProto-shaped batch, config
dataclasses built with the fields a version has)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
import uuid
from typing import Any, Callable

import numpy as np
import torch

from sentinel.adapters.layout import group_ids
from sentinel.adapters.loading import pip_hint, source_of
from sentinel.adapters.options import pin
from sentinel.errors import Unsupported

CORE = "verl.trainer.ppo.core_algos"
TRAINER = "verl.trainer.ppo.ray_trainer"
ROLLOUT_CORR = "verl.trainer.ppo.rollout_corr_helper"

# Branches of mapped functions that no call from one CPU process can take (sentinel hunt
# --coverage lists them apart): a guard that raises on a value the boundary's contract never
# passes (an unknown estimator / loss / IS level name, mismatched shapes: the adapter builds
# them from one drawn batch), flash-attn's and Ascend's kernels.
_GUARD = "raises on a value the boundary's contract never passes (the adapter builds it from a valid config and one batch)"
_ACTOR = "verl.workers.actor.dp_actor:DataParallelPPOActor._forward_micro_batch"
_VLM = ("a vision-language model's image inputs (multi_modal_inputs, MiniCPM-o's image_bound): the stand-in "
        "model reads a text-only batch")
_MODEL = ("a model forward verl patches with PrefixGrouper's shared-prefix attention: the stand-in model has no "
          "attention (the fused kernels' forward runs: actor.py `_fused_model`)")
_EMPTY = "a batch of no rows: every boundary's batch holds at least one row"
_PARSED = ("dead code: _parse_rollout_rs_thresholds (called above) has already set both bounds of every k1 "
           "criterion and the upper one of the others, and every name passed the supported-options check")
_FALLBACK = ("dead code: clip_ratio_low / clip_ratio_high already fell back to clip_ratio at the top of the function "
             "(`... if config.clip_ratio_low is not None else clip_ratio`): None here only with clip_ratio None too, "
             "where torch.clamp(ratio, 1 - None, ...) raises; no configuration reaches it and runs")
_SCORED = "dead code: every index in id2score had a score appended to it just above"
_LEVELS = "dead code: rollout_is passed the check against valid_is_levels (token, sequence) at the function's top"
# Each key names one arc ("branching line text -> text of the line it jumps to", coverage.py).
_RAISE = " -> raise ValueError"
UNREACHABLE = {
    f"{CORE}:compute_policy_loss_vanilla": {"if cliprange_low is None -> cliprange_low = cliprange": _FALLBACK,
                                            "if cliprange_high is None -> cliprange_high = cliprange": _FALLBACK},
    f"{CORE}:compute_policy_loss_bypass_mode": {"if rollout_corr_config is None" + _RAISE: _GUARD,
                                                'elif loss_type == "ppo_clip"' + _RAISE: _GUARD},
    f"{CORE}:agg_loss": {'elif loss_agg_mode == "seq-mean-token-sum-norm"' + _RAISE: _GUARD},
    f"{CORE}:compute_grpo_outcome_advantage": {"elif len(id2score[idx]) > 1" + _RAISE: _SCORED},
    f"{CORE}:compute_rloo_outcome_advantage": {"elif len(id2score[idx]) > 1" + _RAISE: _SCORED},
    f"{CORE}:get_adv_estimator_fn": {"if name not in ADV_ESTIMATOR_REGISTRY" + _RAISE: _GUARD},
    f"{CORE}:get_policy_loss_fn": {"if loss_name not in POLICY_LOSS_REGISTRY" + _RAISE: _GUARD},
    f"{ROLLOUT_CORR}:compute_rollout_correction_weights": {
        "if rollout_is not in valid_is_levels" + _RAISE: _GUARD, "if rollout_is_threshold <= 0" + _RAISE: _GUARD,
        'elif rollout_is == "sequence"' + _RAISE: _LEVELS},
    f"{ROLLOUT_CORR}:compute_rollout_rejection_mask": {
        "if rollout_rs is None or not isinstance(rollout_rs, str)" + _RAISE: _GUARD,
        "if rollout_rs_threshold is None" + _RAISE: _GUARD, "if not option_modes" + _RAISE: _GUARD,
        "if opt not in SUPPORTED_ROLLOUT_RS_OPTIONS" + _RAISE: _GUARD,
        "if log_ratio.shape[0] == 0 -> return": _EMPTY,
        "if lower_value is None or upper_value is None" + _RAISE: _PARSED,
        "if upper_value is None" + _RAISE: _PARSED, "if lower_log is None" + _RAISE: _PARSED,
        'elif option_name.endswith("k3")' + _RAISE: _PARSED, 'elif option_name.startswith("seq_max")' + _RAISE: _PARSED},
    f"{ROLLOUT_CORR}:compute_rollout_correction_and_rejection_mask": {
        "if old_log_prob.shape != rollout_log_prob.shape" + _RAISE: _GUARD,
        "if old_log_prob.shape != response_mask.shape" + _RAISE: _GUARD, "if rollout_rs_threshold is None" + _RAISE: _GUARD},
    _ACTOR: {"if self.use_prefix_grouper": _MODEL, "if can_use_pg and": _MODEL,
             'if "multi_modal_inputs" in micro_batch.keys()': _VLM,
             # Qwen2-VL's mrope position ids and its Ulysses arm run on a text-only batch (vlm.py)
             'if "image_bound" in multi_modal_inputs': _VLM},
    "verl.utils.torch_functional:logprobs_from_logits": {
        "elif NPU_CROSS_ENTROPY_LOSS_AVAILABLE -> output = logprobs_from_logits_torch_npu": "torch_npu's kernel: an Ascend NPU"},
}
# The engine worker's losses (use_legacy_worker_impl=disable): ppo_loss moved from workers/roles/utils
# to workers/utils on 2025-11-29 (5a5fe9df); it fills global_batch_info since 2025-11-24 (8ed5bafc).
ENGINE_LOSSES_FILES = (("verl", "workers", "utils", "losses.py"), ("verl", "workers", "roles", "utils", "losses.py"))

PIP_HINT = pip_hint("verl", "pip install --no-deps verl==0.9.1")

# The light third-party modules verl's import path needs for real: the `verl` extra
# (pyproject.toml). Any other missing third-party module (ray, transformers, torchdata,
# datasets, pandas, peft, fastapi, vllm, sglang, tracking clients, ...) is a heavy dependency
# no boundary calls: stubbed (the report lists each). tensordict (also in the extra) is stubbed
# where absent too: only actor_logprobs' batching options need it, and they say so (actor.py).
LIGHT = frozenset({"omegaconf", "packaging"})

# Canonical KL estimator -> verl kl_penalty name (verl 0.9 also accepts k1/k2/k3; "kl", "mse"
# and "low_var_kl" exist at every version).
KL_NAMES = {"k1": "kl", "kl": "kl", "k2": "mse", "mse": "mse", "k3": "low_var_kl", "low_var_kl": "low_var_kl"}

# Canonical estimator aliases (anything else is looked up in verl's registry as given).
ESTIMATOR_ALIASES = {"ppo": "gae"}
VECTORIZED = {"grpo": "grpo_vectorized", "rloo": "rloo_vectorized"}
# Estimators whose group normalisation is GRPO's (norm_adv_by_std_in_grpo applies).
GRPO_FAMILY = ("grpo", "grpo_vectorized", "grpo_passk")
# Registered estimators that need inputs no canonical boundary carries.
NEEDS_MORE = {
    "remax": "reward_baselines (the greedy-decoding reward of each prompt)",
    "optimal_token_baseline": "sum_pi_squared (sum over the vocabulary of pi^2, from the actor)",
    "tir_optimal_token_baseline": "sum_pi_squared (sum over the vocabulary of pi^2, from the actor)",
    "gdpo": "per-component rewards named by algorithm.gdpo_reward_keys",
}


def uid_array(group: torch.Tensor | None, group_size: int | None, n: int) -> np.ndarray:
    """Canonical groups -> verl's ``uid`` array (one UUID string per prompt, dtype object);
    without `group` or `group_size` the batch is one group."""
    ids = group_ids(group, group_size, n)
    return np.array([str(uuid.uuid5(uuid.NAMESPACE_OID, f"sentinel-group-{g}")) for g in ids], dtype=object)


def last_valid_scores(rewards: torch.Tensor, mask: torch.Tensor, attention: torch.Tensor | None = None) -> torch.Tensor:
    """verl's token_level_scores: each row's scalar reward at its last response token. A fully
    masked row (a response rollout rejection sampling zeroed) keeps its reward, as verl's reward
    manager leaves it: at its last real token (attention_mask), else at the last column."""
    scores = torch.zeros(mask.shape, dtype=rewards.dtype if rewards.is_floating_point() else torch.float32,
                         device=mask.device)
    for b in range(mask.shape[0]):
        idx = mask[b].nonzero(as_tuple=True)[0]
        if not len(idx) and attention is not None:
            idx = attention[b].nonzero(as_tuple=True)[0]
        scores[b, int(idx[-1]) if len(idx) else mask.shape[1] - 1] = rewards[b]
    return scores


class _Batch(dict):
    """Stands in for DataProto.batch (a TensorDict): key access plus ``batch_size``."""

    __sentinel_standin__ = True  # an exported validate.py gets this class, not a plain dict

    def __init__(self, tensors: dict[str, torch.Tensor], batch_size: torch.Size | None = None):
        super().__init__(tensors)  # TensorDict's (source, batch_size): PF-PPO rebuilds one as type(batch)(...)
        self.batch_size = batch_size


def data_proto(n: int, tensors: dict[str, torch.Tensor], uids: np.ndarray) -> types.SimpleNamespace:
    """A DataProto-shaped object for apply_kl_penalty / compute_advantage, which read only
    ``data.batch[...]``, ``data.batch.batch_size`` and ``data.non_tensor_batch["uid"]``
    (real DataProto needs tensordict, a heavy dependency)."""
    return types.SimpleNamespace(batch=_Batch(tensors, torch.Size([n])), non_tensor_batch={"uid": uids}, meta_info={})


def carried(value: Any) -> Any:
    """A return value with each DataProto (or plain carrier) as the dict of its batch tensors."""
    if isinstance(value, (tuple, list)):
        return [carried(v) for v in value]
    batch = getattr(value, "batch", None)
    if batch is not None and hasattr(batch, "items"):
        return {"batch": dict(batch.items()), "meta_info": dict(getattr(value, "meta_info", None) or {})}
    return value


class PlainProto(types.SimpleNamespace):
    """DataProto.from_dict(tensors=...) as a plain carrier of ``.batch`` (tensordict absent)."""

    @classmethod
    def from_dict(cls, tensors: dict[str, torch.Tensor] | None = None, **_: Any) -> "PlainProto":
        return cls(batch=dict(tensors or {}), non_tensor_batch={}, meta_info={})


def build(cls: type, boundary: str, values: dict[str, Any]) -> Any:
    """Instantiate a verl config dataclass with the fields this version has."""
    if not dataclasses.is_dataclass(cls):
        raise Unsupported(f"{cls!r} is not a dataclass at this verl version (boundary {boundary!r})")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})



# Trainer options the hunt draws (sentinel.adapters.options: `trainer:<name>`, the default
# first) on is_correction: verl's algorithm.rollout_correction beside the boundary's token
# TIS: the IS level (token, the boundary's own, or sequence: one weight per response), batch
# normalisation of the weights to mean 1, and rejection sampling (rollout_rs) with each kind of
# divergence (k1 ratio bounds, k2, k3) at token and sequence level (sum / mean / max).
# Canonical values beyond the boundaries' own draws, without which a verl function is never
# called: off_policy_is (the bypass mode's compute_policy_loss_reinforce) needs eps_clip >= 1,
# since its IS weight min(pi_theta / pi_rollout, threshold) has no lower clip; reward_norm's
# leave-one-out mean is compute_rloo_outcome_advantage.
# On the policy losses: the truncated IS verl's vanilla loss applied from 2025-08 to 10 (b8dc5377 to
# 21271aab) when the actor handed it rollout_log_probs, capped at actor.tis_imp_ratio_cap (-1: off).
# On every loss that reaches agg_loss: which actor hands it the ActorConfig (trainer.use_legacy_worker_impl:
# None = as this checkout's layout says; "enable": the legacy dp_actor, global_batch_info empty, so
# agg_loss counts tokens and sequences itself; "disable": the engine's ppo_loss fills it). On
# policy_loss, bypass mode (algorithm.rollout_correction.bypass_mode: the rollout's log-probs are the
# old ones, loss_type ppo_clip: compute_policy_loss_bypass_mode, then the vanilla loss). On loss_agg,
# verl's fourth mode (Dr. GRPO's seq-mean-token-sum-norm, no canonical mode) and the actor's
# loss_scale_factor it divides by (None: the response length). On reward_norm, the estimator
# (algorithm.adv_estimator): rloo replaces GRPO's normalisation with its leave-one-out mean (no std).
# On policy_loss and cispo_loss, algorithm.rollout_correction (None: unset, the trainer's default): a
# preset of its keys (ROLLOUT_CORRECTIONS), applied where the batch holds rollout_log_probs as the
# trainer's decoupled mode does (IS weights into the loss, the rejection mask as its response mask),
# and in bypass mode inside compute_policy_loss_bypass_mode, whose loss_type REINFORCE is drawn too.
TIS_OFF = -1.0
_WORKER = {"trainer:use_legacy_worker_impl": (None, "enable", "disable")}
_RC = {"trainer:rollout_correction": (None, "token_is", "sequence_is_token_k1_rs", "seq_mean_k3_rs", "token_is_batch_norm")}
_TIS = {"trainer:tis_imp_ratio_cap": (TIS_OFF, 2.0), **_WORKER, **_RC}
BYPASS_PPO_CLIP = {"bypass_mode": True, "loss_type": "ppo_clip", "rollout_is": "token", "rollout_is_threshold": 2.0}
# logprobs_from_logits' flash-attn arm (its Triton cross-entropy; sentinel.adapters.kernels' stand-in where
# flash-attn is not installed: surfaces.py `cross_entropy_arm`)
_CROSS_ENTROPY = {"trainer:flash_attn_cross_entropy": (False, True)}
OPTION_DOMAINS = {
    # the actor's calculate_entropy (the caller's argument: off, the log-probs alone, with
    # inplace_backward for the fused cross-entropy) and its config's calculate_sum_pi_squared (the
    # optimal token baseline's sum of squared probabilities, observed); entropy_checkpointing and
    # sum_pi_squared_checkpointing (torch.utils.checkpoint around each: the same values and gradients,
    # through another call; its non-reentrant variant, actor.py `_checkpoint_without_reentry`)
    "actor_logprobs": {"trainer:calculate_entropy": (True, False), "trainer:calculate_sum_pi_squared": (False, True),
                       "trainer:entropy_checkpointing": (False, True),
                       "trainer:sum_pi_squared_checkpointing": (False, True),
                       # the fused log-prob / entropy forward (its torch backend: actor.py `_fused_model`)
                       "trainer:use_fused_kernels": (False, True), **_CROSS_ENTROPY,
                       # Ulysses sequence parallelism: two ranks, threads of one process (ulysses.py)
                       "trainer:ulysses_sequence_parallel_size": (1, 2),
                       # the model a Qwen2-VL on a text-only batch: 3-D mrope position ids (vlm.py)
                       "trainer:mrope_position_ids": (False, True)},
    "logprobs": _CROSS_ENTROPY,
    # the batch with or without the response_mask the trainer's fit adds (compute_advantage's fallback);
    # PF-PPO's resampling of the batch after GAE (algorithm.use_pf_ppo, its pf_ppo.reweight_method; None: off)
    "advantages": {"trainer:response_mask_in_batch": (True, False),
                   "trainer:pf_ppo": (None, "pow", "max_min", "max_random")},
    "reward_norm": {"mean_leave1out": (True,), "trainer:adv_estimator": ("grpo", "rloo")},
    # a dual-clip constant in (1, 2] beside the boundary's 3.0: verl asserts only clip_ratio_c > 1
    "policy_loss": {**_TIS, "eps_clip_c": (1.5,), "trainer:bypass_mode": (False, True),
                    "trainer:loss_type": ("ppo_clip", "reinforce")},
    "cispo_loss": _TIS,
    "loss_agg": {**_WORKER, "trainer:loss_agg_mode": (None, "seq-mean-token-sum-norm"),
                 "trainer:loss_scale_factor": (None, 4)},
    "is_correction": {
        "eps_clip": (1.0,),
        "trainer:rollout_is": ("token", "sequence"),
        "trainer:rollout_is_batch_normalize": (False, True),
        # the call as one rank of an initialised process group (torchrun on one GPU, sentinel.adapters.ranks):
        # batch normalisation's mean then goes through verl's all-reduce (distributed_masked_mean)
        "trainer:torch_distributed": (False, True),
        "trainer:rollout_rs": (None, "token_k1", "token_k2", "seq_sum_k1", "seq_sum_k3", "seq_mean_k2", "seq_mean_k3",
                               "seq_max_k2",
                               "token_k3,seq_sum_k2", "seq_mean_k1,seq_max_k3"),  # chained: every one must pass
    },
}
PINNED = (
    *pin("is_correction", "clip_ratio_c", reason="the is_correction boundary's loss is the plain PPO clip (policy_loss "
                                                 "draws eps_clip_c)"),
)
# rollout_rs -> its rollout_rs_threshold: a k1 criterion bounds the ratio ("lower_upper"), a k2 /
# k3 one bounds the divergence from above. The bounds sit where drawn inputs land on them (log-probs
# on a 1/8 grid): k1's log bounds are -0.5 and 1.0 (e^-0.5, e^1; asymmetric, so a flipped log-ratio
# or swapped bounds moves the mask; verl bounds -log r with them: findings/verl-k1-rejection-ratio-bounds),
# k2's 0.5 is |log-ratio| = 1, k3's is its value at log-ratio 1 in float32 (exp(1) rounded, then
# exact: e - 2; on this CPU's torch, not promised on CUDA's expf), so `<=` against `<` is seen on
# each; a sequence's mean or maximum lands there too where a row's log-ratio is flat
# (sentinel/relations.py "flat"), its sum where one token carries it.
RS_THRESHOLDS = {"k1": f"{math.exp(-0.5)!r}_{math.exp(1.0)!r}", "k2": 0.5, "k3": float(np.float32(math.e)) - 2.0}


def rollout_rs(name: str | None) -> dict[str, Any]:
    """The rollout_correction keys of the drawn rejection-sampling option (none when off); chained
    criteria ("a,b") get one threshold each, in the same order."""
    if name is None:
        return {}
    return {"rollout_rs": name,
            "rollout_rs_threshold": ",".join(str(RS_THRESHOLDS[n.rsplit("_", 1)[-1]]) for n in name.split(","))
            if "," in name else RS_THRESHOLDS[name.rsplit("_", 1)[-1]]}


# a verl whose rollout correction has no rollout_is_batch_normalize (before 2c6c65cb) never
# normalises: asking for it there is an option missing, not signature drift
NO_BATCH_NORM = {"rollout_is_batch_normalize": False}
# trainer:rollout_correction's presets (verl's own keys; rejection thresholds as the is_correction
# draws'): token IS alone, sequence IS with a token k1 ratio rejection, a k3 rejection with no IS
# weights, and batch-normalised token IS truncated at 1.5 (e^0.375 < 1.5 < e^0.5: between two ratios
# the 1/8 log-prob grid gives, so the truncation binds elsewhere than at 2.0).
ROLLOUT_CORRECTIONS = {
    "token_is": {"rollout_is": "token", "rollout_is_threshold": 2.0},
    "sequence_is_token_k1_rs": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, **rollout_rs("token_k1")},
    "seq_mean_k3_rs": {"rollout_is": None, **rollout_rs("seq_mean_k3")},
    # the two keys the others leave at verl's defaults (bypass mode reads them on policy_loss too)
    "token_is_batch_norm": {"rollout_is": "token", "rollout_is_threshold": 1.5, "rollout_is_batch_normalize": True},
}


def without_response_mask(dispatch: Callable, data: Any) -> None:
    """Trainer option response_mask_in_batch=False: a trainer whose fit computes no response_mask,
    so compute_advantage derives it itself (compute_response_mask: the last responses-width columns
    of attention_mask), where its back-compatible check exists. attention_mask is then the
    trainer's prompt-and-response one: a one-token prompt before the response mask."""
    if '"response_mask" not in data.batch' not in source_of(dispatch):
        raise Unsupported("response_mask_in_batch=False: this verl's compute_advantage reads the batch's "
                          "response_mask with no fallback (no compute_response_mask there)")
    mask = data.batch.pop("response_mask")
    data.batch["attention_mask"] = torch.cat([torch.ones_like(mask[:, :1]), mask], dim=1)


# PF-PPO (algorithm.use_pf_ppo): after GAE, compute_pf_ppo_reweight_data resamples the batch's rows,
# with replacement, by weights of their scores (pf_ppo.reweight_method; weight_pow at verl's default).
PF_PPO_POW = 2.0
PF_PPO_SEED = 0


@contextlib.contextmanager
def pf_ppo_resampling(dispatch: Callable, method: str | None):
    """PF-PPO draws its rows with torch.multinomial: for the call, torch's CPU generator starts from one
    seed (its state restored after), so two sides of a comparison given the same batch draw the same
    rows and any difference in what they return is their code's. verl's driver runs it on CPU tensors
    (it calls .numpy() on the drawn indices): on CUDA inputs the call raises as verl's would."""
    if not method:
        yield
        return
    if "use_pf_ppo" not in source_of(dispatch):
        raise Unsupported("pf_ppo: this verl's compute_advantage does not read use_pf_ppo (no PF-PPO)")
    with torch.random.fork_rng(devices=[]):  # the CPU generator, which verl's multinomial of CPU weights draws from
        torch.random.default_generator.manual_seed(PF_PPO_SEED)
        yield
