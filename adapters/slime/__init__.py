"""slime adapter: calls THUDM/slime's real loss-path functions at canonical boundaries.

Modules: ``adapter`` (`SlimeAdapter`: loading and the boundaries, each marked with the slime
functions it calls), ``entry`` (the reduced loss through slime's Megatron loss entry),
``responses`` (canonical rows <-> slime's per-sample response lists),
``conventions`` (slime's module names, ``args`` defaults, estimator names), ``megatron``
(the one-rank Megatron shim), ``context_parallel`` (the reducer's context-parallel ranks played
in turn on one process).

Where the code lives in slime (paths relative to a checkout):
- ``slime/utils/ppo_utils.py``: compute_approx_kl, compute_opsm_mask, compute_gspo_kl,
  compute_policy_loss, compute_cispo_loss, get_grpo_returns, get_reinforce_plus_plus_*,
  get_advantages_and_returns_batch (GAE via chunked_gae / vanilla_gae).
- ``slime/backends/megatron_utils/loss.py``: compute_advantages_and_returns (the estimator
  switch that fills ``rollout_data``), vanilla_tis_function, icepop_function, and the loss
  entry loss_function -> policy_loss_function (on logits built from the log-probs).
- ``slime/backends/megatron_utils/cp_utils.py``: get_sum_of_sample_mean (slime's loss
  reducer: per-sample mean or per-token sum over ``loss_masks``).
- ``slime/ray/rollout.py``: RolloutManager._post_process_rewards (GRPO / REINFORCE++-baseline
  group reward normalisation, done before compute_advantages_and_returns).

Conventions translated here:
- canonical ``[B, T]`` -> one response tensor per sample (``responses``): the whole row, every
  position (``layout.rows``; masked head and tail positions, and what they hold, reach slime as
  masked response tokens, as a multi-turn sample's tool output or a removed sample's do), or,
  under the drawn ``trainer:masked_tail`` padding, the row up to its last valid position (the
  masked tail is padding slime never holds: ragged response lengths); ``loss_masks`` as int32 (as
  slime's actor moves them to the GPU), ``response_lengths`` = each response's length,
  ``total_lengths`` = that + 1 (the one-token prompt the loss entry builds); a fully masked row is a
  sample whose loss mask slime zeroed (``Sample.remove_sample``), and for ``reward_norm`` a row
  with mask 0 is a Sample with ``remove_sample`` set;
- one process, context-parallel size 1 (``megatron.core.mpu`` is a functional shim), one
  micro-batch, data-parallel size 1, step_global_batch_size = B, one sample per rollout
  (``rollout_mask_sums`` = each sample's own mask total); except ``loss_agg``, which draws a
  context-parallel size (1, 2, 4) and a prompt length: the shim answers each rank in turn, slime's
  reducer gets that rank's zigzag share of every sample, the ranks' results are summed
  (``context_parallel``);
- an ``argparse.Namespace`` ``args`` carrying slime's option names with slime's defaults; a
  read of an option this adapter does not set fails loudly (signature drift).

The package ``slime.backends.megatron_utils`` is entered without running its ``__init__``
(which wires the Ray actor, Megatron model and checkpoint code, or at newer commits the
accelerator and Megatron grad-coalesce patches); the loss-path modules themselves are
imported and executed as they are.

Reduced policy losses come from slime's own loss entry (``entry.EntryLoss._entry_loss``):
loss_function -> policy_loss_function on logits whose log-softmax is the canonical log-probs. Per-token
outputs come from the functions policy_loss_function calls, called directly; every number
comes from a slime function.
"""

from .adapter import SlimeAdapter

__all__ = ["SlimeAdapter"]
