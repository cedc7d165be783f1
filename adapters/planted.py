"""Planted bugs ("teeth"), the code: known-wrong variants of single reference functions.

`BUGS[NAME]` replaces `reference.REFERENCE_OPS[PLANTS[NAME].replaces]` when the
reference target runs with options {"plant": NAME} (`sentinel gate --plant NAME`); the
catalogue (descriptions, the invariant families each should trip) is the torch-free
`plants.py`. Each function has the signature of the table entry it replaces and builds on
the correct math of `reference.py`, which imports nothing from here.

A new plant is two entries: its `Plant` in plants.py and its function in `BUGS` below.
Then tests/test_teeth.py requires the scenario catalog to turn `violated` on it in one of
the families of its `trips`, and tests/test_hunt.py and benchmarks/bench_hunt.py require
`sentinel hunt` to find it with no trigger given (each names the boundary to hunt it on).

`sentinel list plants` lists the catalogue.
"""

from __future__ import annotations

from typing import Callable

import torch

from . import reference as R


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


def log_probs_scaling_in_place(logits, tokens, loss_mask, temperature=1.0):
    """Temperature applied to the caller's logits in place, to save a [B, T, V] copy."""
    with torch.no_grad():
        logits.div_(temperature)
    return R.token_log_probs(logits, tokens, loss_mask, 1.0)


def log_probs_temperature_twice(logits, tokens, loss_mask, temperature=1.0):
    """Temperature applied by the caller and again by the log-prob helper."""
    return R.token_log_probs(logits / temperature, tokens, loss_mask, temperature)


def values_one_late(value_head, loss_mask):
    """values[b, t] = value_head[b, t + 1]: the head output one position late (0 past the end)."""
    late = torch.cat([value_head[:, 1:], torch.zeros_like(value_head[:, :1])], dim=1)
    return R.keep(late, loss_mask)


def metrics_over_padding(log_probs, old_log_probs, advantages, loss_mask, eps_clip=0.2, eps_clip_high=None,
                         eps_clip_c=None, agg="token-mean"):
    """Every position counted as valid when the metrics are reduced (padding included)."""
    return R.policy_metrics(log_probs, old_log_probs, advantages, torch.ones_like(loss_mask), eps_clip,
                            eps_clip_high, eps_clip_c, agg)


def masked_reduce_by_product(x, loss_mask, op="mean", dim="all", unbiased=True, shift_mean=True, eps=1e-8):
    """Masked reductions as sums of x * mask: 0 * NaN is NaN, so a NaN under the mask poisons them."""
    m = loss_mask.to(x.dtype)
    kw = {} if dim == "all" else {"dim": -1, "keepdim": True}
    n = m.sum(**kw)
    total = (x * m).sum(**kw)
    mean = total / n.clamp_min(1)
    var = ((x - mean) ** 2 * m).sum(**kw) / (n - (1 if unbiased else 0)).clamp_min(1)
    if op == "whiten":
        out = (x - mean) / torch.sqrt(var + eps)
        return R.keep(out if shift_mean else out + mean, loss_mask)
    out = {"mean": mean, "sum": total, "var": var}[op]
    return out if dim == "all" else out.squeeze(-1)


# plant name (plants.PLANTS) -> the function that replaces its table entry
def ppo_policy_loss_ratio(log_probs, old_log_probs):
    return torch.exp(log_probs - old_log_probs.to(log_probs.dtype))


def ppo_ratio_in_low_precision(log_probs, old_log_probs, advantages, eps_clip=0.2, eps_clip_high=None,
                               eps_clip_c=None):
    """The ratio in the current log-probs' dtype: a bf16 forward rounds the fp32 old log-probs."""
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = ppo_policy_loss_ratio(log_probs, old_log_probs)
    unclipped, clipped = -advantages * ratio, -advantages * ratio.clamp(1.0 - eps_clip, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    if eps_clip_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * eps_clip_c), loss)
    return loss, (clipped > unclipped).float()


BUGS: dict[str, Callable] = {
    "opsm-token-level": opsm_token_level,
    "reward-norm-before-no-eos": norm_before_no_eos,
    "kl-inplace-shaping": shape_kl_in_place,
    "is-weight-attached": off_policy_is_attached,
    "masked-kl-leak": gspo_kl_over_padding,
    "loss-agg-counts-padding": token_mean_over_padding,
    "grpo-cross-group": reward_norm_across_groups,
    "input-mutation": kl_in_ref_storage,
    "gspo-token-ratio": gspo_token_ratio,
    "row-order": contiguous_groups,
    "logprobs-temperature-inplace": log_probs_scaling_in_place,
    "logprobs-temperature-twice": log_probs_temperature_twice,
    "values-shifted": values_one_late,
    "metrics-over-padding": metrics_over_padding,
    "masked-reduce-multiplies": masked_reduce_by_product,
    "ratio-in-low-precision": ppo_ratio_in_low_precision,
}
