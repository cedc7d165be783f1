"""Hypothesis strategies for canonical boundary inputs and configs (pure numpy, no torch).

`sentinel hunt` draws whole examples from here: a batch layout (batch size, sequence
length, prompt / response / padding per row, interior holes in the loss mask, fully
masked rows, rows that ran to the length limit without EOS), the boundary's tensors at
valid positions, junk at masked positions (zeros, moderate values and extremes), group
structures (any sizes, ids in any order), and the boundary's config (clip and threshold
values, estimators, normalisation levels, loss aggregation).

Values at valid positions sit on small dyadic grids (multiples of 1/8 or 1/4): sums of
them are exact in float32 whatever the order, so a relation such as "permuting the rows
permutes the outputs" is checked on the math, not on float rounding; and a shrunk
counterexample reads like a hand-written one ([-0.5, 0.25, -0.25]).

Arrays come out in the dtypes the scenario loader produces (float32 tensors and masks,
int64 group ids), so an example written to YAML and loaded back is bit-identical.

Rows are drawn one at a time (prompt, response tokens with their values, padding, reward,
group) and padded to the longest, so Hypothesis's shrinker deletes a row or a token as one
list element. Everything shrinks towards the simplest batch: one row, one token, every
token valid, zeros, the first config choice (the boundary's usual setting).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from hypothesis import reject, strategies as st

from .adapters.options import is_trainer
from .boundaries import BOUNDARIES, get as get_boundary
from .relations import RELATIONS, absent_inputs, relate  # noqa: F401 - absent_inputs: read as strategies'

F32 = np.float32
MAX_BATCH = 4
MAX_LEN = 6

# --- config choices per boundary: the `hunt` values each option declares -------------------

CONFIG_CHOICES: dict[str, dict[str, list[Any]]] = {
    name: {o.name: list(o.hunt) for o in b.options if o.hunt is not None} for name, b in BOUNDARIES.items()}
_NORMS = CONFIG_CHOICES["advantages"]["reward_norm"]  # None first, then the normalisations

# --- value grids ------------------------------------------------------------------------
#
# A row's token values are decoded from one fixed-size byte string (`_row`): a Hypothesis draw
# costs ~25 us whatever it draws, and drawing every value on its own made generation 80% of a
# hunt's time. Each byte picks a grid value by magnitude order (0, +step, -step, ...), so the
# shrinker, lowering bytes towards 0, still moves every value towards 0.

_ORDERS: dict[int, tuple[float, ...]] = {}  # id(grid strategy) -> its values, smallest magnitude first


def grid(lo: float, hi: float, step: float) -> st.SearchStrategy[float]:
    """Multiples of `step` in [lo, hi] (shrinking towards 0, or the bound nearest to it)."""
    a, b = int(np.ceil(lo / step)), int(np.floor(hi / step))
    s = st.integers(a, b).map(lambda k: float(F32(k * step)))
    _ORDERS[id(s)] = tuple(float(F32(k * step)) for k in sorted(range(a, b + 1), key=lambda k: (abs(k), k < 0)))
    return s


# valid-position values per canonical input (log-probabilities are <= 0)
VALUES: dict[str, st.SearchStrategy[float]] = {
    "log_probs": grid(-1.5, 0.0, 0.125),
    "old_log_probs": grid(-1.5, 0.0, 0.125),
    "ref_log_probs": grid(-1.5, 0.0, 0.125),
    "rollout_log_probs": grid(-1.5, 0.0, 0.125),
    "advantages": grid(-2.0, 2.0, 0.25),
    "values": grid(-1.0, 1.0, 0.125),
    "token_rewards": grid(-2.0, 2.0, 0.25),
    "rewards": grid(-2.0, 2.0, 0.25),
    "value_head": grid(-1.0, 1.0, 0.125),
}
LOSS_AGG_VALUES = grid(-4.0, 4.0, 0.25)  # loss_agg's `values` are per-token losses
# vocab tensors ([B, T, V] logits): a small vocabulary, drawn per example (shrinking to 2), and
# logits on a dyadic grid, so log-softmax differences are exact up to the exp / log rounding
VOCAB_SIZES = (2, 3, 4, 5)
LOGITS = grid(-4.0, 4.0, 0.25)

# what masked positions hold: zeros, moderate junk, extremes (exp() of them overflows).
# NaN and +-Inf there come from the `finite` family, which poisons every masked position, and
# from differential hunts (junk="wild"), where they are one more input both sides must agree on.
JUNK_VALUES = (0.0, 1.0, -1.0, 0.5, -2.5, 4.0, 60.0, -60.0, 1.0e4, -1.0e4)
WILD_VALUES = JUNK_VALUES + (float("nan"), float("inf"), float("-inf"), 3.0e38)
JUNK = st.sampled_from(list(JUNK_VALUES))
HOLE_EVERY = 3  # a response token is a hole (masked) when its flag byte % HOLE_EVERY == HOLE_EVERY - 1


def _order(strategy: st.SearchStrategy[float]) -> tuple[float, ...] | None:
    return _ORDERS.get(id(strategy))


# --- examples -----------------------------------------------------------------------------

@dataclass
class Example:
    """One drawn case: a boundary call's config and canonical inputs, plus the perturbed
    copies (variants: input overrides) and invariant parameters a property needs."""

    boundary: str
    config: dict[str, Any]
    inputs: dict[str, np.ndarray]
    variants: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, tokens) of the batch; tokens is 0 for row-only boundaries."""
        tok = [a for n, a in self.inputs.items() if a.ndim == 2]
        if tok:
            return tok[0].shape
        return (len(next(iter(self.inputs.values()))), 0)

    def __repr__(self) -> str:  # what Hypothesis prints for a falsifying example
        ins = {n: a.tolist() for n, a in self.inputs.items()}
        return (f"Example({self.boundary}, config={self.config}, inputs={ins}, variants={list(self.variants)}, "
                f"params={self.params})")


def layout_arrays(lengths: list[tuple[int, int]], holes: list[list[bool]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(loss_mask, attention_mask) of rows given as (prompt, response) lengths, padded to `width`."""
    b = len(lengths)
    loss = np.zeros((b, width), F32)
    attn = np.zeros((b, width), F32)
    for i, ((p, r), h) in enumerate(zip(lengths, holes)):
        attn[i, :p + r] = 1
        loss[i, p:p + r] = np.where(h, 0, 1) if r else 0
    return loss, attn


@dataclass(frozen=True)
class Cell:
    """How a row's bytes become one tensor's value at a position: `width` bytes (1, or a vocab
    tensor's V logits), each picking from `valid` (a trained token) or `junk` (a masked
    position), both smallest magnitude first, so a byte shrinking to 0 moves its value to 0.
    Kept as 256-entry tables (byte -> value): rows are decoded in Python, faster than numpy on
    a few dozen bytes."""

    width: int
    valid: tuple[Any, ...]
    junk: tuple[Any, ...]
    dtype: Any

    @staticmethod
    def of(width: int, valid, junk, dtype) -> "Cell":
        valid, junk = tuple(valid), tuple(junk)
        return Cell(width, tuple(valid[b % len(valid)] for b in range(256)),
                    tuple(junk[b % len(junk)] for b in range(256)), dtype)


def _cells(spec, tensors: tuple[str, ...], vocab: int | None, values: dict[str, st.SearchStrategy[Any]],
           junk: tuple[float, ...]) -> list[Cell]:
    """One Cell per token tensor: a float tensor's grid (`values`, else VALUES); a vocab tensor's
    V logits on the LOGITS grid; token ids in [0, V) at every position (an id outside the
    vocabulary is no input a trainer gets)."""
    out = []
    for n in tensors:
        port = spec.input(n)
        if port.kind == "vocab":
            out.append(Cell.of(vocab, _order(LOGITS), junk, F32))
        elif port.dtype == "int":
            out.append(Cell.of(1, range(vocab), range(vocab), np.int64))
        else:
            out.append(Cell.of(1, _order(values.get(n, VALUES.get(n))), junk, F32))
    return out


def _row(cells: list[Cell], *, min_prompt: int, max_len: int, reward: bool, group: bool,
         holes: bool) -> tuple[st.SearchStrategy[bytes], Any]:
    """One sequence: prompt tokens (masked), then response tokens (trained, or holes: tool
    output, rejected spans), each token carrying a value for every token tensor; what its
    padding holds; its reward and group id. Drawn as one unit, so the shrinker can delete
    a whole row.

    One byte string is the whole row (one draw: a Hypothesis draw costs about as much whatever
    it draws, and drawing every value on its own made generation 80% of a hunt's time): a fixed
    head (prompt length, reward, group), the padding's and the prompt tokens' junk, then one
    slot per response token (a hole flag byte, then each tensor's cell bytes); the response
    has as many tokens as whole slots follow (up to the room the prompt leaves). Every byte
    shrinks towards 0 (valid tokens, values and junk towards 0, group 0), and the shrinker's
    deletion of a run of bytes deletes a token.

    The row: {"prompt": its length, "response": a hole flag per response token, "cells": per
    tensor a list of per-position tuples (`width` values), "pad": per tensor one such tuple,
    "reward", "group"}.

    Returned as (the row's bytes strategy, its decoder): the example decodes its rows itself, as a
    `.map` per row was one more Hypothesis span per row, and a span costs about what a draw does."""
    offsets, w = [], 0
    for c in cells:
        offsets.append(w)
        w += c.width
    stride = w + 1
    top = max(min_prompt, 2)
    fixed = 3 + w + top * w  # prompt length, reward, group; padding junk; prompt junk
    blob_s = st.binary(min_size=fixed, max_size=fixed + max_len * stride)
    if w > len(cells):  # vocab logits: a token's slot is one list element, which the shrinker deletes
        # wherever it is (in one string it truncates the end, and a token there is many bytes)
        blob_s = st.tuples(st.binary(min_size=fixed, max_size=fixed),
                           st.lists(st.binary(min_size=stride, max_size=stride), max_size=max_len))
    rewards = _order(VALUES["rewards"])
    laid = list(zip(cells, offsets))

    def row(blob: Any) -> dict[str, Any]:
        if isinstance(blob, tuple):  # vocab rows: the head, then one string per token slot
            blob = blob[0] + b"".join(blob[1])
        p = min_prompt + blob[0] % (top - min_prompt + 1)
        r = min((len(blob) - fixed) // stride, max(0, max_len - p))
        starts = [fixed + j * stride for j in range(r)]
        hole = [holes and blob[s] % HOLE_EVERY == HOLE_EVERY - 1 for s in starts]
        out: dict[str, Any] = {"prompt": p, "response": hole, "cells": [], "pad": []}
        for c, o in laid:
            jt, vt, cw = c.junk.__getitem__, c.valid.__getitem__, c.width
            col = [tuple(map(jt, blob[3 + w + i * w + o:3 + w + i * w + o + cw])) for i in range(p)]
            col += [tuple(map(jt if h else vt, blob[s + 1 + o:s + 1 + o + cw])) for s, h in zip(starts, hole)]
            out["cells"].append(col)
            out["pad"].append(tuple(map(jt, blob[3 + o:3 + o + cw])))
        if reward:
            out["reward"] = rewards[blob[1] % len(rewards)]
        if group:
            out["group"] = blob[2] % 3
        return out

    return blob_s, row


def _len(r: dict[str, Any]) -> int:
    return r["prompt"] + len(r["response"])


def _masked_inside(r: dict[str, Any]) -> bool:
    return bool(r["prompt"]) or any(r["response"]) or not r["response"]


def configs(boundary: str, **choices: list[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The boundary's config: every key of CONFIG_CHOICES[boundary], overridden by `choices`.

    One integer draw picks the whole config (scrambled, then read as one digit per key: see
    `_configs`): shrinking it to 0 gives every key its first choice, the boundary's usual
    setting; a shrunk finding's other keys may stay off their first choice (a scrambled
    integer is small without its digits being so), which `signature.config_that_matters` sorts out."""
    raw, pick = _configs(boundary, **choices)
    return raw.map(pick)


_GOLDEN = (5 ** 0.5 - 1) / 2


def _configs(boundary: str, **choices: list[Any]) -> tuple[st.SearchStrategy[Any], Any]:
    """`configs` as (the strategy drawn, what makes its draw the config): an example decodes
    its draws itself, one Hypothesis span fewer than a `.map`."""
    table = {**CONFIG_CHOICES[boundary], **choices}
    unknown = {k for k in table if not is_trainer(k)} - set(get_boundary(boundary).config)
    if unknown:
        raise KeyError(f"boundary {boundary!r} has no config key(s) {sorted(unknown)}")
    keys = list(table)
    sizes = [len(table[k]) for k in keys]
    if not keys or 0 in sizes:
        return st.fixed_dictionaries({k: st.sampled_from(v) for k, v in table.items()}), dict
    total = int(np.prod(sizes, dtype=np.int64))
    # the drawn integer's digits scrambled (i -> i * mult mod total, mult ~ total / golden ratio:
    # a bijection that keeps 0 as every key's first value, where shrinking goes, and spreads
    # small i over every digit): Hypothesis draws small integers far more often than large ones,
    # so as plain mixed-radix digits the first keys stayed at their first value (TRL's loss_type
    # off its default in 11 % of draws listed first, 75 % listed last)
    mult = max(1, round(total * _GOLDEN))
    while math.gcd(mult, total) != 1:
        mult += 1

    def pick(i: int) -> dict[str, Any]:
        out = {}
        i = i * mult % total
        for k, n in zip(reversed(keys), reversed(sizes)):
            i, j = divmod(i, n)
            out[k] = table[k][j]
        # a trainer option at its default (its first value) is left out: the config a scenario has
        return {k: out[k] for k in keys if not (is_trainer(k) and out[k] == table[k][0])}

    return st.integers(0, total - 1), pick


def _repaired(rows: list, min_batch: int, simple: Any) -> list:
    """At least `min_batch` rows: the simplest row appended. A length filter would reject
    whole batches; a `min_size` would force rows the shrinker could not delete."""
    return rows + [simple] * (min_batch - len(rows)) if len(rows) < min_batch else rows


@dataclass(frozen=True)
class _Rows:
    """A batch's rows: a list of each row's raw draw (`_row`'s bytes), decoded, made up to the
    minimum batch (`fill`: the simplest rows, appended), and accepted by `ok`, as
    `st.lists(row).map(fill).filter(ok)` would, without a span per row's `.map` and the list's
    `.map` and `.filter` (a span costs about what a draw does)."""

    raw: st.SearchStrategy[list[Any]]
    decode: Any  # a row's draw -> the row
    fill: Any  # the decoded rows -> at least the minimum batch
    ok: Any  # the rows -> whether this layout is one to draw

    def draw(self, draw) -> list[Any]:
        for _ in range(3):  # as Hypothesis's filter: three tries, then the test case is invalid
            rows = self.fill([self.decode(b) for b in draw(self.raw)])
            if self.ok(rows):
                return rows
        reject()


def _uses_groups(boundary: str, cfg: dict[str, Any]) -> bool:
    if boundary == "reward_norm":
        return "group" in (cfg.get("mean_level"), cfg.get("std_level"))
    if boundary == "advantages":
        norm = cfg.get("reward_norm") or {}
        return (cfg.get("estimator") in ("grpo", "reinforce_plus_plus_baseline")
                or "group" in (norm.get("mean_level"), norm.get("std_level")))
    return False


_BUMP = grid(0.25, 100.0, 0.25)
_WILD_BUMP = st.one_of(_BUMP, st.sampled_from([1.0e4, float("nan"), float("inf")]))
_WILD_ROW_REWARD = st.sampled_from([float("nan"), float("inf"), 1.0e4])


# --- an example's small choices, in one draw ----------------------------------------------------
#
# The vocabulary size, extra padding columns, the relation and its pick are the bytes of one
# small fixed-size string, a relation's signs (a byte per position, even: +1) and a row
# permutation one string each, drawn only where used: a Hypothesis draw costs about as much
# whatever it draws (a list of +-1 signs was two draws per element, most of an example's draws
# where a relation applied), and the shrinker minimises a byte string as one number, so bytes
# nothing reads would only slow it. Each byte shrinks towards 0: the first vocabulary size, no
# extra column, the first relation, sign +1, the identity permutation.

_VOCAB, _EXTRA, _RELATION, _PICK = range(4)  # byte offsets
_SMALL = st.binary(min_size=4, max_size=4)
_ROW3 = st.binary(min_size=3, max_size=3)  # reward_norm's row: reward, dropped, group
_SIGNS = st.binary(min_size=(MAX_BATCH + 2) * (MAX_LEN + 2), max_size=(MAX_BATCH + 2) * (MAX_LEN + 2)).map(
    lambda b: [1 - 2 * (x % 2) for x in b])
_PERMS = {n: st.binary(min_size=n - 1, max_size=n - 1) for n in range(1, 2 * MAX_BATCH + 3)}


def _permutation(b: bytes, n: int) -> list[int]:
    """A permutation of range(n) from n - 1 bytes (Fisher-Yates; zeros: the identity)."""
    out = list(range(n))
    for i in range(n - 1):
        j = i + b[i] % (n - i)
        out[i], out[j] = out[j], out[i]
    return out


def examples(boundary: str, *, config: dict[str, list[Any]] | None = None, min_batch: int = 1,
             need_masked: bool = False, eos: str = "any", min_prompt: int = 0, groups: str = "auto",
             min_groups: int = 1, perm: bool = False, variant: str | None = None, holes: bool = True,
             max_batch: int = MAX_BATCH, max_len: int = MAX_LEN,
             seq_advantages: bool = False, junk: str = "finite", row_mask: bool = False,
             min_valid: int = 0, relations: tuple[str, ...] = ("independent",)) -> st.SearchStrategy[Example]:
    """Canonical examples for `boundary`.

    Rows are drawn one by one (ragged) and padded to the longest; a row that fills the
    length never emitted EOS. Extra padding columns (then every row has EOS) are drawn
    unless eos="mixed" (at least one row with EOS and one without).
    need_masked: at least one masked position (the masking families perturb them).
    groups: "auto" (group ids when the config normalises per group), "always", "never".
    perm: also draw a row permutation (params["perm"]).
    variant: "no_eos_rewards" (only the rewards of rows without EOS change) or
      "masked_row_rewards" (reward_norm: only the rewards of rows with mask 0 change).
    seq_advantages: one advantage per sequence (its first valid token's) at every valid
      token, as outcome-reward estimators (GRPO, GSPO) give.
    junk: what masked positions hold: "finite" (JUNK_VALUES) or "wild" (NaN, +-Inf and 3e38
      too: a differential hunt asks both sides to agree on those).
    row_mask: reward_norm: also draw which rows are dropped (mask 0), as masked_row_rewards does.
    min_valid: at least this many valid (trained) tokens in the batch.
    relations: drawn per example (RELATIONS; the first is what a shrunk example keeps): each
      token tensor on its own ("independent"), or one relation or edge applied to the drawn tensors,
      or "absent": the optional inputs a trainer reads only when present left out (`absent_inputs`).

    Sub-strategies are built here once, not per draw (Hypothesis validates each new one).
    """
    cfg_s, cfg_pick = _configs(boundary, **(config or {}))
    spec = get_boundary(boundary)
    has_group = spec.input("group") is not None
    if eos == "mixed" or variant or perm:
        min_batch = max(min_batch, 2)
    rows_s: dict[Any, _Rows] = {}  # reward_norm: by groups; else by (groups, vocab)
    junk_values = {"finite": JUNK_VALUES, "wild": WILD_VALUES}[junk]
    drops = variant == "masked_row_rewards" or row_mask
    if boundary == "reward_norm":  # a row-only boundary: (reward, dropped, group) from three bytes
        rewards = _order(VALUES["rewards"])
        for g in (False, True):
            # min_size 0 and a repair: Hypothesis forces the first `min_size` elements, and a
            # forced element cannot be deleted by the shrinker
            rows_s[g] = _Rows(
                st.lists(_ROW3, max_size=max_batch + 2),
                lambda b, g=g: (rewards[b[0] % len(rewards)], drops and b[1] % 2 == 1, b[2] % 3 if g else 0),
                lambda rs: _repaired(rs, min_batch, (0.0, False, len(rs) % 3)),
                lambda rs, g=g: (variant != "masked_row_rewards" or 0 < sum(r[1] for r in rs) < len(rs))
                and (not row_mask or sum(r[1] for r in rs) < len(rs))
                and (not g or len({r[2] for r in rs}) >= min(min_groups, len(rs))))
    else:
        # float token tensors, vocab tensors ([B, T, V] logits) and token ids
        tensors = tuple(p.name for p in spec.inputs if p.kind == "vocab" or p.kind == "token" and p.dtype != "mask")
        has_rewards = spec.input("rewards") is not None
        values = {"values": LOSS_AGG_VALUES} if boundary in ("loss_agg", "masked_reduce") else {}
        cells_of: dict[int | None, list[Cell]] = {}
        for vocab in (VOCAB_SIZES if any(p.kind == "vocab" for p in spec.inputs) else (None,)):
            cells = cells_of[vocab] = _cells(spec, tensors, vocab, values, junk_values)
            for g in (False, True):
                row_s, row = _row(cells, min_prompt=min_prompt, max_len=max_len, reward=has_rewards, group=g,
                                  holes=holes)

                def simple(i: int, g: bool = g, cells: list[Cell] = cells) -> dict[str, Any]:
                    out = {"prompt": min_prompt, "response": [False], "pad": [(c.valid[0],) * c.width for c in cells],
                           "cells": [[(c.valid[0],) * c.width] * (min_prompt + 1) for c in cells]}
                    return {**out, **({"reward": 0.0} if has_rewards else {}), **({"group": i % 3} if g else {})}

                def ok(rs: list[dict[str, Any]], g: bool = g) -> bool:
                    lens = [_len(r) for r in rs]
                    if max(lens) == 0 or (eos == "mixed" and len(set(lens)) < 2):
                        return False
                    if min_valid and sum(not h for r in rs for h in r["response"]) < min_valid:
                        return False
                    return not g or len({r["group"] for r in rs}) >= min(min_groups, len(rs))

                rows_s[(g, vocab)] = _Rows(
                    st.lists(row_s, max_size=max_batch), row,
                    lambda rs, simple=simple: rs + [simple(len(rs) + i) for i in range(min_batch - len(rs))], ok)
    unknown = set(relations) - set(RELATIONS)
    if unknown:
        raise KeyError(f"unknown relation(s) {sorted(unknown)} (known: {', '.join(RELATIONS)})")

    def draw_example(draw) -> Example:
        cfg = cfg_pick(draw(cfg_s))
        xb = draw(_SMALL)
        want_groups = has_group and (groups == "always" or (groups == "auto" and _uses_groups(boundary, cfg)))
        if boundary == "reward_norm":
            rows = rows_s[want_groups].draw(draw)
        else:
            vocab = VOCAB_SIZES[xb[_VOCAB] % len(VOCAB_SIZES)] if (False, VOCAB_SIZES[0]) in rows_s else None
            rows = rows_s[(want_groups, vocab)].draw(draw)
        inputs: dict[str, np.ndarray] = {}
        variants: dict[str, dict[str, np.ndarray]] = {}
        params: dict[str, Any] = {}
        if boundary == "reward_norm":
            inputs["rewards"] = np.asarray([r[0] for r in rows], F32)
            if row_mask:
                dropped = np.asarray([r[1] for r in rows])
                inputs["mask"] = (~dropped).astype(F32)
                if junk == "wild" and dropped.any() and draw(st.booleans()):  # a failed sample's NaN reward
                    inputs["rewards"] = np.where(dropped, F32(draw(_WILD_ROW_REWARD)), inputs["rewards"]).astype(F32)
            if variant == "masked_row_rewards":
                dropped = np.asarray([r[1] for r in rows])
                inputs["mask"] = (~dropped).astype(F32)
                # a dropped row may hold anything: the NaN reward of a failed sample included
                bump = draw(_WILD_BUMP)
                variants[variant] = {"rewards": np.where(dropped, inputs["rewards"] + F32(bump),
                                                         inputs["rewards"]).astype(F32)}
                params["rows"] = [i for i, d in enumerate(dropped) if not d]
            if want_groups:
                inputs["group"] = np.asarray([r[2] for r in rows], np.int64)
        else:
            lens = [_len(r) for r in rows]
            extra = 0 if eos == "mixed" else xb[_EXTRA] % 3
            if need_masked and not extra and len(set(lens)) < 2 and not any(_masked_inside(r) for r in rows):
                extra = 1  # every position would be valid: pad one column so there is something to perturb
            width = max(lens) + extra
            loss, attn = layout_arrays([(r["prompt"], len(r["response"])) for r in rows],
                                       [r["response"] for r in rows], width)
            for k, name in enumerate(tensors):  # one conversion per tensor: rows padded as lists
                shape = (len(rows), width) + ((vocab,) if spec.input(name).kind == "vocab" else ())
                inputs[name] = np.asarray([r["cells"][k] + [r["pad"][k]] * (width - n) for r, n in zip(rows, lens)],
                                          cells_of[vocab][k].dtype).reshape(shape)
            inputs["loss_mask"] = loss
            if seq_advantages:
                adv, valid = inputs["advantages"], loss.astype(bool)
                first = np.take_along_axis(adv, valid.argmax(axis=1)[:, None], axis=1)
                inputs["advantages"] = np.where(valid, first, adv).astype(F32)
            if spec.input("attention_mask") is not None:
                inputs["attention_mask"] = attn
            if has_rewards:
                inputs["rewards"] = np.asarray([r["reward"] for r in rows], F32)
            if want_groups:
                inputs["group"] = np.asarray([r["group"] for r in rows], np.int64)
            if variant == "no_eos_rewards":
                no_eos = attn.astype(bool).all(axis=1)
                bump = draw(_BUMP)
                variants[variant] = {"rewards": np.where(no_eos, inputs["rewards"] + F32(bump),
                                                         inputs["rewards"]).astype(F32)}
            if len(relations) > 1:
                rel = relations[xb[_RELATION] % len(relations)]
                if rel != "independent":
                    with np.errstate(all="ignore"):  # masked junk (NaN, 3e38) goes through unused
                        relate(rel, inputs, cfg, draw(_SIGNS), xb[_PICK] % 3, boundary)
        if perm:
            params["perm"] = _permutation(draw(_PERMS[len(rows)]), len(rows))
        order = [p.name for p in spec.inputs]  # stable key order: the boundary's port order
        return Example(boundary, cfg, {n: inputs[n] for n in order if n in inputs}, variants, params)

    return _drawn(draw_example)


@st.composite
def _drawn(draw, body: Callable[[Any], Example]) -> Example:
    """An example drawn by `body(draw)`. Decorated once here: `st.composite` reads and parses
    its function's source (~5 ms CPU), which `examples` would pay for every strategy it builds (a
    round's child builds one for each new exclusion)."""
    return body(draw)


def batches(strategy: st.SearchStrategy[Example], size: int = 16) -> st.SearchStrategy[list[Example]]:
    """Several examples per Hypothesis test case. The engine's own work per test case (its
    choice tree, mutations) costs about a millisecond whatever is drawn; a batch shares it.
    A failing batch shrinks to the one failing example: deleting list elements is the
    shrinker's first move."""
    return st.lists(strategy, min_size=1, max_size=size)
