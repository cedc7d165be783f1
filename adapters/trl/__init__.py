"""TRL adapter: calls huggingface/trl's GRPO loss at the canonical boundaries.

Target: https://github.com/huggingface/trl (``trl`` on PyPI), the installed package
(``root=None``) or a checkout (``root`` = the folder that holds ``trl/``), any commit since
``GRPOTrainer._compute_loss`` exists (v0.17.0).

What each boundary reaches (``trl.trainer.grpo_trainer.GRPOTrainer``):

==============  ============================================================================
policy_loss     ``_compute_loss`` on a bare trainer (``bare.bare_trainer``): loss_type
                "bnpo" for token-mean, "grpo" for seq-mean-token-mean (options.loss_type:
                "dapo", "dr_grpo", ...), ``importance_sampling_level`` "sequence" (GSPO),
                dual clip as ``args.delta``; ``pg_loss`` is its ``per_token_loss`` and
                ``clipfrac`` its ``is_region_clipped``, read from its frame on return
                (sentinel/adapters/frames.py)
cispo_loss      ``_compute_loss`` with loss_type "cispo" (epsilon_high = 1 + eps_clip_high)
loss_agg        ``_compute_loss`` with log pi = log pi_old and advantages -values, so the
                per-token loss it reduces is ``values``
opsm_mask       ``_compute_loss`` with ``off_policy_mask_threshold``: the mask of
                ``get_off_policy_mask`` (its ``off_policy_mask`` local), the per-token loss
                and the reduced loss
kl              ``_compute_loss`` with beta 1: its ``per_token_kl`` (k3, unclamped)
actor_logprobs  ``_get_per_token_logps_and_entropies`` on a bare trainer with a stand-in
                model (``batch_size`` micro-batches, temperature, ``logits_to_keep``, a forward
                without it, the image inputs of a vision-language batch: actor.StandInVLM);
                token-budget batching and packing: none in TRL; the fused LM head of
                TRL >= 1.11 is not mapped (actor.py)
==============  ============================================================================

Not offered (``TRLAdapter.declines``): advantages and reward_norm (computed during
generation), gae, gspo_kl, is_correction (the vLLM IS ratio is computed during generation).

Conventions translated here
---------------------------
- A completion is a ``[B, T]`` row after a one-token prompt. ``completion_mask`` (attention
  and loss) covers each row up to its last trained token; untrained tokens inside that span
  (tool output) are TRL's ``tool_mask`` where it has one, else the loss mask is the
  completion mask. A row with no trained token has an all-zero completion mask (what
  ``mask_truncated_completions`` leaves for a truncated completion).
- Advantages: GRPO's one value per sequence when a row's valid tokens share one; else the
  ``[B, T]`` tensor, which ``_compute_loss`` accepts since it serves MiniLLM (earlier
  versions: unsupported). Old log-probs come as ``old_per_token_logps`` (``num_iterations``
  2, so every version reads them); ``num_items_in_batch`` (dapo, cispo) is the batch's valid
  token count, one process, one accumulation step.
- The model: `bare.CanonicalPolicy` (fused LM head, or logits whose log-softmax is the
  canonical log-prob; an MoE aux loss when asked for router logits). The loss is what ``_compute_loss`` returns (divided by one
  gradient-accumulation step).

Import shims
------------
TRL needs the real ``transformers`` and ``accelerate`` (``pip install 'rl-sentinel[trl]'``);
datasets, pandas, pyarrow, vllm, ... are stubbed (``adapter.HEAVY_DEPS``) when not installed.
"""

from .adapter import TRLAdapter

__all__ = ["TRLAdapter"]
