"""A one-rank Megatron for slime's loss path, and packages entered without their ``__init__``.

slime's loss-path modules import ``megatron.core.mpu`` (context / tensor parallel groups) and,
before 2026-06-29, Megatron's fused vocab-parallel cross-entropy. On one process with no
initialised process groups, a functional stand-in answers for both (`install_megatron_shim`).
Packages such as ``slime.backends.megatron_utils`` are entered without running their
``__init__`` (which wires the Ray actor, the Megatron model and checkpoint code):
`sentinel.adapters.loading.bare_package`.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch

from sentinel.adapters.ranks import current as current_rank
from sentinel.adapters.shims import install_stubs


class _MpuShim(types.ModuleType):
    """``megatron.core.mpu`` for one process: one rank, or, inside `sentinel.adapters.ranks.run_ranks`
    with `megatron_groups`, the rank that thread plays (its context- and data-parallel rank, size and
    group). No tensor, pipeline or expert parallelism.

    Outside simulated ranks the group getters answer None, which torch.distributed reads as the
    default (world) group. Anything else fails with a message that names it.
    """

    def __init__(self) -> None:
        super().__init__("megatron.core.mpu", "RL-Sentinel shim: one rank, or a simulated rank's CP and DP groups")
        def const(value):
            return lambda *a, **k: value

        one, zero, none, yes = const(1), const(0), const(None), const(True)
        for kind in ("tensor_model", "pipeline_model", "expert_model", "expert_tensor"):
            setattr(self, f"get_{kind}_parallel_world_size", one)
            setattr(self, f"get_{kind}_parallel_rank", zero)
            setattr(self, f"get_{kind}_parallel_group", none)
        for kind in ("context", "data"):
            setattr(self, f"get_{kind}_parallel_world_size", _ask(kind, lambda r, g: r.size_of(g), 1))
            setattr(self, f"get_{kind}_parallel_rank", _ask(kind, lambda r, g: r.rank_in(g), 0))
            setattr(self, f"get_{kind}_parallel_group", _ask(kind, lambda r, g: r.group(g), None))
        self.is_pipeline_last_stage = yes
        self.is_pipeline_first_stage = yes
        self.model_parallel_is_initialized = yes
        self.__sentinel_stub__ = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"megatron.core.mpu.{name} is not provided by RL-Sentinel's one-rank shim")


def _ask(kind: str, read, alone):
    """An mpu getter for `kind` ("context" or "data"): the simulated rank's answer (Megatron's
    ``with_context_parallel=True`` asks for the data-parallel group that includes the CP ranks),
    `alone` on one rank."""
    def getter(*args: Any, with_context_parallel: bool = False, **kwargs: Any) -> Any:
        rank = current_rank()
        if rank is None:
            return alone
        return read(rank, "data_with_context" if kind == "data" and with_context_parallel else kind)
    getter.standalone = alone  # what an exported, one-process copy of the shim answers (sentinel.export)
    return getter


def megatron_groups(data_parallel: int, context_parallel: int) -> dict[str, list[list[int]]]:
    """Megatron's groups for DP x CP ranks (TP = PP = 1; order tp-cp-dp: global rank
    ``d * context_parallel + c``): a CP group holds consecutive ranks, a DP group the ranks with one
    CP rank, the DP-with-CP group all of them."""
    def at(d: int, c: int) -> int:
        return d * context_parallel + c

    return {"context": [[at(d, c) for c in range(context_parallel)] for d in range(data_parallel)],
            "data": [[at(d, c) for d in range(data_parallel)] for c in range(context_parallel)],
            "data_with_context": [list(range(data_parallel * context_parallel))]}


def one_rank_cross_entropy(vocab_parallel_logits: torch.Tensor, target: torch.Tensor, tp_group=None) -> torch.Tensor:
    """Megatron's fused_vocab_parallel_cross_entropy with one tensor-parallel rank: the plain
    per-token cross-entropy, shape [s, b] (slime before 2026-06-29 took log-probs from it)."""
    s, b, v = vocab_parallel_logits.shape
    return torch.nn.functional.cross_entropy(vocab_parallel_logits.reshape(s * b, v).float(), target.reshape(-1),
                                             reduction="none").reshape(s, b)


def install_megatron_shim() -> list[str]:
    """A functional ``megatron.core.mpu`` (CP world size 1) and, for slime before 2026-06-29,
    ``megatron.core.fusions.fused_cross_entropy`` (one-rank cross-entropy); installed even
    when Megatron is: the real ones need initialised process groups and kernels. Every other
    Megatron module is a permissive stub (`shims`): only import time may touch it."""
    def package(name: str) -> types.ModuleType:
        m = types.ModuleType(name, "RL-Sentinel shim")
        m.__path__ = []  # a package, so its shimmed submodules import
        return m

    megatron, core, fusions = package("megatron"), package("megatron.core"), package("megatron.core.fusions")
    fused_ce = types.ModuleType("megatron.core.fusions.fused_cross_entropy", "RL-Sentinel shim: one rank")
    fused_ce.fused_vocab_parallel_cross_entropy = one_rank_cross_entropy
    mpu = _MpuShim()
    core.mpu, megatron.core, core.fusions, fusions.fused_cross_entropy = mpu, core, fusions, fused_ce
    mods = {m.__name__: m for m in (megatron, core, mpu, fusions, fused_ce)}
    for m in mods.values():
        m.__sentinel_stub__ = True
    sys.modules.update(mods)
    # any other Megatron module an older slime imports at module level (megatron.training's
    # tokenizer helpers, ...) is a permissive stub; one a boundary calls fails loudly
    install_stubs(["megatron"])
    return list(mods)
