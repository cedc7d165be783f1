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

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .boundaries import BOUNDARIES, get as get_boundary

F32 = np.float32
MAX_BATCH = 4
MAX_LEN = 6

# --- config choices per boundary: the `hunt` values each option declares -------------------

CONFIG_CHOICES: dict[str, dict[str, list[Any]]] = {
    name: {o.name: list(o.hunt) for o in b.options if o.hunt is not None} for name, b in BOUNDARIES.items()}
_NORMS = CONFIG_CHOICES["advantages"]["reward_norm"]  # None first, then the normalisations

# --- value grids ------------------------------------------------------------------------


def grid(lo: float, hi: float, step: float) -> st.SearchStrategy[float]:
    """Multiples of `step` in [lo, hi] (shrinking towards 0, or the bound nearest to it)."""
    a, b = int(np.ceil(lo / step)), int(np.floor(hi / step))
    return st.integers(a, b).map(lambda k: float(F32(k * step)))


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
# NaN and +-Inf there come from the `finite` family, which poisons every masked position.
JUNK = st.sampled_from([0.0, 1.0, -1.0, 0.5, -2.5, 4.0, 60.0, -60.0, 1.0e4, -1.0e4])


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


def _token(tensors: tuple[str, ...], holes: bool, values: dict[str, st.SearchStrategy[Any]],
           junk: dict[str, st.SearchStrategy[Any]]):
    """(is_hole, value per token tensor) of one response token."""
    valid = st.tuples(st.just(False), st.tuples(*(values[n] if n in values else VALUES[n] for n in tensors)))
    if not holes:
        return valid
    return st.one_of(valid, st.tuples(st.just(True), st.tuples(*(junk.get(n, JUNK) for n in tensors))))  # shrinks to trained


def _vocab_values(spec, vocab: int | None) -> tuple[dict[str, st.SearchStrategy[Any]], dict[str, st.SearchStrategy[Any]]]:
    """(valid, masked) value strategies of the boundary's vocab tensors (V logits per position)
    and token ids (in [0, V) everywhere: an id outside the vocabulary is no input a trainer gets)."""
    valid: dict[str, st.SearchStrategy[Any]] = {}
    junk: dict[str, st.SearchStrategy[Any]] = {}
    if vocab is None:
        return valid, junk
    for p in spec.inputs:
        if p.kind == "vocab":
            valid[p.name], junk[p.name] = st.tuples(*[LOGITS] * vocab), st.tuples(*[JUNK] * vocab)
        elif p.kind == "token" and p.dtype == "int":
            valid[p.name] = junk[p.name] = st.integers(0, vocab - 1)
    return valid, junk


def _row(tensors: tuple[str, ...], *, min_prompt: int, max_len: int, reward: bool, group: bool,
         holes: bool, values: dict[str, st.SearchStrategy[Any]],
         junk_of: dict[str, st.SearchStrategy[Any]] | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """One sequence: prompt tokens (masked), then response tokens (trained, or holes: tool
    output, rejected spans), each token carrying a value for every token tensor; what its
    padding holds; its reward and group id. Drawn as one unit, so the shrinker can delete
    a whole row, or one token of it."""
    junk_of = junk_of or {}
    junk = st.tuples(*(junk_of.get(n, JUNK) for n in tensors))
    prompts = st.lists(junk, min_size=min_prompt, max_size=max(min_prompt, 2))
    token = _token(tensors, holes, values, junk_of)
    responses = {room: st.lists(token, max_size=room) for room in range(max_len + 1)}
    group_s = st.integers(0, 2)

    @st.composite
    def row(draw) -> dict[str, Any]:
        prompt = draw(prompts)
        out = {"prompt": prompt, "response": draw(responses[max(0, max_len - len(prompt))]), "pad": draw(junk)}
        if reward:
            out["reward"] = draw(VALUES["rewards"])
        if group:
            out["group"] = draw(group_s)
        return out

    return row()


def _len(r: dict[str, Any]) -> int:
    return len(r["prompt"]) + len(r["response"])


def _masked_inside(r: dict[str, Any]) -> bool:
    return bool(r["prompt"]) or any(h for h, _ in r["response"]) or not r["response"]


def configs(boundary: str, **choices: list[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The boundary's config: every key of CONFIG_CHOICES[boundary], overridden by `choices`."""
    table = {**CONFIG_CHOICES[boundary], **choices}
    unknown = set(table) - set(get_boundary(boundary).config)
    if unknown:
        raise KeyError(f"boundary {boundary!r} has no config key(s) {sorted(unknown)}")
    return st.fixed_dictionaries({k: st.sampled_from(v) for k, v in table.items()})


def _uses_groups(boundary: str, cfg: dict[str, Any]) -> bool:
    if boundary == "reward_norm":
        return "group" in (cfg.get("mean_level"), cfg.get("std_level"))
    if boundary == "advantages":
        norm = cfg.get("reward_norm") or {}
        return (cfg.get("estimator") in ("grpo", "reinforce_plus_plus_baseline")
                or "group" in (norm.get("mean_level"), norm.get("std_level")))
    return False


_PERMS = {n: st.permutations(range(n)) for n in range(1, MAX_BATCH + 3)}
_BUMP = grid(0.25, 100.0, 0.25)
_WILD_BUMP = st.one_of(_BUMP, st.sampled_from([1.0e4, float("nan"), float("inf")]))


def examples(boundary: str, *, config: dict[str, list[Any]] | None = None, min_batch: int = 1,
             need_masked: bool = False, eos: str = "any", min_prompt: int = 0, groups: str = "auto",
             min_groups: int = 1, perm: bool = False, variant: str | None = None, holes: bool = True,
             max_batch: int = MAX_BATCH, max_len: int = MAX_LEN,
             seq_advantages: bool = False) -> st.SearchStrategy[Example]:
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

    Sub-strategies are built here once, not per draw (Hypothesis validates each new one).
    """
    cfg_s = configs(boundary, **(config or {}))
    spec = get_boundary(boundary)
    has_group = spec.input("group") is not None
    if eos == "mixed" or variant or perm:
        min_batch = max(min_batch, 2)
    rows_s: dict[bool, st.SearchStrategy] = {}
    if boundary == "reward_norm":  # a row-only boundary
        for g in (False, True):
            row = st.tuples(VALUES["rewards"], st.booleans() if variant == "masked_row_rewards" else st.just(False),
                            st.integers(0, 2) if g else st.just(0))
            # min_size 0 and a length filter: Hypothesis forces the first `min_size` elements, and a
            # forced element cannot be deleted by the shrinker
            rows_s[g] = st.lists(row, max_size=max_batch + 2).filter(
                lambda rs, g=g: len(rs) >= min_batch
                and (variant != "masked_row_rewards" or 0 < sum(r[1] for r in rs) < len(rs))
                and (not g or len({r[2] for r in rs}) >= min(min_groups, len(rs))))
    else:
        # float token tensors, vocab tensors ([B, T, V] logits) and token ids
        tensors = tuple(p.name for p in spec.inputs if p.kind == "vocab" or p.kind == "token" and p.dtype != "mask")
        has_rewards = spec.input("rewards") is not None
        for vocab in (VOCAB_SIZES if any(p.kind == "vocab" for p in spec.inputs) else (None,)):
            valid, junk = _vocab_values(spec, vocab)
            values = {**valid, **({"values": LOSS_AGG_VALUES} if boundary in ("loss_agg", "masked_reduce") else {})}
            for g in (False, True):
                row = _row(tensors, min_prompt=min_prompt, max_len=max_len, reward=has_rewards, group=g,
                           holes=holes, values=values, junk_of=junk)

                def ok(rs: list[dict[str, Any]], g: bool = g) -> bool:
                    lens = [_len(r) for r in rs]
                    if max(lens) == 0 or (eos == "mixed" and len(set(lens)) < 2):
                        return False
                    return not g or len({r["group"] for r in rs}) >= min(min_groups, len(rs))

                rows_s[(g, vocab)] = st.lists(row, max_size=max_batch).filter(
                    lambda rs, ok=ok: len(rs) >= min_batch and ok(rs))
    vocab_s = st.sampled_from(VOCAB_SIZES)
    extra_s = st.integers(0, 2)

    @st.composite
    def draw_example(draw) -> Example:
        cfg = draw(cfg_s)
        want_groups = has_group and (groups == "always" or (groups == "auto" and _uses_groups(boundary, cfg)))
        if boundary == "reward_norm":
            rows = draw(rows_s[want_groups])
        else:
            vocab = draw(vocab_s) if (False, VOCAB_SIZES[0]) in rows_s else None
            rows = draw(rows_s[(want_groups, vocab)])
        inputs: dict[str, np.ndarray] = {}
        variants: dict[str, dict[str, np.ndarray]] = {}
        params: dict[str, Any] = {}
        if boundary == "reward_norm":
            inputs["rewards"] = np.asarray([r[0] for r in rows], F32)
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
            extra = 0 if eos == "mixed" else draw(extra_s)
            if need_masked and not extra and len(set(lens)) < 2 and not any(_masked_inside(r) for r in rows):
                extra = 1  # every position would be valid: pad one column so there is something to perturb
            width = max(lens) + extra
            loss, attn = layout_arrays([(len(r["prompt"]), len(r["response"])) for r in rows],
                                       [[h for h, _ in r["response"]] for r in rows], width)
            for k, name in enumerate(tensors):
                port = spec.input(name)
                a = np.empty((len(rows), width) + ((vocab,) if port.kind == "vocab" else ()),
                             np.int64 if port.dtype == "int" else F32)
                for i, r in enumerate(rows):
                    cells = [t[k] for t in r["prompt"]] + [v[k] for _, v in r["response"]]
                    if cells:
                        a[i, :len(cells)] = cells
                    a[i, len(cells):] = r["pad"][k]
                inputs[name] = a
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
        if perm:
            params["perm"] = list(draw(_PERMS[len(rows)]))
        order = [p.name for p in spec.inputs]  # stable key order: the boundary's port order
        return Example(boundary, cfg, {n: inputs[n] for n in order if n in inputs}, variants, params)

    return draw_example()
