"""Where verl departs from the reference math on purpose: its documented conventions, each with
the reason and the line of verl 0.9.1 that shows it (`sentinel hunt --target verl --against
reference` reports them as `deviation`, never as findings). Each names the function it excuses
and the hashes of its body as read, at the checkout b178a3cd5 and in the verl 0.9.1 package
(`sentinel list boundaries --target verl` prints the hash at a checkout): where that body
changes, the deviation is skipped and the difference reported."""

from __future__ import annotations

from sentinel.adapters.contract import deviation

_VERL = "https://github.com/volcengine/verl/blob/v0.9.1/verl"
_CORE = f"{_VERL}/trainer/ppo/core_algos.py"
# the functions the deviations excuse, with their body hashes (excuses.body_hash) as read: one where
# the checkout and 0.9.1 agree, else the checkout's then 0.9.1's (the convention holds in both)
_ALGOS, _TF = "verl.trainer.ppo.core_algos", "verl.utils.torch_functional"
_GRPO = dict(source=f"{_ALGOS}:compute_grpo_outcome_advantage", body=("181d78f023b9",))
_RPP_BASELINE = dict(source=f"{_ALGOS}:compute_reinforce_plus_plus_baseline_outcome_advantage", body=("7a224e4f5e97",))
_AGG_LOSS = dict(source=f"{_ALGOS}:agg_loss", body=("dd30e0c1d0c3", "b73894975cc6"))
_MASKED_VAR = dict(source=f"{_TF}:masked_var", body=("5e8c1fac8c32",))
_MASKED_WHITEN = dict(source=f"{_TF}:masked_whiten", body=("e8cd2e79e1e2",))
_COMPUTE_LOG_PROB = dict(source="verl.workers.actor.dp_actor:DataParallelPPOActor.compute_log_prob", body=("0f652bebaa5e",))
_IS_METRICS = dict(source="verl.trainer.ppo.rollout_corr_helper:compute_is_metrics", body=("dc9bcb3f4ca4", "84a90b530135"))


def _global_batch_deviations() -> dict:
    """agg_loss's sequence means over the trainer's global_batch_size, on each loss boundary."""
    why = ("the sequence mean divides by the mini-batch's global_batch_size (the trainer passes ppo_mini_batch_size, "
           "a constant, so the loss does not depend on the parallel layout): a fully masked sequence still counts; "
           "the reference averages over sequences with a valid token")
    return {f"seq-mean-over-global-batch-{b}": deviation(
        b, observables=("loss", f"grad:loss/{w}"), when={key: ["seq-mean-token-mean", "seq-mean-token-sum"]},
        reason=why, link=f"{_CORE}#L1181-L1202", **_AGG_LOSS)
        for b, key, w in (("loss_agg", "mode", "values"), ("policy_loss", "loss_agg", "log_probs"),
                          ("cispo_loss", "loss_agg", "log_probs"))}


DEVIATIONS = {
    "grpo-singleton-group": deviation(
        "advantages", observables=("advantages", "returns"),
        when={"estimator": ["grpo", "grpo_vectorized", "reinforce_plus_plus_baseline"]},
        reason="a group of one response gets mean 0 (GRPO: and std 1): its advantage is its raw score (the "
               "reference centres it on itself: 0)", link=f"{_CORE}#L315-L317 and #L572-L573", **_GRPO),
    "whiten-needs-two-tokens": deviation(
        "advantages", observables=("exception",),
        reason="verl_F.masked_whiten (GAE, REINFORCE++) raises ValueError on a batch with one valid token: "
               "its unbiased variance divides by n - 1",
        link=f"{_VERL}/utils/torch_functional.py#L316-L325", **_MASKED_VAR),
    "var-needs-two-values": deviation(
        "masked_reduce", observables=("exception",), when={"op": ["var", "whiten"], "unbiased": [True]},
        reason="verl_F.masked_var (and masked_whiten through it) raises ValueError when the mask selects fewer "
               "than two values: its unbiased variance divides by n - 1 (the reference returns 0)",
        link=f"{_VERL}/utils/torch_functional.py#L311-L326", **_MASKED_VAR),
    "whiten-needs-two-tokens-gae": deviation(
        "gae", observables=("exception",), reason="as whiten-needs-two-tokens: compute_gae_advantage_return "
        "whitens with masked_whiten, which raises on one valid token",
        link=f"{_VERL}/utils/torch_functional.py#L316-L325", **_MASKED_VAR),
    "whiten-epsilon-inside-the-root": deviation(
        "advantages", observables=("advantages",), when={"normalize_advantages": [True]},
        reason="masked_whiten divides by rsqrt(var + 1e-8), the reference by (std + 1e-8): advantages whose "
               "spread is near 1e-4 come out smaller",
        link=f"{_VERL}/utils/torch_functional.py#L342-L343", **_MASKED_WHITEN),
    "rpp-baseline-returns-whitened": deviation(
        "advantages", observables=("returns",), when={"estimator": ["reinforce_plus_plus_baseline"]},
        reason="compute_reinforce_plus_plus_baseline_outcome_advantage returns (scores, scores): its returns are "
               "the whitened advantages; the reference's returns are the advantages before normalisation",
        link=f"{_CORE}#L582-L584", **_RPP_BASELINE),
    "rpp-baseline-sequence-score": deviation(
        "advantages", observables=("advantages", "returns"),
        when={"estimator": ["reinforce_plus_plus_baseline"], "kl_coef": [0.05, 0.1, 1.0]},
        reason="RF++-baseline operates on outcome rewards only: the token-level rewards (score minus the KL "
               "penalty at each token) are summed into one sequence score, centred on its group and broadcast; "
               "the reference subtracts the KL penalty at each token",
        link=f"{_CORE}#L545-L562", **_RPP_BASELINE),
    "token-rewards-are-raw-scores": deviation(
        "advantages", observables=("token_rewards",),
        when={"estimator": ["grpo", "grpo_vectorized", "reinforce_plus_plus_baseline", "rloo"]},
        reason="token_level_rewards hold the reward manager's raw score (and the KL penalty); the group-level "
               "normalisation happens inside the estimator, so they are not the normalised reward the reference "
               "places at the last token",
        link=f"{_CORE}#L562", **_RPP_BASELINE),
    "tis-needs-a-valid-token": deviation(
        "is_correction", observables=("exception",),
        reason="rollout_corr_helper raises ValueError on a batch whose response_mask has no valid token",
        link=f"{_VERL}/trainer/ppo/rollout_corr_helper.py#L441-L442", **_IS_METRICS),
    **_global_batch_deviations(),
    **{f"compute-log-prob-without-gradient-{key}": deviation(
        "actor_logprobs", observables=("grad:log_probs/logits", "grad:entropy/logits"), when={key: values},
        reason="with micro-batching or dynamic batching the actor's log-probs come from compute_log_prob, which "
               "runs its forward under torch.no_grad(): it serves the old log-probs of the PPO ratio, and the "
               "update recomputes them with a gradient in update_policy; the reference's log-softmax has one",
        link="https://github.com/volcengine/verl/blob/b178a3cd5/verl/workers/actor/dp_actor.py#L471",
        **_COMPUTE_LOG_PROB)
       for key, values in (("micro_batch_size", tuple(range(1, 65))), ("use_dynamic_bsz", (True,)))},
}
