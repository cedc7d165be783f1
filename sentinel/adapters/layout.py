"""Row and group layout: canonical ``[B, T]`` batches <-> the shapes trainers want.

- `rows` / `unrows`: one response per sequence and back: the whole row (masked head and tail
  included), or cut at given ends (`valid_ends`: a masked tail as padding);
- `group_ids`, `group_layout`, `unpermute`: canonical ``group`` ids -> the group-by-group row
  order a trainer wants, and back.
"""

from __future__ import annotations

import torch


def rows(t: torch.Tensor, ends: list[int] | None = None) -> list[torch.Tensor]:
    """One tensor per sequence: each whole row, every position (masked ones included), or its
    first `ends[i]` positions; a clone, so a target's in-place change is seen afterwards and
    autograd reaches `t`."""
    if ends is None:
        return [r.clone() for r in t]
    return [r[:n].clone() for r, n in zip(t, ends)]


def valid_ends(mask: torch.Tensor) -> list[int]:
    """Each row's length up to and including its last valid position (the masked tail cut off as
    padding); a row with no valid position keeps every position (a sample whose mask is all 0)."""
    valid = mask.bool()
    width = valid.shape[1]
    last = width - valid.flip(1).int().argmax(dim=1)  # one past the last valid position
    return [int(n) if any_ else width for n, any_ in zip(last.tolist(), valid.any(dim=1).tolist())]


def unrows(parts: list[torch.Tensor] | tuple[torch.Tensor, ...], like: torch.Tensor,
           fill: torch.Tensor | None = None, ends: list[int] | None = None) -> torch.Tensor:
    """Inverse of `rows`: per-sequence tensors back into a ``[B, T]`` batch (keeping their autograd
    graph); an empty batch gives an empty float tensor shaped like `like`. Without `ends` every part
    has the row's length (else torch.stack raises); with them part i must have ends[i] values
    (ValueError otherwise: a target that returns fewer values than it was given is not padded over),
    and the rest of its row comes from `fill`'s row (what the target never saw) or is 0, as a padded
    batch holds it."""
    if not parts:
        return torch.zeros(like.shape, dtype=torch.float32, device=like.device)
    out = []
    for i, p in enumerate(parts):
        p = p.reshape(-1)
        if ends is not None:
            if p.numel() != ends[i]:
                raise ValueError(f"sequence {i}: {p.numel()} values back for a response of {ends[i]}")
            rest = (fill[i, p.numel():].detach().to(p.device, p.dtype) if fill is not None
                    else p.new_zeros(like.shape[1] - p.numel()))
            p = torch.cat([p, rest])
        out.append(p)
    return torch.stack(out)


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
