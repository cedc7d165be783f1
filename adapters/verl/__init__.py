"""verl adapter: calls volcengine/verl's real loss-path code at the canonical boundaries.

Target: https://github.com/volcengine/verl (``verl`` on PyPI), either the installed package
(``root=None``) or a checkout (``root`` = the folder that holds ``verl/``).

What each boundary reaches (module ``verl.trainer.ppo.core_algos`` unless named):

==============  ============================================================================
advantages      ``ray_trainer.apply_kl_penalty`` (KL in reward, when kl_coef != 0) then
                ``ray_trainer.compute_advantage`` (the trainer's estimator dispatch), which
                calls the registered estimator (``get_adv_estimator_fn``: gae, grpo,
                grpo_vectorized, rloo, rloo_vectorized, reinforce_plus_plus,
                reinforce_plus_plus_baseline, opo, gpg, grpo_passk, ...). Without the
                trainer module (options.trainer_module=False, or its import failed) the
                estimator is called from the registry and the KL shaping is composed from
                ``kl_penalty`` as apply_kl_penalty does (facts say which path ran). Trainer
                option response_mask_in_batch=False: a batch without response_mask, which
                compute_advantage derives itself (``compute_response_mask``). Trainer option
                pf_ppo: PF-PPO's resampling of the returned batch after GAE
                (``compute_pf_ppo_reweight_data``, one seed), observed with that batch
gae             ``compute_gae_advantage_return``
reward_norm     ``compute_grpo_outcome_advantage`` on one-token responses (verl's only
                reward normalisation is the GRPO estimator's group normalisation);
                mean_leave1out: ``compute_rloo_outcome_advantage``. A row with mask 0 is
                a response whose ``response_mask`` is all zero (what rollout rejection
                sampling leaves) with its reward still in ``token_level_rewards``
policy_loss     ``get_policy_loss_fn("vanilla")``, ``"gspo"`` for
                importance_sampling_level=sequence (options.policy_loss_mode picks any
                registered loss); before "vanilla" was registered: ``compute_policy_loss``. use_decoupled_loss:
                verl's decoupled rollout correction (``rejection_sampling`` holds verl's
                own rollout_correction keys: rollout_is, rollout_is_threshold, rollout_rs,
                ...): weights pi_old / pi_rollout from ``compute_rollout_correction_weights``,
                rejection mask from ``compute_rollout_rejection_mask``. Trainer option
                bypass_mode: ``compute_policy_loss_bypass_mode`` (trainer option loss_type:
                ppo_clip or reinforce), its config written by the trainer's own
                ``apply_bypass_mode``. Trainer option rollout_correction (here and on
                cispo_loss): a preset of those keys, applied as the trainer's decoupled mode
                wherever the batch holds rollout_log_probs (in bypass mode, inside its loss)
cispo_loss      ``get_policy_loss_fn("cispo")``
is_correction   ``rollout_corr_helper.compute_rollout_correction_weights`` (token TIS;
                IcePop via a ``"low_upper"`` threshold) and the vanilla policy loss with
                ``rollout_is_weights`` (decoupled mode); off_policy_is =
                bypass mode's REINFORCE loss ``compute_policy_loss_reinforce``
loss_agg        ``agg_loss``
kl              ``kl_penalty``
actor_logprobs  ``workers.actor.dp_actor.DataParallelPPOActor._forward_micro_batch`` on a
                bare actor with a stand-in model, padded or packed (``use_remove_padding``);
                with micro_batch_size / use_dynamic_bsz, ``compute_log_prob`` on a real
                DataProto (tensordict, the ``verl`` extra; without it an error naming it);
                trainer options drawn: its fused kernels, Ulysses ranks (``ulysses``), and a
                Qwen2-VL's 3-D mrope position ids on a text-only batch (``vlm``)
==============  ============================================================================

Not in verl (``VerlAdapter.declines``): ``opsm_mask``; ``gspo_kl`` (verl computes the GSPO
sequence log-ratio inside ``compute_policy_loss_gspo`` and exposes only the aggregated loss).

Modules: ``adapter`` (`VerlAdapter`: loading and the boundaries, each marked with the verl
functions it calls), ``losses`` (verl's policy losses as its actor calls them),
``conventions`` (verl's module names, KL and estimator names, DataProto-shaped stand-ins).

Conventions translated here
---------------------------
- verl's response tensors are ``[B, T]`` padded like the canonical ones; the canonical
  ``loss_mask`` is verl's ``response_mask`` (int64 for advantages, as the trainer slices it
  from ``attention_mask``; bool for the policy losses, as ``workers/utils/losses.ppo_loss``
  casts it). ``attention_mask`` is not used.
- The scalar reward is placed at the last ``loss_mask`` token of its row, which is where
  verl's reward managers put it (``reward_tensor[i, valid_response_length - 1]``); the
  reward managers themselves need a tokenizer and are not called.
- Estimator names: verl's registry names (``grpo_vectorized``, ``rloo``, ...) are accepted
  as canonical estimator values; options.vectorized maps grpo / rloo to their vectorised
  forms. Estimators that need inputs no boundary carries (remax, optimal_token_baseline,
  gdpo) are unsupported.
- Groups: the canonical ``group`` ids become verl's ``uid`` array (deterministic UUID
  strings, dtype object, as the trainer builds it); without ``group``, ``config.group_size``
  cuts consecutive groups, else the batch is one group.
- KL estimator names: canonical k1 -> verl "kl" (log p - log p_ref), k2 -> "mse"
  (0.5 * diff^2), k3 and low_var_kl -> "low_var_kl" (exp(ref - logp) - (ref - logp) - 1,
  clamped to [-10, 10]); verl names ("abs", "k3+", ...) pass through.
- Clipping: eps_clip -> ``clip_ratio`` and ``clip_ratio_low``, eps_clip_high ->
  ``clip_ratio_high``, eps_clip_c -> ``clip_ratio_c``. verl always applies the dual clip
  (default c = 3); canonical ``eps_clip_c: null`` (no dual clip) is passed as
  ``clip_ratio_c = inf``, under which verl's dual-clip branch is the identity.
- Policy configs are built through verl's own ``ActorConfig`` / ``PolicyLossConfig`` /
  ``AlgoConfig`` dataclasses, with only the fields that exist at that version.
- Loss normalisation: one micro-batch on one rank. Where verl's actor fills
  ``config.global_batch_info`` (the engine's ``ppo_loss``, 2025-11-24 and later) the
  adapter fills it the same way: dp_size 1, batch_num_tokens = valid tokens,
  global_batch_size = B (the mini-batch's row count, fully masked rows included); older
  actors leave it empty and ``agg_loss`` uses its local defaults. options.batch_info
  ("engine" | "local") overrides; facts["batch_info"] says which. The hunt draws both per call
  (trainer option use_legacy_worker_impl: "enable" is the legacy dp_actor, which leaves it
  empty at every version; "disable" the engine worker's ppo_loss, in workers/roles/utils until
  2025-11-29: it fills it since 2025-11-24, and before that hands agg_loss a bool mask and its
  local counts; where no ppo_loss exists, "disable" is `unsupported`).
- verl's outputs carry no per-token ``pg_loss`` or ``clipfrac``: the token loss is the
  ``loss_mat`` the policy loss hands to ``agg_loss`` (recorded by a call-through spy);
  ``clipfrac`` (verl logs only its masked mean) is not reported.
- Whitening: verl's gae, reinforce_plus_plus, reinforce_plus_plus_baseline (and gdpo)
  estimators always whiten the advantages over the batch (``verl_F.masked_whiten``); the
  ``advantages`` boundary reports what the trainer returns, whitened, whatever
  ``normalize_advantages`` says (verl has no switch to turn it off). Estimators that never
  whiten (grpo, rloo, ...) cannot honour ``normalize_advantages: true`` (unsupported). The
  ``gae`` boundary is the GAE recursion alone: there ``advantages`` is the tensor
  ``compute_gae_advantage_return`` hands its closing ``masked_whiten`` (a call-through spy).

Import shims
------------
``import verl`` pulls in ray, tensordict, transformers, ... through ``verl/__init__``
(``verl.protocol``) and ``verl.workers.config``; the trainer module adds torchdata,
datasets, pandas, peft, fastapi and more. No boundary calls them: each is stubbed
(``shims.import_with_stubs``) only when it is not installed. The ``verl`` extra
(``pip install 'rl-sentinel[verl]'``, pyproject.toml) lists the light packages imported for real. ``import verl`` also calls ``logging.basicConfig`` and
loads ``verl.plugins`` entry points; the adapter restores the root logger afterwards and
sets VERL_USE_EXTERNAL_PLUGINS=none during the import (unless already set).
"""

from .adapter import VerlAdapter

__all__ = ["VerlAdapter"]
