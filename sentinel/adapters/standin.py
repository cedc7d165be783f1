"""A stand-in language model for an actor's batch-to-log-probs method (the `actor_logprobs`
boundary): its forward returns, for the ids it is given, the logits the scenario drew.

An actor (TRL's ``_get_per_token_logps_and_entropies``, verl's ``compute_log_prob``) calls its
model on micro-batches, maybe reordered, padded or packed, and slices, scales and gathers what
comes back. So that all of that really runs, the stand-in answers each call as a model would:
as a function of the ids it reads, never of where the call sits in the batch. `LogitsTable`
keys each canonical row by its real token ids (attention_mask 1, in order); for a sequence of
ids it returns, at its j-th token, the canonical logits that predict its (j+1)-th token
(``logits[b, t]`` predicts token t, sentinel/boundaries.py) and 0 at the last (it predicts past
the end). A trainer that reorders, drops or shifts rows or positions gets other rows' logits
back, visibly; a sequence that is no row of the batch (ids corrupted or cut) gets NaN logits,
which show as NaN log-probs rather than a crash inside the stand-in.

A model gives two rows with the same ids the same logits: an input where such rows differ at a
trained token is one no model produces, and `same_ids_same_logits` says so (an adapter's
precondition). The logits reach the output through indexing only, so gradients flow back to
the canonical tensor, and every forward returns a new tensor (a trainer may scale it in place).
"""

from __future__ import annotations

import types
from typing import Any, Mapping

import torch

from sentinel.adapters.contract import Precondition


def real_positions(mask_row: torch.Tensor) -> torch.Tensor:
    """The positions of a row's real tokens, in order."""
    return mask_row.bool().nonzero().reshape(-1)


def _keys(tokens: torch.Tensor, attention_mask: torch.Tensor) -> list[tuple[tuple[int, ...], torch.Tensor]]:
    return [(tuple(tokens[b, pos].tolist()), pos) for b in range(tokens.shape[0])
            for pos in (real_positions(attention_mask[b]),)]


def same_ids_same_logits(inputs: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Rows with the same real ids carry the same logits at every trained token of either."""
    logits, loss = inputs["logits"], inputs["loss_mask"].bool()
    first: dict[tuple[int, ...], tuple[int, torch.Tensor]] = {}
    for b, (key, pos) in enumerate(_keys(inputs["tokens"], inputs["attention_mask"])):
        if key not in first:
            first[key] = (b, pos)
            continue
        a, apos = first[key]
        trained = loss[a, apos] | loss[b, pos]
        x, y = logits[a, apos][trained], logits[b, pos][trained]
        if not bool(((x == y) | (x.isnan() & y.isnan())).all()):
            return False
    return True


def one_span_after_a_token(inputs: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Each row's real tokens are one span (padding only left and right), every trained token is
    real, and none is the row's first real token (no position before it predicts it)."""
    attn, loss = inputs["attention_mask"].bool(), inputs["loss_mask"].bool()
    if bool((loss & ~attn).any()):
        return False
    for b in range(attn.shape[0]):
        pos = real_positions(attn[b])
        if pos.numel() and (int(pos[-1] - pos[0]) + 1 != pos.numel() or bool(loss[b, pos[0]])):
            return False
    return True


def prompt_response(tokens: torch.Tensor, attn: torch.Tensor, loss: torch.Tensor):
    """The layout TRL's and verl's actors take: prompts left-padded to the longest prompt, then
    responses right-padded to the longest response. A canonical row's response starts at its
    first trained token (every real token before it is prompt; a row with no trained token is all
    prompt), so its holes and any real token after its last trained one are response tokens,
    scored and not trained. Returns (input_ids [B, P + C], attention_mask, C, and per row the
    canonical positions of its C response columns, -1 past its response)."""
    rows = []
    for b in range(tokens.shape[0]):
        pos = real_positions(attn[b])
        trained = loss[b, pos].bool()
        start = int(trained.nonzero()[0]) if bool(trained.any()) else int(pos.numel())
        rows.append((pos[:start], pos[start:]))
    width_p = max(int(p.numel()) for p, _ in rows)
    width_c = max(1, max(int(c.numel()) for _, c in rows))  # a generation returns at least one column
    ids = tokens.new_zeros(len(rows), width_p + width_c)
    mask = torch.zeros_like(ids)
    where = torch.full((len(rows), width_c), -1, dtype=torch.long, device=tokens.device)
    for b, (p, c) in enumerate(rows):
        lo = width_p - int(p.numel())
        ids[b, lo:width_p], mask[b, lo:width_p] = tokens[b, p], 1
        ids[b, width_p:width_p + c.numel()], mask[b, width_p:width_p + c.numel()] = tokens[b, c], 1
        where[b, :c.numel()] = c
    return ids, mask, width_c, where


def scatter_back(values: torch.Tensor, where: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """An actor's [B, C] response results at the canonical [B, T] positions they score (0 elsewhere)."""
    b, j = (where >= 0).nonzero(as_tuple=True)
    return values.new_zeros(shape).index_put((b, where[b, j]), values[b, j])


def actor_preconditions(target: str, link: str) -> dict[str, Any]:
    """The preconditions of an actor fed by the stand-in (`Adapter.preconditions` entries)."""
    return {
        "actor-one-span": Precondition(
            one_span_after_a_token, boundaries=("actor_logprobs",), link=link,
            reason=f"{target}'s batch is a left-padded prompt then a right-padded response: a row's real tokens are "
                   "one span, and a response token always follows at least one prompt token that predicts it"),
        "actor-same-ids-same-logits": Precondition(
            same_ids_same_logits, boundaries=("actor_logprobs",), link=link,
            reason="a model's logits are a function of the ids it reads: two rows with the same ids get the same "
                   "logits, so the stand-in model cannot give them different ones"),
    }


class LogitsTable:
    """The canonical batch's logits, looked up by a row's real ids."""

    def __init__(self, logits: torch.Tensor, tokens: torch.Tensor, attention_mask: torch.Tensor):
        self.logits = logits
        self.rows: dict[tuple[int, ...], list[tuple[int, torch.Tensor]]] = {}
        self.served: dict[tuple[int, ...], int] = {}
        for b, (key, pos) in enumerate(_keys(tokens, attention_mask)):
            self.rows.setdefault(key, []).append((b, pos))

    def next_token_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """[n, V]: at the j-th of these n ids, the logits that predict the (j+1)-th. Rows with the
        same ids (same logits: a precondition) are served in turn, each its own canonical row, so
        each row's gradient reaches its own logits, not the sum of all of them the first one."""
        n, vocab = int(ids.numel()), self.logits.shape[-1]
        key = tuple(ids.reshape(-1).tolist())
        same = self.rows.get(key)
        if not same:
            return self.logits.new_full((n, vocab), float("nan"))
        turn = self.served.get(key, 0)
        self.served[key] = turn + 1
        b, pos = same[turn % len(same)]
        return torch.cat([self.logits[b, pos[1:]], self.logits.new_zeros(min(n, 1), vocab)])


class StandInLM(torch.nn.Module):
    """A causal LM whose forward returns `LogitsTable`'s logits for the ids it reads: padded
    (``input_ids`` [b, L] with ``attention_mask``) or packed (``input_ids`` [1, nnz] with
    ``position_ids`` restarting at 0 where each sequence starts, no attention mask). `calls`
    records the rows and tokens of every forward (how the trainer batched)."""

    __sentinel_standin__ = True  # an exported validate.py gets this class's source (export.standins)

    def __init__(self, table: LogitsTable):
        super().__init__()
        self.table = table
        self.calls: list[tuple[int, int]] = []

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, logits_to_keep=0, **kwargs: Any):
        rows, width = input_ids.shape
        if attention_mask is None and position_ids is not None:  # packed: sequences start at position 0
            starts = (position_ids.reshape(-1, width)[0] == 0).nonzero().reshape(-1).tolist() + [width]
            spans = [(0, torch.arange(a, b, device=input_ids.device)) for a, b in zip(starts, starts[1:])]
        else:
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            spans = [(r, real_positions(mask[r])) for r in range(rows)]
        self.calls.append((rows, sum(int(p.numel()) for _, p in spans)))
        index = [(r, p, self.table.next_token_logits(input_ids[r, p])) for r, p in spans]
        rr = torch.cat([torch.full_like(p, r) for r, p, _ in index]) if index else input_ids.new_zeros(0)
        pp = torch.cat([p for _, p, _ in index]) if index else input_ids.new_zeros(0)
        vals = torch.cat([v for _, _, v in index]) if index else self.table.logits.new_zeros(0, self.table.logits.shape[-1])
        out = self.table.logits.new_zeros(rows, width, self.table.logits.shape[-1]).index_put((rr, pp), vals)
        if logits_to_keep:
            out = out[:, -int(logits_to_keep):]
        return types.SimpleNamespace(logits=out, aux_loss=None)
