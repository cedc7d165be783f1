"""Row and group layout: canonical ``[B, T]`` batches <-> the shapes trainers want.

- `rows` / `unrows`: one whole response per sequence and back (no position is cut, masked
  head and tail included);
- `group_ids`, `group_layout`, `unpermute`: canonical ``group`` ids -> the group-by-group row
  order a trainer wants, and back.
"""

from __future__ import annotations

import torch


def rows(t: torch.Tensor) -> list[torch.Tensor]:
    """One tensor per sequence: each whole row, every position (masked ones included), as a
    clone, so a target's in-place change is seen afterwards and autograd reaches `t`."""
    return [r.clone() for r in t]


def unrows(parts: list[torch.Tensor] | tuple[torch.Tensor, ...], like: torch.Tensor) -> torch.Tensor:
    """Inverse of `rows`: per-sequence tensors (of the row length) back into a ``[B, T]`` batch
    (keeping their autograd graph); an empty batch gives an empty float tensor shaped like `like`."""
    if not parts:
        return torch.zeros(like.shape, dtype=torch.float32, device=like.device)
    return torch.stack([p.reshape(-1) for p in parts])


def group_ids(group: torch.Tensor | None, group_size: int | None, n: int, *, ungrouped: str = "one") -> list[int]:
    """Each row's group: the canonical ``group`` ids, else consecutive chunks of
    `group_size`, else one group for the batch (``ungrouped="one"``) or one per row ("each")."""
    if group is not None:
        return [int(g) for g in group.reshape(-1).tolist()]
    if group_size:
        return [i // int(group_size) for i in range(n)]
    return [0] * n if ungrouped == "one" else list(range(n))


def group_layout(ids: list[int]) -> tuple[list[int], list[int]]:
    """(row order that makes each group's rows consecutive, groups in order of first
    appearance; the group sizes in that order)."""
    members: dict[int, list[int]] = {}
    for i, g in enumerate(ids):
        members.setdefault(g, []).append(i)
    return [i for rows_ in members.values() for i in rows_], [len(r) for r in members.values()]


def unpermute(x: torch.Tensor, order: list[int]) -> torch.Tensor:
    """Rows laid out in `order` (see `group_layout`) put back in canonical order."""
    if order == sorted(order):
        return x
    out = torch.empty_like(x)
    out[torch.tensor(order, device=x.device)] = x
    return out
