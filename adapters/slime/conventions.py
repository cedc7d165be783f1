"""slime's own names, as the adapter speaks them: the modules that hold its loss path, the
heavy dependencies they import, its estimator names and its ``args`` namespace (slime's
option names with slime's defaults)."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

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
    use_opd=False, opd_type=None, opd_kl_coef=0.0, qkv_format="thd",
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
    return _Args(**{**ARG_DEFAULTS, **overrides})

