"""sentinel.adapters.ranks: several ranks as threads of one process, with real collectives.

A masked mean over the ranks (each rank's sum and count all-reduced, then divided) equals the
one-rank mean of the whole batch; the same function with its all-reduce planted away gives each
rank its own mean, and the comparison fails. A rank that skips a collective is a deadlock, raised.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from sentinel.adapters.ranks import RanksDeadlock, current, run_ranks

VALUES = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0, -2.0, 0.5, 7.0])
MASK = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1])


def masked_mean(values: torch.Tensor, mask: torch.Tensor, reduce: bool = True) -> torch.Tensor:
    stats = torch.stack([(values * mask).sum(), mask.sum().float()])
    if reduce:
        dist.all_reduce(stats)
    return stats[0] / stats[1]


def on_ranks(world: int, reduce: bool) -> list[float]:
    def rank_mean(rank):
        return float(masked_mean(VALUES.chunk(world)[rank.rank], MASK.chunk(world)[rank.rank], reduce))
    return run_ranks(world, rank_mean)


@pytest.mark.parametrize("world", [2, 4])
def test_a_mean_over_ranks_equals_the_one_rank_mean(world):
    whole = float((VALUES * MASK).sum() / MASK.sum())
    assert on_ranks(world, reduce=True) == pytest.approx([whole] * world)


def test_a_planted_missing_all_reduce_is_told_apart():
    whole = float((VALUES * MASK).sum() / MASK.sum())
    assert on_ranks(2, reduce=False) != pytest.approx([whole] * 2)


def test_each_rank_sees_its_own_rank_and_subgroups():
    groups = {"pairs": [[0, 1], [2, 3]], "stride": [[0, 2], [1, 3]]}

    def who(rank):
        t = torch.tensor([float(rank.rank)])
        dist.all_reduce(t, group=rank.group("pairs"))
        return rank.rank, rank.rank_in("stride"), rank.size_of("pairs"), float(t), current() is rank
    assert run_ranks(4, who, groups) == [(0, 0, 2, 1.0, True), (1, 0, 2, 1.0, True),
                                         (2, 1, 2, 5.0, True), (3, 1, 2, 5.0, True)]
    assert current() is None


def test_a_rank_that_skips_a_collective_is_a_deadlock():
    def skip(rank):
        if rank.rank == 1:
            return None
        dist.all_reduce(torch.ones(1))
    with pytest.raises(RanksDeadlock, match=r"ranks \[0\] wait"):
        run_ranks(2, skip)


def test_a_rank_error_reaches_the_caller_and_the_next_run_starts_clean():
    def fail(rank):
        if rank.rank == 0:
            raise ValueError("rank 0 failed")
        dist.all_reduce(torch.ones(1))
    with pytest.raises(ValueError, match="rank 0 failed"):
        run_ranks(2, fail)
    assert run_ranks(3, lambda rank: rank.world_size) == [3, 3, 3]


def test_an_exported_copy_of_the_megatron_shim_answers_one_rank():
    """The export writes the shim's getters as source into a standalone script; a simulated-rank
    getter (a closure) is written as what it answers on one process, never as its nested `def`
    (which made the exported validate.py a SyntaxError)."""
    from sentinel.export.select import _shim_source
    from sentinel_adapters.slime.megatron import _MpuShim
    src = _shim_source(_MpuShim())
    for kind, alone in (("context", 1), ("data", 1)):
        assert src[f"get_{kind}_parallel_world_size"] == f"lambda *a, **k: {alone}"
        assert src[f"get_{kind}_parallel_rank"] == "lambda *a, **k: 0"
        assert src[f"get_{kind}_parallel_group"] == "lambda *a, **k: None"
    for text in src.values():
        compile(f"x = {text}" if text.startswith(("lambda", "sys.")) else text, "<shim>", "exec")
