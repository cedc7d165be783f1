"""slime's own names, as the adapter speaks them: the modules that hold its loss path, the
heavy dependencies they import, its estimator names and its ``args`` namespace (slime's
option names with slime's defaults)."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from sentinel.adapters.options import pin, recorded

PPO_UTILS = "slime.utils.ppo_utils"
CP_UTILS = "slime.backends.megatron_utils.cp_utils"
LOSS = "slime.backends.megatron_utils.loss"
ROLLOUT = "slime.ray.rollout"
EXTRA = "slime"  # pip install 'rl-sentinel[slime]': the light packages slime's import path needs (pyproject.toml)
BOUNDARY_MODULES = (PPO_UTILS, CP_UTILS, LOSS)
# Where each loss-path module lives, the first that exists at a commit wins (slime kept its
# loss and cp_utils in slime/backends/training_utils/ for a while in 2026).
MODULE_HOMES = {PPO_UTILS: (PPO_UTILS,), CP_UTILS: (CP_UTILS, "slime.backends.training_utils.cp_utils"),
                LOSS: (LOSS, "slime.backends.training_utils.loss")}
# Packages entered without executing their __init__ (see the module docstring), where they exist.
BARE_PACKAGES = ("slime.backends.megatron_utils", "slime.backends.training_utils")

# The light third-party modules slime's import path needs for real: the `slime` extra
# (pyproject.toml). Any other missing third-party module (megatron beyond the one-rank shim,
# ray, sglang, wandb, transformers, ...) is a heavy dependency no boundary calls: stubbed.
LIGHT = frozenset({"urllib3"})

# Canonical estimator name -> slime --advantage-estimator (slime names pass through).
ESTIMATORS = {
    "gae": "ppo", "ppo": "ppo",
    "grpo": "grpo", "gspo": "gspo", "cispo": "cispo",
    "reinforce_plus_plus": "reinforce_plus_plus",
    "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
}
# Estimators whose rewards slime group-normalises in RolloutManager._post_process_rewards.
GROUP_NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_NORMALISED = ("grpo", "gspo", "cispo")

# slime's argparse defaults (slime/utils/arguments.py) for every option the loss path reads.
ARG_DEFAULTS: dict[str, Any] = dict(
    advantage_estimator="grpo", kl_coef=0.0, kl_loss_type="k1", gamma=1.0, lambd=1.0,
    normalize_advantages=False, use_rollout_logprobs=False, custom_advantage_function_path=None,
    use_opd=False, opd_type=None, opd_kl_coef=1.0, qkv_format="thd",
    eps_clip=0.2, eps_clip_high=None, eps_clip_c=None,
    use_tis=False, tis_clip=2.0, tis_clip_low=0.0, custom_tis_function_path=None, get_mismatch_metrics=False,
    use_opsm=False, opsm_delta=1e-4, calculate_per_token_loss=False, entropy_coef=0.0,
    use_kl_loss=False, kl_loss_coef=0.0, use_unbiased_kl=False, custom_pg_loss_reducer_function_path=None,
    allgather_cp=False, context_parallel_size=1,
    rewards_normalization=True, grpo_std_normalization=True, n_samples_per_prompt=1, rollout_batch_size=1,
    reward_key=None,
    # read by loss_function / policy_loss_function / get_log_probs_and_entropy
    loss_type="policy_loss", custom_loss_function_path=None, recompute_loss_function=False,
    log_probs_chunk_size=-1, rollout_temperature=1.0, rollout_top_p=1.0,
)
LOSS_AGG = ("token-mean", "seq-mean-token-mean")


class _Args(Namespace):
    """slime's ``args``; reading an option nobody set names it (a newer slime reads more)."""

    def __getattr__(self, name: str) -> Any:  # only reached for unset attributes
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"slime read args.{name}, which the RL-Sentinel slime adapter does not set "
            f"(an option this slime version added: extend ARG_DEFAULTS in adapters/slime/conventions.py)")


def slime_args(**overrides: Any) -> _Args:
    """slime's ``args`` with `overrides`; while a call is observed, a recording copy (the
    options slime's own code reads: sentinel.adapters.options)."""
    return recorded(_Args(**{**ARG_DEFAULTS, **overrides}), instance=True)



# Trainer options the hunt draws (sentinel.adapters.options: `trainer:<name>`, slime's default
# first) on the boundaries whose loss goes through loss_function -> policy_loss_function: the
# entropy bonus, the KL loss (coefficient, estimator, unbiased form; the behaviour policy stands
# in for the reference model), the rollout log-probs as the old policy, OPSM on the policy
# loss, chunked log-probs and the recomputed (checkpointed) loss function.
LOSS_OPTIONS: dict[str, tuple[Any, ...]] = {
    "trainer:entropy_coef": (0.0, 0.01),
    "trainer:use_kl_loss": (False, True),
    "trainer:kl_loss_coef": (0.0, 0.1),
    "trainer:kl_loss_type": ("k1", "k2", "k3", "low_var_kl"),
    "trainer:use_unbiased_kl": (False, True),
    "trainer:use_rollout_logprobs": (False, True),
    "trainer:use_opsm": (False, True),
    "trainer:opsm_delta": (1e-4, 0.05),  # read under use_opsm (the opsm_mask boundary draws its own)
    "trainer:log_probs_chunk_size": (-1, 1),
    "trainer:recompute_loss_function": (False, True),
}
_NOT_UNDER_TIS = ("trainer:use_rollout_logprobs",)  # validate_args: not with use_tis
# On the advantages boundary: on-policy distillation's reverse-KL penalty on the advantages, with
# the reference log-probs standing in for the teacher's (opd_type sglang: they come with the batch),
# and --disable-rewards-normalization (the group estimators then train on the raw rewards).
ADVANTAGE_OPTIONS: dict[str, tuple[Any, ...]] = {
    "trainer:use_opd": (False, True),
    "trainer:opd_kl_coef": (1.0, 0.5),  # read under use_opd
    "trainer:rewards_normalization": (True, False),  # read by the group-normalised estimators
    # the ranks compute_advantages_and_returns runs on at once (adapters/slime/parallel.py): its
    # whitening all-reduces over DP with CP, GAE all-gathers each sequence's CP chunks
    "trainer:context_parallel_size": (1, 2, 4),
    "trainer:data_parallel_size": (1, 2),
    # the prompt before each response: under CP it moves the response across the chunks (the
    # whitening's mask offsets; a rank may hold only prompt tokens of a sample)
    "trainer:prompt_length": (1, 5),
}
# the per-token lists of the advantages batch each context-parallel rank holds only its share of
ADVANTAGE_PER_TOKEN = ("log_probs", "ref_log_probs", "values", "teacher_log_probs")
# slime's actor (train_actor) leaves the batch without old log-probs when the loss pass can reuse its
# own (`can_reuse_log_probs_in_loss`: one micro-batch, on-policy, no rollout log-probs, not gspo):
# policy_loss_function then takes the current log-probs, detached, as the old policy's. Not an args
# option: the adapter hands the loss entry that batch (EntryLoss._entry_loss) and the per-token loss
# the same old policy.
REUSE = "trainer:can_reuse_log_probs_in_loss"
# The context-parallel size the loss reducer runs under (adapters/slime/context_parallel.py: each
# rank played in turn on one process), and the prompt length before each response, which under
# context parallelism moves where the response falls in the ranks' chunks (a prompt chunk holds no
# response token). Neither is an args option slime's reducer reads: it asks megatron.core.mpu, and
# takes the prompt from total_lengths - response_lengths.
CP_SIZE, PROMPT_LENGTH, DP_SIZE = "context_parallel_size", "prompt_length", "data_parallel_size"
# Where a response ends. slime's per-sample lists hold each response's own tokens, no padding, and a
# response may end in masked tokens (a multi-turn sample's last tool output) or in the last valid
# one. "response": a row's masked tail is masked response tokens (the whole row, response_lengths =
# T); "padding": the row is cut after its last valid position (ragged response_lengths; a row with no
# valid position stays whole). Not an args option: the batch's layout, read by the adapter only.
MASKED_TAIL = "trainer:masked_tail"
# The micro-batches of a training step (metrics): the step's rows split into that many, in order, each
# one loss_function call, whose logging dicts reduce_train_step_metrics sums and divides once. Not an
# args option: the actor's data iterator (num_microbatches), read by the adapter only.
MICRO_BATCHES = "trainer:num_microbatches"
_TAIL = {MASKED_TAIL: ("response", "padding")}
OPTION_DOMAINS = {
    # get_log_probs_and_entropy's with_entropy: True in the loss pass (policy_loss_function), False in
    # the actor's forward-only log-prob pass without --use-rollout-entropy (model.forward_only)
    "logprobs": {"trainer:with_entropy": (True, False),
                 # the rollout's top-p: its nucleus replayed on the log-probs (Surfaces._nucleus)
                 "trainer:rollout_top_p": (1.0, 0.9, 0.5)},
    "advantages": {**ADVANTAGE_OPTIONS, **_TAIL},
    "loss_agg": {f"trainer:{CP_SIZE}": (1, 2, 4), f"trainer:{PROMPT_LENGTH}": (1, 5), **_TAIL},
    "policy_loss": {**LOSS_OPTIONS, REUSE: (False, True), **_TAIL},
    "cispo_loss": {**LOSS_OPTIONS, **_TAIL},
    # REUSE: slime's actor reuses the loss pass's log-probs under TIS too (can_reuse_log_probs_in_loss reads
    # get_mismatch_metrics, not use_tis): the hook then weighs the current log-probs, detached
    "is_correction": {**{k: v for k, v in LOSS_OPTIONS.items() if k not in _NOT_UNDER_TIS}, REUSE: (False, True),
                      **_TAIL},
    "opsm_mask": {**{k: v for k, v in LOSS_OPTIONS.items() if k not in ("trainer:use_opsm", "trainer:opsm_delta")},
                  **_TAIL},
    "gae": _TAIL, "kl": _TAIL, "gspo_kl": _TAIL,
    "metrics": {MICRO_BATCHES: (1, 2, 3)},
}
_LOSSES = ("policy_loss", "cispo_loss", "is_correction", "opsm_mask")
_ONE_RANK = "the adapter runs one rank (context parallelism needs several processes)"
PINNED = (
    *(p for b in (*_LOSSES, "logprobs", "values", "metrics") for p in pin(b, "allgather_cp", reason=_ONE_RANK)),
    *(p for b in (*_LOSSES, "metrics") for p in pin(b, "loss_type", reason="the loss boundaries are slime's policy loss "
                                      "(loss_type policy_loss; value_loss and sft_loss map no boundary)")),
    *(p for b in (*_LOSSES, "metrics") for p in pin(b, "custom_pg_loss_reducer_function_path", reason="a user's plug-in "
                                      "(a module path); slime ships no other reducer")),
    *(p for b in (*_LOSSES, "metrics") for p in pin(b, "rollout_temperature", "rollout_top_p", reason="the stand-in logits "
                                      "reproduce the drawn log-probs at temperature 1 over two classes: temperature "
                                      "and top-p need a model's logits (the logprobs boundary draws top-p on drawn logits)")),
    *(p for b in (*_LOSSES, "metrics") for p in pin(b, "get_mismatch_metrics", reason="slime's validate_args requires a user's "
                                      "custom_tis_function_path with it (slime's own hook would reweight the loss)")),
    *pin("is_correction", "use_rollout_logprobs", reason="slime's validate_args refuses it with use_tis (on here)"),
    *(p for b in ("policy_loss", "cispo_loss", "opsm_mask")
      for p in pin(b, "use_tis", reason="the TIS hook is the is_correction boundary (use_tis on there)")),
    *pin("opsm_mask", "use_opsm", reason="the opsm_mask boundary is OPSM switched on (policy_loss draws it off and on)"),
    *pin("opsm_mask", "calculate_per_token_loss", reason="the opsm_mask boundary's reduced loss is token-mean"),
    *pin("opsm_mask", "advantage_estimator", "eps_clip_c", reason="the opsm_mask boundary's loss is the plain PPO "
         "clip (policy_loss draws gspo and eps_clip_c)"),
    *pin("reward_norm", "rewards_normalization", reason="the reward_norm boundary is the normalisation switched on "
         "(--disable-rewards-normalization makes it the identity)"),
    *pin("reward_norm", "advantage_estimator", reason="set from the canonical std_level: grpo divides by the group "
         "std, reinforce_plus_plus_baseline only centres (the advantages boundary draws the estimators)"),
    *pin("logprobs", "entropy_coef", "log_probs_chunk_size", reason="the loss boundaries draw them (LOSS_OPTIONS) "
         "through the same get_log_probs_and_entropy, inside loss_function"),
    *pin("metrics", "use_kl_loss", "kl_loss_type", reason="set by the input: a ref_log_probs input switches the KL "
         "loss on, with the canonical kl_type"),
    *pin("metrics", *(k.partition(":")[2] for k in LOSS_OPTIONS if k not in ("trainer:use_kl_loss", "trainer:kl_loss_type")),
         "use_tis", "advantage_estimator",
         reason="the metrics boundary is reduce_train_step_metrics over what loss_function logs at slime's defaults "
                "(use_kl_loss set by a ref_log_probs input); the loss boundaries draw these options through the same "
                "loss_function and compare its logged metrics (returned:logged.*)"),
    *pin("reward_norm", "reward_key", reason="each canonical reward is one float per sample (reward_key picks a field "
         "of a dict reward)"),
    *pin("is_correction", "use_tis", reason="the is_correction boundary is the TIS hook switched on"),
    *pin("is_correction", "advantage_estimator", "eps_clip_c", reason="the is_correction boundary's loss is the "
         "plain PPO clip (policy_loss draws gspo and eps_clip_c; cispo_loss is cispo)"),
    *pin("cispo_loss", "advantage_estimator", reason="the cispo_loss boundary is slime's cispo estimator"),
    *pin("advantages", "custom_advantage_function_path", reason="a user's plug-in (a module path); slime ships none"),
    *pin("advantages", "use_rollout_logprobs", reason="the advantages boundary has no rollout log-probs input (its KL "
                                                      "in reward is on log_probs)"),
    *pin("advantages", "grpo_std_normalization", "n_samples_per_prompt", "rollout_batch_size",
         "reward_key", reason="set from the canonical groups and estimator for RolloutManager._post_process_rewards "
                              "(the reward_norm boundary draws them)"),
)

# Branches of mapped functions no call from one CPU process can take (hunt --coverage lists them
# apart). Each key names one arc ("CONDITION -> DESTINATION", texts of the two lines) or, without an
# arrow, the missing arcs of a line that only runs on such a branch.
_CP = "context parallelism: a rank of several (mpu's context-parallel world size > 1 needs several processes)"
_PP = "pipeline parallelism: a stage before the last (several processes)"
_LOSS_TYPE = ("loss_type value_loss, sft_loss or a user's custom_loss: other losses than the policy loss the loss "
              "boundaries map (no canonical boundary takes a critic, SFT or plug-in loss; loss_type is pinned)")
_GUARD = "raises on an estimator name the adapter never passes (it maps the canonical kl_type to slime's names)"
# (not the reward post-process hook: slime ships post-processors for it, e.g. on_policy_distillation's and
# rollout/_fanout_test_helpers' group normaliser, so that branch stays reachable, uncovered until one is drawn)
_PLUGIN = "a user's plug-in (a module path slime imports; slime ships none), pinned at None"
UNREACHABLE = {
    f"{LOSS}:compute_advantages_and_returns": {
        "if not mpu.is_pipeline_last_stage() -> return": _PP,
        "if args.custom_advantage_function_path is not None -> custom_adv_fn": _PLUGIN,
        'elif args.advantage_estimator == "reinforce_plus_plus_baseline" -> raise NotImplementedError':
            "raises on an estimator name the adapter never passes (ESTIMATORS maps the canonical ones to slime's)"},
    f"{LOSS}:get_log_probs_and_entropy": {"if args.allgather_cp": _CP},
    f"{LOSS}:get_values": {"if args.allgather_cp": _CP},
    f"{LOSS}:loss_function": {'case "policy_loss" -> case "value_loss"': _LOSS_TYPE, 'case "value_loss"': _LOSS_TYPE,
                              'case "sft_loss"': _LOSS_TYPE, 'case "custom_loss"': _LOSS_TYPE,
                              "if args.allgather_cp and mpu.get_context_parallel_world_size() > 1": _CP},
    f"{LOSS}:policy_loss_function": {"if log_probs.numel() == 0": "a micro-batch with no response token: every "
                                     "canonical row holds at least one",
                                     'if getattr(args, "custom_pg_loss_reducer_function_path", None) is not None '
                                     '-> custom_pg_loss_reducer_func': _PLUGIN},
    f"{PPO_UTILS}:compute_approx_kl": {'elif kl_loss_type in ["k3", "low_var_kl"] -> raise': _GUARD},
    f"{PPO_UTILS}:get_advantages_and_returns_batch": {
        "if not chunked -> full_advantages, full_returns = vanilla_gae": "slime's one caller "
        "(compute_advantages_and_returns) leaves chunked at its default, True: the trainer never runs vanilla_gae"},
}
