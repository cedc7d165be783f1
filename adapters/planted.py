"""Planted bugs ("teeth"): known-wrong variants of single reference functions.

Run the reference target with options {"plant": NAME} and the adapter swaps exactly one
entry of its function table (`reference.REFERENCE_OPS[plant.replaces]`) for `plant.fn`;
everything else stays the reference math. A scenario suite that does not turn `violated`
on a plant has no teeth for that bug class. `trips` names the invariant families
(sentinel/invariants) that should catch it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from . import reference as R


class Plant(NamedTuple):
    description: str
    trips: tuple[str, ...]  # invariant families that should report `violated`
    fn: Callable
    replaces: str  # key in reference.REFERENCE_OPS


def opsm_token_level(log_probs, old_log_probs, advantages, loss_mask, opsm_delta=0.1):
    """Seed 1 (slime before PR 1917): the sequence decision applied per token, by each token's advantage sign."""
    seq_kl = R.seq_mean(old_log_probs - log_probs, loss_mask)
    mask = (~((advantages < 0) & (seq_kl[:, None] > opsm_delta))).float()
    return mask, R.opsm_clipfrac(mask, loss_mask)


def norm_before_no_eos(rewards, keep_rows, index, norm, reward_clip=None, normalize=R.reward_norm):
    """Seed 2 (AReaL before PR 1351): normalise over all rows, then zero the no-EOS rows."""
    every_row = torch.ones_like(keep_rows)
    return R.keep(R.task_rewards(rewards, every_row, index, norm, reward_clip, normalize), keep_rows)


def shape_kl_in_place(kl, rewards, loss_mask, kl_coef):
    """Seed 3 (slime before PR 2114): `k = kl; k *= -kl_coef; k[last] += reward` aliases the logged KL."""
    k = kl
    k *= -kl_coef
    k += torch.where(R.last_valid(loss_mask), rewards[:, None], torch.zeros_like(k))
    return k


def off_policy_is_attached(log_probs, old_log_probs, rollout_log_probs, advantages, cfg):
    """Seed 4: the off-policy IS weight clip(pi_theta / pi_rollout) without .detach()."""
    w = torch.exp(log_probs - rollout_log_probs).clamp(1.0 - cfg["eps_clip"], 1.0 + cfg["eps_clip_high"])
    return w, -w * advantages * log_probs


def gspo_kl_over_padding(log_probs, old_log_probs, loss_mask):
    """GSPO sequence KL averaged over every position, padding included."""
    return (old_log_probs - log_probs).mean(-1, keepdim=True).expand_as(log_probs)


def token_mean_over_padding(x, loss_mask, mode="token-mean"):
    """token-mean divides the valid-token sum by B * T instead of the number of valid tokens."""
    if mode != "token-mean":
        return R.aggregate(x, loss_mask, mode)
    return R.keep(x, loss_mask).sum() / loss_mask.numel()


def reward_norm_across_groups(rewards, keep_rows, index, mean_level="batch", std_level="batch", eps=1e-5):
    """Group-level statistics taken over the whole batch (group ids dropped)."""
    return R.reward_norm(rewards, keep_rows, torch.zeros_like(index), mean_level, std_level, eps)


def kl_in_ref_storage(log_probs, ref_log_probs, loss_mask, kl_type="k1"):
    """KL estimator that saves memory by building the log-ratio in ref_log_probs' own storage."""
    log_ratio = ref_log_probs.sub_(log_probs).neg_()
    return R.kl_estimator(log_ratio, torch.zeros_like(log_ratio), loss_mask, kl_type)


def contiguous_groups(group, group_size, batch):
    """Group ids ignored: rows chunked into contiguous groups of size group_size (or B / #ids)."""
    if group is None:
        return R.group_index(None, group_size, batch)
    size = int(group_size or batch // len(torch.unique(group)))
    return torch.arange(batch) // size


def gspo_token_ratio(log_probs, old_log_probs, loss_mask):
    """importance_sampling_level sequence ignored: each token keeps its own ratio."""
    return log_probs - old_log_probs


PLANTS: dict[str, Plant] = {
    "opsm-token-level": Plant(
        "OPSM rejection decided per token from the token's advantage sign (slime PR 1917's bug): "
        "on the seed trigger mask [[0,1,0]], clipfrac 2/3, reduced loss -0.0306566.",
        ("sequence_uniform", "equals", "close"), opsm_token_level, "opsm_mask"),
    "reward-norm-before-no-eos": Plant(
        "Rewards normalised over all rows before the no-EOS rows are zeroed (AReaL PR 1351's bug): "
        "a no-EOS outlier shifts a valid row's advantage.",
        ("unchanged_under",), norm_before_no_eos, "task_rewards"),
    "kl-inplace-shaping": Plant(
        "PPO reward shaping done in place on the KL tensor (slime PR 2114's bug): logged_kl becomes "
        "the shaped token reward.",
        ("agree", "close"), shape_kl_in_place, "shape_token_rewards"),
    "is-weight-attached": Plant(
        "Off-policy IS weight clip(pi_theta/pi_rollout) not detached (slime PR 2084's requirement): "
        "gradient flows through the weight.",
        ("detached", "gradient"), off_policy_is_attached, "off_policy_is"),
    "masked-kl-leak": Plant(
        "GSPO sequence KL averaged over all positions, masked ones included: padding values and "
        "NaN there leak into every token.",
        ("masked_invariance", "finite"), gspo_kl_over_padding, "gspo_seq_kl"),
    "loss-agg-counts-padding": Plant(
        "token-mean divides by B*T instead of the valid-token count: adding padding changes the loss.",
        ("padding_invariant",), token_mean_over_padding, "aggregate"),
    "grpo-cross-group": Plant(
        "Group reward statistics computed over the whole batch: one group's rewards move another's.",
        ("group_isolation",), reward_norm_across_groups, "reward_norm"),
    "input-mutation": Plant(
        "KL estimator writes log pi - log ref into ref_log_probs' storage: the caller's tensor changes.",
        ("unmutated",), kl_in_ref_storage, "kl_estimator"),
    "gspo-token-ratio": Plant(
        "importance_sampling_level sequence ignored (each token clipped on its own ratio): GSPO's "
        "sequence-level clip decision splits within a sequence.",
        ("sequence_uniform", "close", "gradient"), gspo_token_ratio, "gspo_token_log_ratio"),
    "row-order": Plant(
        "GRPO groups taken as contiguous chunks, ignoring the group ids: permuting rows regroups them.",
        ("permutation_equivariant", "group_isolation"), contiguous_groups, "group_index"),
}
