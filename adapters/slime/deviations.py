"""Where slime departs from the reference math on purpose: its documented conventions, each with
the reason and the line of slime that shows it (`sentinel hunt --target slime --against
reference` reports them as `deviation`, never as findings). Each names the function it excuses
and the hash of its body as read (`sentinel list boundaries --target slime` prints the hash at a
checkout): where that body changes, the deviation is skipped and the difference reported."""

from __future__ import annotations

from sentinel.adapters.contract import deviation

_LOSS_FUNCTION = dict(source="slime.backends.megatron_utils.loss:loss_function", body="db10c42b504c")  # at 624b824a8

DEVIATIONS = {
    "per-sample-mean-over-step-samples": deviation(
        "policy_loss", observables=("loss", "grad:loss/log_probs"), when={"loss_agg": ["seq-mean-token-mean"]},
        reason="the per-sample mean is divided by the step's sample count (step_global_batch_size, a constant "
               "of the step, as its comment says), so a sample whose loss mask is all zero still counts; the "
               "reference averages over samples with a valid token",
        link="https://github.com/THUDM/slime/blob/624b824a8/slime/backends/megatron_utils/loss.py#L1352-L1374",
        **_LOSS_FUNCTION),
    "per-sample-mean-over-step-samples-cispo": deviation(
        "cispo_loss", observables=("loss", "grad:loss/log_probs"), when={"loss_agg": ["seq-mean-token-mean"]},
        reason="as per-sample-mean-over-step-samples: slime's loss_function divides by the step's sample count",
        link="https://github.com/THUDM/slime/blob/624b824a8/slime/backends/megatron_utils/loss.py#L1352-L1374",
        **_LOSS_FUNCTION),
}
