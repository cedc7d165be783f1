"""One slime batch on data- x context-parallel ranks run at once (`sentinel.adapters.ranks`).

slime's advantage path runs collectives in the middle of its computation: under context
parallelism GAE all-gathers each sequence's chunks (all_gather_with_cp), and normalize_advantages
whitens with statistics all-reduced over the data-parallel group with its context-parallel ranks.
So the ranks run concurrently, each a thread whose Megatron shim answers its own CP / DP rank
(`megatron_groups`), and each gets its share of the one drawn batch:

- data parallelism: the samples dealt round-robin (rank d holds samples d, d + dp, ...);
- context parallelism: of each sample, the per-token values of the response positions its
  zigzag chunks predict (`context_parallel.zigzag_indices`, the adapter's own layout, never
  slime's offset function); per-sample values (rewards, lengths, the loss mask) whole.

`put_back` scatters what each rank left in its batch into whole per-sample tensors, so the result
compares with the one-rank result position by position.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from sentinel.adapters.ranks import Rank, run_ranks

from .context_parallel import zigzag_indices
from .megatron import megatron_groups

PER_SAMPLE = ("rewards", "response_lengths", "total_lengths")  # one value per sample, on every CP rank


def share(rank: int, dp: int, cp: int, lengths: list[int], totals: list[int]) -> list[tuple[int, torch.Tensor]]:
    """(sample, its response positions held) for each sample global rank `rank` holds (rank = d * cp + c)."""
    d, c = divmod(rank, cp)
    return [(i, torch.as_tensor(zigzag_indices(totals[i], lengths[i], cp, c), dtype=torch.long))
            for i in range(d, len(lengths), dp)]


def local_batch(batch: dict[str, Any], held: list[tuple[int, torch.Tensor]], per_token: tuple[str, ...]) -> dict[str, Any]:
    """This rank's batch: per-token lists cut to the held positions, per-sample lists whole for the
    held samples, loss masks whole (slime cuts them itself under CP) and cloned (each rank its own)."""
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if value is None:
            out[key] = None
        elif key in per_token:
            out[key] = [value[i][idx.to(value[i].device)] for i, idx in held]
        elif key == "loss_masks":
            out[key] = [value[i].clone() for i, _ in held]
        elif key in PER_SAMPLE:
            out[key] = [value[i] for i, _ in held]
        else:
            out[key] = value
    return out


def put_back(batch: dict[str, Any], locals_: list[dict[str, Any]], holds: list[list[tuple[int, torch.Tensor]]],
             per_token: tuple[str, ...]) -> dict[str, Any]:
    """The whole batch after the ranks ran: every per-token list a rank's batch holds (inputs it
    may have changed in place, outputs such as advantages / returns / kl) scattered back to whole
    per-sample tensors; an input key is written back into the caller's own tensors (in-place
    changes show as on one rank)."""
    whole = dict(batch)
    for key in locals_[0]:
        lists = [loc.get(key) for loc in locals_]
        if key in PER_SAMPLE or key == "loss_masks" or not all(_per_token(v, held) for v, held in zip(lists, holds)):
            continue
        whole[key] = scatter(lists, holds, batch["response_lengths"], batch[key] if key in per_token else None)
    return whole


def scatter(lists: list[list[torch.Tensor]], holds: list[list[tuple[int, torch.Tensor]]], lengths: list[int],
            target: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Whole per-sample tensors (`target`, or new zeros) from each rank's values at the positions it holds."""
    if target is None:
        template = next(t for v in lists for t in v)
        target = [template.new_zeros((n, *template.shape[1:])) for n in lengths]
    with torch.no_grad():
        for values, held in zip(lists, holds):
            for v, (i, idx) in zip(values, held):
                target[i][idx.to(target[i].device)] = v.detach().to(target[i].dtype)
    return target


def _per_token(value: Any, held: list[tuple[int, torch.Tensor]]) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) == len(held)
            and all(isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == idx.numel()
                    for v, (_, idx) in zip(value, held)))


def on_ranks(dp: int, cp: int, batch: dict[str, Any], per_token: tuple[str, ...],
             call: Callable[[Rank, dict[str, Any]], Any]) -> tuple[list[Any], dict[str, Any], list[list[tuple[int, torch.Tensor]]]]:
    """``call(rank, its batch)`` on dp * cp concurrent ranks; returns the ranks' results, the whole
    batch put back (`put_back`) and what each rank holds (`share`)."""
    lengths, totals = batch["response_lengths"], batch["total_lengths"]
    holds = [share(r, dp, cp, lengths, totals) for r in range(dp * cp)]
    locals_ = [local_batch(batch, held, per_token) for held in holds]
    results = run_ranks(dp * cp, lambda rank: call(rank, locals_[rank.rank]), megatron_groups(dp, cp))
    return results, put_back(batch, locals_, holds, per_token), holds
