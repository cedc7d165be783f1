"""Planted bugs ("teeth"), the catalogue: names, what each does, what should catch it.

Run the reference target with options {"plant": NAME} and its adapter swaps exactly one
entry of its function table (`reference.REFERENCE_OPS[plant.replaces]`) for the
plant's known-wrong function (`planted.BUGS[NAME]`); everything else stays the reference
math. A scenario suite that does not turn `violated` on a plant has no teeth for that bug
class. `trips` names the invariant families (sentinel/invariants) that should catch it.

Torch-free: the CLI lists and checks plants without importing torch.
"""

from __future__ import annotations

from typing import NamedTuple


class Plant(NamedTuple):
    description: str
    trips: tuple[str, ...]  # invariant families that should report `violated`
    replaces: str  # key in reference.REFERENCE_OPS


PLANTS: dict[str, Plant] = {
    "opsm-token-level": Plant(
        "OPSM rejection decided per token from the token's advantage sign (slime PR 1917's bug): "
        "on the seed trigger mask [[0,1,0]], clipfrac 2/3, reduced loss -0.0306566.",
        ("sequence_uniform", "equals", "close"), "opsm_mask"),
    "reward-norm-before-no-eos": Plant(
        "Rewards normalised over all rows before the no-EOS rows are zeroed (AReaL PR 1351's bug): "
        "a no-EOS outlier shifts a valid row's advantage.",
        ("unchanged_under",), "task_rewards"),
    "kl-inplace-shaping": Plant(
        "PPO reward shaping done in place on the KL tensor (slime PR 2114's bug): logged_kl becomes "
        "the shaped token reward.",
        ("agree", "close"), "shape_token_rewards"),
    "is-weight-attached": Plant(
        "Off-policy IS weight clip(pi_theta/pi_rollout) not detached (slime PR 2084's requirement): "
        "gradient flows through the weight.",
        ("detached", "gradient"), "off_policy_is"),
    "masked-kl-leak": Plant(
        "GSPO sequence KL averaged over all positions, masked ones included: padding values and "
        "NaN there leak into every token.",
        ("masked_invariance", "finite"), "gspo_seq_kl"),
    "loss-agg-counts-padding": Plant(
        "token-mean divides by B*T instead of the valid-token count: adding padding changes the loss.",
        ("padding_invariant", "close"), "aggregate"),
    "grpo-cross-group": Plant(
        "Group reward statistics computed over the whole batch: one group's rewards move another's.",
        ("group_isolation",), "reward_norm"),
    "input-mutation": Plant(
        "KL estimator writes log pi - log ref into ref_log_probs' storage: the caller's tensor changes.",
        ("unmutated",), "kl_estimator"),
    "gspo-token-ratio": Plant(
        "importance_sampling_level sequence ignored (each token clipped on its own ratio): GSPO's "
        "sequence-level clip decision splits within a sequence.",
        ("sequence_uniform", "close", "gradient"), "gspo_token_log_ratio"),
    "row-order": Plant(
        "GRPO groups taken as contiguous chunks, ignoring the group ids: permuting rows regroups them.",
        ("permutation_equivariant", "group_isolation"), "group_index"),
    "logprobs-temperature-inplace": Plant(
        "Temperature applied to the caller's logits in place (logits.div_(T), verl's post_process_logits "
        "pattern): the log-probs are right, but the logits the caller still holds are divided by T.",
        ("unmutated",), "token_log_probs"),
    "logprobs-temperature-twice": Plant(
        "Temperature applied twice (the engine divides the logits, then the log-prob helper divides again): "
        "log-probs and entropy are those of softmax(logits / T^2).",
        ("close",), "token_log_probs"),
    "values-shifted": Plant(
        "Values read one position late (value_head[b, t + 1], an off-by-one in the prompt/response "
        "slicing): a masked position's head output becomes the last response token's value.",
        ("close", "masked_invariance", "finite"), "critic_values"),
    "metrics-over-padding": Plant(
        "Logged metrics averaged over every position, padding included: clipfrac and approx_kl move with "
        "values under the mask and with extra padding (and NaN / Inf there reach them).",
        ("masked_invariance", "padding_invariant", "close", "finite"), "policy_metrics"),
    "masked-reduce-multiplies": Plant(
        "Masked reductions as (x * mask).sum() instead of selecting valid values: NaN or Inf at a masked "
        "position makes the mean, sum, variance and whitening NaN.",
        ("finite",), "masked_reduce"),
    "ratio-in-low-precision": Plant(
        "The PPO log-ratio taken in the policy log-probs' dtype (`log_probs - old_log_probs.to(log_probs.dtype)`): "
        "with bf16 log-probs the fp32 old log-probs are rounded to 8 bits of mantissa, and the ratio moves by "
        "up to 2^-8 * |log p|; in fp32 nothing changes.",
        ("precision",), "ppo_policy_loss"),
}
