"""Context parallelism on one process: every rank of a context-parallel group run in turn.

slime's loss reducer (get_sum_of_sample_mean) does no collective under context parallelism: it
only cuts each sample's loss mask to the tokens this rank holds, reading the rank and the group
size from ``megatron.core.mpu``. So one process can play each rank (`as_rank`, on the one-rank
shim), hand slime that rank's values (`zigzag_indices`) and add the ranks' partial results, the
sum Megatron's all-reduce over the context-parallel group makes (`cp_all_reduce`).

The layout is written here from Megatron's documented load-balanced rule, never taken from
slime's own offset function, so that slime's cutting is checked against an independent one.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import torch

from sentinel.adapters.composing import trainer_step


def zigzag_indices(total_length: int, response_length: int, cp_size: int, cp_rank: int) -> list[int]:
    """The response positions whose per-token values rank `cp_rank` of `cp_size` holds, in its order.

    Megatron's load-balanced context parallelism cuts the whole sequence (prompt and response,
    `total_length` tokens) into ``2 * cp_size`` chunks of ``ceil(total_length / (2 * cp_size))``
    tokens; rank r holds chunk r, then chunk ``2 * cp_size - 1 - r``. A token's log-prob comes
    from the logits one position earlier (next-token prediction): response token j (sequence
    position prompt + j) belongs to the rank that holds position prompt + j - 1."""
    chunk = -(-total_length // (2 * cp_size))
    first = total_length - response_length - 1  # the position whose logits predict response token 0
    out: list[int] = []
    for c in (cp_rank, 2 * cp_size - 1 - cp_rank):
        out += [pos - first for pos in range(c * chunk, (c + 1) * chunk) if first <= pos < total_length - 1]
    return out


@contextlib.contextmanager
def as_rank(cp_rank: int, cp_size: int) -> Iterator[None]:
    """The one-rank ``megatron.core.mpu`` shim answers context-parallel rank `cp_rank` of `cp_size`."""
    mpu = sys.modules["megatron.core.mpu"]
    if not getattr(mpu, "__sentinel_stub__", False):
        raise RuntimeError("context parallelism is simulated on RL-Sentinel's mpu shim only")
    saved = mpu.get_context_parallel_rank, mpu.get_context_parallel_world_size
    mpu.get_context_parallel_rank = lambda *a, **k: cp_rank
    mpu.get_context_parallel_world_size = lambda *a, **k: cp_size
    try:
        yield
    finally:
        mpu.get_context_parallel_rank, mpu.get_context_parallel_world_size = saved


@trainer_step("the all-reduce (sum) over the context-parallel group that follows slime's reducer on each rank "
              "(torch.distributed, outside slime): one process plays every rank in turn and adds their results")
def cp_all_reduce(partials: list[torch.Tensor]) -> torch.Tensor:
    total = partials[0]
    for p in partials[1:]:
        total = total + p
    return total
