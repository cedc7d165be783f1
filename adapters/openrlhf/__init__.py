"""OpenRLHF adapter: calls OpenRLHF's real loss-path code at the canonical boundaries.

Target: https://github.com/OpenRLHF/OpenRLHF (``openrlhf`` on PyPI), the installed package
(``root=None``) or a checkout (``root`` = the folder that holds ``openrlhf/``), any commit
since v0.5.0.

What each boundary reaches (``openrlhf.models.loss`` / ``.utils``, ``trainer.ppo_utils``):

==============  ============================================================================
policy_loss     ``PolicyLoss`` (clip, asymmetric clip since 0.7, ``dual_clip``,
                ``policy_loss_type="gspo"`` for importance_sampling_level=sequence), on
                one micro-batch with the actor's normalisers (``utils.loss_utils.
                get_loss_batch_info`` where it exists, asked with the replay buffer and step
                as ``training_step`` asks; drawn dynamic batching: the buffer holds the
                step's counts). The per-token loss is the tensor
                ``PolicyLoss.forward`` hands ``aggregate_loss`` (before 0.11: its first
                ``masked_mean``), recorded by a call-through spy
is_correction   ``PolicyLoss`` with ``enable_vllm_is_correction``: vanilla_tis = "tis",
                icepop = "icepop"; ``weights`` is the forward's own ``vllm_is`` tensor,
                read from its frame on return (sentinel/adapters/frames.py)
loss_agg        ``aggregate_loss`` (0.11; inline in PolicyLoss before)
kl              ``compute_approx_kl`` (k1 / k2 / k3, clamped to +-10 since 0.7)
gae             ``get_advantages_and_returns`` of the experience maker
advantages      the experience maker's ``compute_advantages_and_returns`` (0.7 and later;
                inline in ``make_experience_list`` before, which needs generation and
                torch.distributed, hence unsupported), on an experience maker built
                without ``__init__`` (``object.__new__``) holding ``strategy.args``,
                ``args`` and a ``FixedKLController``; the KL it shapes the reward with is
                ``compute_approx_kl``'s, as ``make_experience`` computes it; the batch is
                handed over as the experiences ``split_rollout_samples`` makes
                (``rollout.micro_batch_size`` rows each, 1 by default, or dynamic
                batching's seqlen-balanced partition, which interleaves prompts:
                trainer options ``micro_rollout_batch_size`` / ``dynamic_batch_enable``)
reward_norm     the same call on one-token responses: group_norm (group mean and std),
                dr_grpo (group mean only), rloo (leave-one-out mean); a batch-level
                statistic is one group of the whole batch
==============  ============================================================================

Not in OpenRLHF (``OpenRLHFAdapter.declines``): ``opsm_mask``, ``cispo_loss``, ``gspo_kl``.

Conventions translated here
---------------------------
- OpenRLHF's response tensors are ``[B, A]`` padded like the canonical ones; the canonical
  ``loss_mask`` is its ``action_mask`` (bool, as ``Actor.generate`` builds it).
- Estimators: canonical gae (ppo) -> "gae", reinforce_plus_plus -> "reinforce",
  reinforce_plus_plus_baseline -> "reinforce_baseline", rloo -> "rloo", grpo -> "group_norm"
  (or "dr_grpo" when reward_norm keeps the group mean only). The scalar reward is placed at
  each row's last action token by ``compute_reward`` (OpenRLHF's own placement).
- Groups: OpenRLHF reshapes the rewards to ``(-1, n_samples_per_prompt)``: a prompt's samples
  are consecutive and every group has the same size. Canonical ``group`` ids are laid out so
  (rows reordered, outputs put back); unequal groups are unsupported. Without group ids the
  batch is one group (``config.group_size`` cuts consecutive groups).
- Whitening: OpenRLHF normalises the advantages of gae, reinforce and reinforce_baseline
  over the batch (``no_std_norm`` off). With canonical ``normalize_advantages: false`` the
  reported advantages are the estimator's own (``get_advantages_and_returns`` /
  ``get_cumulative_returns``, recorded by call-through wrappers on the maker); with
  ``true`` they are OpenRLHF's final, whitened ones; an estimator it does not whiten
  cannot honour ``true``.
- mask_no_eos_with_zero: ProRL's ``stop_properly_penalty_coef = 0`` on the rows marked
  ``truncated`` (a row with no padding in ``attention_mask`` ran to the length limit), where
  the Experience has that field.
- KL names: k1, k2, k3 as OpenRLHF's ``kl_estimator`` (low_var_kl -> k3, which it clamps);
  before ``kl_estimator`` existed only ``use_kl_estimator_k3`` (k1 or k3).

Import shims
------------
``openrlhf.models`` imports deepspeed, transformers, peft and flash_attn; the experience
maker imports ray, vllm and the launcher. None is called on these boundaries; each is stubbed
(``conventions.HEAVY_DEPS``) only when not installed. ``flash_attn.ops.triton.cross_entropy``
is made unimportable below the stub (``shims.block``) so ``log_probs_from_logits`` takes its
torch path.
"""

from .adapter import OpenRLHFAdapter

__all__ = ["OpenRLHFAdapter"]
