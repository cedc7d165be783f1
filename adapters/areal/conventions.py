"""AReaL's own names, as the adapter speaks them: the modules of its loss path (and where each
lived at a version), the heavy modules its import reaches but no boundary calls, and its KL and
normalisation-level names."""

from __future__ import annotations

# Heavy runtime dependencies that `import areal.trainer.ppo.actor` reaches at module level
# but that no boundary calls (found by importing 1.0.4 and git HEAD in an environment with
# only torch, RL-Sentinel's dependencies and the `areal` extra).
STUBS = [
    "ray", "transformers", "datasets", "torchdata", "hydra", "numba", "PIL",
    "wandb", "swanlab", "trackio", "tensorboardX", "torch_memory_saver",
    "aiohttp", "httpx", "aiofiles", "uvloop", "openai", "pybase64", "psutil",
    "flask", "werkzeug", "requests", "orjson",
]

ACTOR, DATA, FUNCTIONAL = "areal.trainer.ppo.actor", "areal.utils.data", "areal.utils.functional"
# The light third-party modules AReaL's import path needs for real: the `areal` extra
# (pyproject.toml); any other missing one is stubbed on the way (`shims.import_with_stubs`).
LIGHT = frozenset({"omegaconf", "colorlog", "einops", "tabulate", "lark", "tenacity"})
# where each module lives at a version, the first that exists wins (the PPO actor sat in
# areal/engine/ppo/ before areal/trainer/ppo/)
HOMES = {"areal.api.cli_args": ("areal.api.cli_args",), DATA: (DATA,), FUNCTIONAL: (FUNCTIONAL,),
          ACTOR: (ACTOR, "areal.engine.ppo.actor")}

PIP_HINT = "pip install 'rl-sentinel[areal]' && pip install --no-deps areal==1.0.4"

LEVELS = {"batch": "batch", "group": "group", None: None, "none": None}

# Branches of the mapped functions that no call from one CPU process can take, each with why
# (`sentinel hunt --coverage` lists them apart): "text of the branching line -> text of the line
# it jumps to" names one arc, a key without " -> " every arc of the line.
_RANKS = "taken only with a torch.distributed process group (all-reduce / all-gather over ranks): several processes"
_GUARD = "raises on a value the adapter never passes (it builds the argument from a valid canonical config and batch)"
_EXPORT = ("AReaL exports its stats through stats_tracker.export_all, which exports every key (no `key` argument) "
           "and resets (every caller keeps reset=True): the single-key export and reset=False have no caller")
STATS_EXPORT = "areal.utils.stats_tracker:DistributedStatsTracker.export"
UNREACHABLE = {
    f"{DATA}:Normalization": {
        "if dist.is_initialized() and all_reduce": _RANKS,
        "if any(sz <= 0 for sz in group_sizes) -> raise ValueError": _GUARD,
        "if sum(group_sizes) != bs -> raise ValueError": _GUARD,
    },
    f"{DATA}:KLEstimator": {
        'if kl_estimator not in ["k1", "k2", "k3"] -> raise ValueError': _GUARD,
    },
    f"{FUNCTIONAL}:ppo_actor_loss_fn": {'elif importance_sampling_level == "token" -> raise ValueError': _GUARD},
    f"{FUNCTIONAL}:cispo_loss_fn": {"if eps_clip_higher is None or eps_clip_higher <= 0 -> raise ValueError": _GUARD},
    f"{FUNCTIONAL}:gather_logprobs_entropy": {
        "if workspace is not None -> return _inplace_vocab_parallel_logprobs_entropy":
            "the in-place kernel takes CUDA fp32 logits and Triton; on CPU reusable_vocab_parallel_logits is None",
        "if tp_group is not None and dist.get_world_size(tp_group) > 1": _RANKS,
    },
    f"{ACTOR}:PPOActor._compute_advantages": {
        "if prox_logp_value is None -> raise ValueError": _GUARD,
        "if not math.isfinite(gae_lambda) -> raise ValueError": _GUARD,
    },
    STATS_EXPORT: {
        "if key is not None -> full_key = self._get_full_key(key)": _EXPORT,
        "if reset:": _EXPORT,
        "if full_key in self.": _EXPORT,
        "if reduce_group is not None": _RANKS,
        "if key_sync_group is not None": _RANKS,
        "for override_key, override_value in override_metadata.items()": _RANKS,
        "if (": _RANKS,  # the metadata check inside that loop (its condition spans the next lines)
    },
}
