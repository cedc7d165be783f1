"""The target registry: every trainer RL-Sentinel can call, and how each is located.

One entry per target: its adapter (`module:Class`, imported only in the worker), how it is
found (an installed package and/or a checkout given with --repo), the pip extra with the
light packages its import path needs, and the environment variable that names a checkout
for `sentinel matrix` and the tests. The CLI's help and checks, `matrix`, the worker and
`sentinel list targets` all read this table; nothing else lists targets.

Third-party adapters register through the entry-point group `rl_sentinel.targets`
(name = target name, value = `module:Class`), the way pytest finds plugins:

    [project.entry-points."rl_sentinel.targets"]
    mytrainer = "mytrainer_sentinel.adapter:MyAdapter"

`--target module:Class` runs an adapter that is not registered at all.

Core code that must name a part of the bundled reference (the CLI's --plant check, export's
repository of a planted bug) finds it here, by module name (`plants`, `REFERENCE_OPS`), so
no core module imports a target package.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from .errors import TargetLoadError, UsageError

ENTRY_POINT_GROUP = "rl_sentinel.targets"
TARGETS_PACKAGE = "sentinel_adapters"  # the built-in targets (the folder adapters/)
REFERENCE_OPS = "sentinel_adapters.reference.ops"  # the reference's correct math
REFERENCE_PLANTS = "sentinel_adapters.reference.plants"  # its planted bugs, one record each (torch-free)


@dataclass(frozen=True)
class TargetInfo:
    name: str
    adapter: str  # "module:Class", imported in the worker
    description: str
    package: str | None = None  # an installed package the adapter uses when there is no --repo
    needs_repo: bool = False  # no package to fall back on: --repo is required
    extra: str | None = None  # `pip install 'rl-sentinel[EXTRA]'`: the light packages its import path needs
    repo_env: str | None = None  # environment variable naming a checkout (matrix, tests)
    install: str = ""  # what else to install (a package pip must take with --no-deps)
    # libraries (never the trainer's own modules) its import path spends seconds on: imported
    # once into the zygote (sentinel/zygote.py) and inherited by every worker it forks
    preload: tuple[str, ...] = ()

    @property
    def located_by(self) -> str:
        if self.needs_repo:
            return "--repo PATH (+ --commit REV)"
        if self.package:
            return f"installed `{self.package}` package, or --repo PATH (+ --commit REV)"
        return "bundled"


# what the Hugging Face trainers' import paths spend seconds on (each checked in sys.modules after
# the adapter's load; `python -X importtime`: ~2-3 s of a 3-4 s load, 2026-11-28)
HF_STACK = ("torch._dynamo", "torch.distributed.tensor", "transformers", "transformers.modeling_utils", "accelerate")

BUILTIN = (
    TargetInfo("reference", "sentinel_adapters.reference.adapter:ReferenceAdapter",
               "the correct math, written here and cited (adapters/reference/ops.py)"),
    TargetInfo("areal", "sentinel_adapters.areal:ArealAdapter", "areal-project/AReaL (PPOActor and its functional ops)",
               package="areal", extra="areal", repo_env="SENTINEL_AREAL_REPO",
               install="pip install --no-deps areal==1.0.4", preload=(*HF_STACK, "ray")),
    TargetInfo("verl", "sentinel_adapters.verl:VerlAdapter", "volcengine/verl (core_algos and the PPO trainer's helpers)",
               package="verl", extra="verl", repo_env="SENTINEL_VERL_REPO",
               install="pip install --no-deps verl==0.9.1", preload=(*HF_STACK, "transformers.processing_utils", "ray", "tensordict")),
    TargetInfo("openrlhf", "sentinel_adapters.openrlhf:OpenRLHFAdapter", "OpenRLHF/OpenRLHF (PolicyLoss and the experience maker's estimators)",
               package="openrlhf", extra="openrlhf", repo_env="SENTINEL_OPENRLHF_REPO", install="pip install --no-deps openrlhf==0.11.2",
               preload=(*HF_STACK, "transformers.processing_utils", "ray")),
    TargetInfo("trl", "sentinel_adapters.trl:TRLAdapter", "huggingface/trl (GRPOTrainer._compute_loss on a bare trainer)",
               package="trl", extra="trl", repo_env="SENTINEL_TRL_REPO", install="pip install --no-deps trl==1.16.0",
               preload=(*HF_STACK, "transformers.processing_utils")),
    TargetInfo("slime", "sentinel_adapters.slime:SlimeAdapter", "THUDM/slime (Megatron loss path, shimmed)",
               needs_repo=True, extra="slime", repo_env="SENTINEL_SLIME_REPO", preload=("torch._dynamo", "torch.distributed.tensor", "ray")),
)


@lru_cache(maxsize=1)
def registry() -> dict[str, TargetInfo]:
    """Built-in targets, then those registered through entry points (a built-in name wins)."""
    table = {t.name: t for t in BUILTIN}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        table.setdefault(ep.name, TargetInfo(ep.name, ep.value, f"registered by {ep.dist.name if ep.dist else '?'}",
                                             needs_repo=False))
    return table


def names() -> list[str]:
    return list(registry())


def get(name: str) -> TargetInfo:
    """The registered target `name`, or an ad-hoc one for `module:Class`."""
    table = registry()
    if name in table:
        return table[name]
    if ":" in name:
        return TargetInfo(name, name, "your own adapter (module:Class)")
    raise UsageError(f"unknown target {name!r} (known: {', '.join(table)}; or module:Class for your own adapter)")


def preload(name: str) -> tuple[str, ...]:
    """The libraries target `name` declares for the zygote to import (none when unknown)."""
    info = registry().get(name)
    return info.preload if info else ()


def adapter_spec(name: str) -> str:
    return get(name).adapter


def adapter_class(name: str) -> type:
    """Import the adapter class of target `name` (TargetLoadError naming the fix when it fails)."""
    try:
        spec = adapter_spec(name)
    except UsageError as e:
        raise TargetLoadError(str(e)) from None
    mod, cls = spec.split(":")
    if ":" in name and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` gives the worker: your adapter's folder
    try:
        return getattr(importlib.import_module(mod), cls)
    except (ImportError, AttributeError) as e:
        if ":" not in name:
            raise  # a built-in adapter's own import failure: its traceback says more
        raise TargetLoadError(
            f"cannot load the adapter {spec}: {e}. The worker imports {mod!r} as Python would from the "
            f"current folder: run sentinel from the folder that holds it, or put that folder on "
            f"PYTHONPATH (PYTHONPATH=path/to/folder sentinel run ...)") from None


def loss_path_files(name: str) -> tuple[str, ...]:
    """The files `sentinel history` watches for target `name`, as its adapter declares them
    (`Adapter.loss_path_files`; required of a trainer adapter, empty: every commit)."""
    return tuple(adapter_class(name).loss_path_files)


def plants() -> dict[str, Any]:
    """The reference's planted bugs: name -> record (description, trips, replaces, hunt, code)."""
    return importlib.import_module(REFERENCE_PLANTS).PLANTS


def module_file(module: str) -> Path | None:
    """Where `module` (a package: its folder) lies, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    origin = Path(spec.origin).resolve()
    return origin.parent if origin.name == "__init__.py" else origin
