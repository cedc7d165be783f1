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
