"""Planted bugs ("teeth") of the reference target: one record each, its code beside its name.

Run the reference target with options {"plant": NAME} (`sentinel gate --plant NAME`) and its
adapter swaps exactly one entry of its function table (`ops.REFERENCE_OPS[plant.replaces]`)
for the plant's known-wrong function (`plant.code`); everything else stays the reference
math. A scenario suite that does not turn `violated` on a plant has no teeth for that bug
class. `trips` names the invariant families (sentinel/invariants) that should catch it,
`hunt` the boundary `sentinel hunt` finds it on with no trigger given.

A new plant is one function below and one record in `PLANTS`: tests/test_teeth.py then
requires the catalog to turn `violated` on it in one of its `trips`, and tests/test_hunt.py
and benchmarks/bench_hunt.py require `sentinel hunt` to find it on its `hunt` boundary.

Each function has the signature of the table entry it replaces and builds on the correct
math of `ops.py`, which imports nothing from here. Torch and that math are imported on a
plant's first call, so the CLI lists and checks plants without importing torch.
`sentinel list plants` lists them.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, NamedTuple


class _OnFirstUse:
    """A module imported on its first attribute access (see the module docstring)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


torch: Any = _OnFirstUse("torch")
R: Any = _OnFirstUse("sentinel_adapters.reference.ops")


class Plant(NamedTuple):
    description: str
    trips: tuple[str, ...]  # invariant families that should report `violated`
    replaces: str  # key in ops.REFERENCE_OPS
    hunt: str  # the boundary a hunt finds it on
    code: Callable  # the known-wrong function that replaces that entry


def opsm_token_level(log_probs, old_log_probs, advantages, loss_mask, opsm_delta=0.1):
    """Seed 1 (slime before PR 1917): the sequence decision applied per token, by each token's advantage sign."""
    seq_kl = R.seq_mean(old_log_probs - log_probs, loss_mask)
    mask = (~((advantages < 0) & (seq_kl[:, None] > opsm_delta))).float()
    return mask, R.opsm_clipfrac(mask, loss_mask)


def norm_before_no_eos(rewards, keep_rows, index, norm, reward_clip=None, normalize=None):
    """Seed 2 (AReaL before PR 1351): normalise over all rows, then zero the no-EOS rows."""
    normalize = normalize or R.reward_norm
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


def kl_straight_through_k1_gradient(log_probs, ref_log_probs, loss_mask, kl_type="k1"):
    """Straight-through KL that borrows k1's gradient (1 at every valid token) instead of k2's: the
    value is right, the gradient's expectation is 0 instead of grad KL."""
    if not kl_type.endswith("+"):
        return R.kl_estimator(log_probs, ref_log_probs, loss_mask, kl_type)
    value = R.kl_estimator(log_probs, ref_log_probs, loss_mask, kl_type[:-1])
    k1 = R.kl_estimator(log_probs, ref_log_probs, loss_mask, "k1")
    return value.detach() + (k1 - k1.detach())


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


def ppo_ratio_in_low_precision(log_probs, old_log_probs, advantages, eps_clip=0.2, eps_clip_high=None,
                               eps_clip_c=None):
    """The PPO ratio in the current log-probs' dtype: a bf16 forward rounds the fp32 old log-probs."""
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = torch.exp(log_probs - old_log_probs.to(log_probs.dtype))
    unclipped, clipped = -advantages * ratio, -advantages * ratio.clamp(1.0 - eps_clip, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    if eps_clip_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * eps_clip_c), loss)
    return loss, (clipped > unclipped).float()


def actor_forward_temperature_twice(logits, tokens, attention_mask, temperature=1.0, use_remove_padding=False):
    """The model's logits divided by T before the forward's own log-prob step divides again."""
    return R.forward_micro_batch(logits / temperature, tokens, attention_mask, temperature, use_remove_padding)


def actor_concat_in_batch_order(results, batches):
    """Micro-batch results concatenated in the order the micro-batches ran, never put back."""
    return torch.cat(results)


def actor_unpad_one_late(logits, tokens, attention_mask, temperature=1.0, use_remove_padding=False):
    """Packed results scattered back one token late: each real token gets its predecessor's value."""
    log_probs, entropy = R.forward_micro_batch(logits, tokens, attention_mask, temperature, use_remove_padding)
    if not use_remove_padding:
        return log_probs, entropy
    real = attention_mask.bool()
    late = lambda x: x.new_zeros(real.shape).masked_scatter(real, torch.roll(x[real], 1))  # noqa: E731
    return late(log_probs), late(entropy)


PLANTS: dict[str, Plant] = {
    "opsm-token-level": Plant(
        "OPSM rejection decided per token from the token's advantage sign (slime PR 1917's bug): "
        "on the seed trigger mask [[0,1,0]], clipfrac 2/3, reduced loss -0.0306566.",
        trips=("sequence_uniform", "equals", "close"), replaces="opsm_mask", hunt="opsm_mask", code=opsm_token_level),
    "reward-norm-before-no-eos": Plant(
        "Rewards normalised over all rows before the no-EOS rows are zeroed (AReaL PR 1351's bug): "
        "a no-EOS outlier shifts a valid row's advantage.",
        trips=("unchanged_under",), replaces="task_rewards", hunt="advantages", code=norm_before_no_eos),
    "kl-inplace-shaping": Plant(
        "PPO reward shaping done in place on the KL tensor (slime PR 2114's bug): logged_kl becomes "
        "the shaped token reward.",
        trips=("agree", "close"), replaces="shape_token_rewards", hunt="advantages", code=shape_kl_in_place),
    "is-weight-attached": Plant(
        "Off-policy IS weight clip(pi_theta/pi_rollout) not detached (slime PR 2084's requirement): "
        "gradient flows through the weight.",
        trips=("detached", "gradient"), replaces="off_policy_is", hunt="is_correction", code=off_policy_is_attached),
    "masked-kl-leak": Plant(
        "GSPO sequence KL averaged over all positions, masked ones included: padding values and "
        "NaN there leak into every token.",
        trips=("masked_invariance", "finite"), replaces="gspo_seq_kl", hunt="gspo_kl", code=gspo_kl_over_padding),
    "loss-agg-counts-padding": Plant(
        "token-mean divides by B*T instead of the valid-token count: adding padding changes the loss.",
        trips=("padding_invariant", "close"), replaces="aggregate", hunt="loss_agg", code=token_mean_over_padding),
    "grpo-cross-group": Plant(
        "Group reward statistics computed over the whole batch: one group's rewards move another's.",
        trips=("group_isolation",), replaces="reward_norm", hunt="reward_norm", code=reward_norm_across_groups),
    "input-mutation": Plant(
        "KL estimator writes log pi - log ref into ref_log_probs' storage: the caller's tensor changes.",
        trips=("unmutated",), replaces="kl_estimator", hunt="kl", code=kl_in_ref_storage),
    "kl-straight-through-k1-gradient": Plant(
        "Straight-through KL (kl_type k1+ / k3+) that borrows k1's gradient instead of k2's: the value is "
        "k1 / k3, but d kl / d log pi is 1 at every valid token, not log pi - log ref.",
        trips=("straight_through",), replaces="kl_estimator", hunt="kl", code=kl_straight_through_k1_gradient),
    "gspo-token-ratio": Plant(
        "importance_sampling_level sequence ignored (each token clipped on its own ratio): GSPO's "
        "sequence-level clip decision splits within a sequence.",
        trips=("sequence_uniform", "close", "gradient"), replaces="gspo_token_log_ratio", hunt="policy_loss",
        code=gspo_token_ratio),
    "row-order": Plant(
        "GRPO groups taken as contiguous chunks, ignoring the group ids: permuting rows regroups them.",
        trips=("permutation_equivariant", "group_isolation"), replaces="group_index", hunt="reward_norm",
        code=contiguous_groups),
    "logprobs-temperature-inplace": Plant(
        "Temperature applied to the caller's logits in place (logits.div_(T), verl's post_process_logits "
        "pattern): the log-probs are right, but the logits the caller still holds are divided by T.",
        trips=("unmutated",), replaces="token_log_probs", hunt="logprobs", code=log_probs_scaling_in_place),
    "logprobs-temperature-twice": Plant(
        "Temperature applied twice (the engine divides the logits, then the log-prob helper divides again): "
        "log-probs and entropy are those of softmax(logits / T^2).",
        trips=("close",), replaces="token_log_probs", hunt="logprobs", code=log_probs_temperature_twice),
    "values-shifted": Plant(
        "Values read one position late (value_head[b, t + 1], an off-by-one in the prompt/response "
        "slicing): a masked position's head output becomes the last response token's value.",
        trips=("close", "masked_invariance", "finite"), replaces="critic_values", hunt="values", code=values_one_late),
    "metrics-over-padding": Plant(
        "Logged metrics averaged over every position, padding included: clipfrac and approx_kl move with "
        "values under the mask and with extra padding (and NaN / Inf there reach them).",
        trips=("masked_invariance", "padding_invariant", "close", "finite"), replaces="policy_metrics", hunt="metrics",
        code=metrics_over_padding),
    "masked-reduce-multiplies": Plant(
        "Masked reductions as (x * mask).sum() instead of selecting valid values: NaN or Inf at a masked "
        "position makes the mean, sum, variance and whitening NaN.",
        trips=("finite",), replaces="masked_reduce", hunt="masked_reduce", code=masked_reduce_by_product),
    "actor-temperature-twice": Plant(
        "The actor divides the model's logits by T and its log-prob step divides them again: log-probs and "
        "entropy of softmax(logits / T^2).",
        trips=("close",), replaces="forward_micro_batch", hunt="actor_logprobs", code=actor_forward_temperature_twice),
    "actor-concat-reorders": Plant(
        "Micro-batch results concatenated in the order the micro-batches ran: with dynamic batching (longest "
        "rows first) the rows come back sorted by length, not in the batch's order.",
        trips=("batching_invariant", "permutation_equivariant", "close"), replaces="restore_order",
        hunt="actor_logprobs", code=actor_concat_in_batch_order),
    "actor-unpad-offset": Plant(
        "With padding removed, the packed results scattered back one token late (an off-by-one in the pad "
        "step): each response token gets its predecessor's log-prob, and the first one the last prompt token's "
        "(whose logits, junk included, then reach the response).",
        trips=("batching_invariant", "close", "masked_invariance", "finite"), replaces="forward_micro_batch", hunt="actor_logprobs",
        code=actor_unpad_one_late),
    "ratio-in-low-precision": Plant(
        "The PPO log-ratio taken in the policy log-probs' dtype (`log_probs - old_log_probs.to(log_probs.dtype)`): "
        "with bf16 log-probs the fp32 old log-probs are rounded to 8 bits of mantissa, and the ratio moves by "
        "up to 2^-8 * |log p|; in fp32 nothing changes.",
        trips=("precision",), replaces="ppo_policy_loss", hunt="policy_loss", code=ppo_ratio_in_low_precision),
}
