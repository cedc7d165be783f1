"""Masks must mean what they say: values at masked (padding, prompt, rejected) positions
must not change anything at valid positions, nor poison it with NaN/Inf, and padding a batch
with extra masked columns must not change the result."""

from __future__ import annotations

from typing import Literal

import numpy as np

from .base import (ACTOR, LOSS_MASKED, REL, SURFACES, Invariant, Missing, Outcome, Tolerance, diff_runs, hunted, observables,
                   resolve)

At = Literal["head", "interior", "tail", "row"]


def mask_layout(mask: np.ndarray) -> dict[str, np.ndarray]:
    """The masked positions of a [B, T] mask by where they sit in their row: `head` (before
    the row's first valid token), `interior` (between valid tokens), `tail` (after the last),
    `row` (every position of a row with no valid token)."""
    valid = mask.astype(bool)
    t = np.arange(mask.shape[1])[None, :]
    has = valid.any(axis=1, keepdims=True)
    first = np.where(has, valid.argmax(axis=1)[:, None], mask.shape[1])
    last = np.where(has, mask.shape[1] - 1 - valid[:, ::-1].argmax(axis=1)[:, None], -1)
    masked = ~valid
    return {"head": masked & has & (t < first), "interior": masked & (t > first) & (t < last),
            "tail": masked & has & (t > last), "row": masked & ~has}


def _perturbable(sc, mask: str, names: list[str] | None) -> list[str]:
    if names is not None:
        return names
    return [p.name for p in sc.spec.inputs
            if p.kind in ("token", "vocab") and p.dtype == "float" and p.mask == mask and p.name in sc.inputs]


def _spread(free: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A [B, T] position mask over a tensor's trailing axes (a vocab tensor's V values per position)."""
    return free.reshape(free.shape + (1,) * (a.ndim - free.ndim))


class _MaskFamily(Invariant):
    mask: str = "loss_mask"
    perturb: list[str] | None = None
    outputs: list[str] | None = None
    at: At | None = None  # perturb only the masked positions of this kind (default: all of them)

    def _free(self, sc) -> np.ndarray:
        m = sc.inputs[self.mask]
        free = m == 0
        return free & mask_layout(m)[self.at] if self.at and m.ndim == 2 else free

    def check(self, sc):
        out = self._known_input(sc, self.mask, "mask") + self._known_outputs(sc, self.outputs)
        out += [p for n in (self.perturb or []) for p in self._known_input(sc, n, "perturb")]
        out += [("perturb", f"the scenario gives no {n!r} input to perturb") for n in (self.perturb or [])
                if sc.spec.input(n) is not None and n not in sc.inputs]
        if self.mask not in sc.inputs:
            out.append(("mask", f"the scenario gives no {self.mask!r} input"))
        elif not (sc.inputs[self.mask] == 0).any():
            out.append(("mask", f"{self.mask!r} has no masked position to perturb: add padding or a masked token"))
        elif self.at and not self._free(sc).any():
            out.append(("at", f"{self.mask!r} has no masked position of kind {self.at!r}"))
        return out


class MaskedInvariance(_MaskFamily):
    """Changing inputs where `mask` is 0 leaves every output and gradient unchanged at
    positions where it is 1 (scalar outputs: unchanged)."""

    family = "masked_invariance"
    perturbs_masked = True
    hunt = (hunted(*LOSS_MASKED, doc="values at masked positions do not change outputs at valid positions",
                   need_masked=True),
            hunted("advantages", doc="log-probs and values at masked positions do not change valid advantages, "
                   "returns or KL", need_masked=True, min_prompt=1),
            hunted(*SURFACES, doc="logits, head outputs and values at masked positions do not change log-probs, "
                   "values, metrics or reductions at valid positions", need_masked=True),
            hunted(*ACTOR, doc="logits at prompt and padding positions do not change the response's log-probs",
                   need_masked=True, min_prompt=1))
    value: float = 7.5
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5

    def runs(self, sc):
        free = self._free(sc)
        new = dict(sc.inputs)
        for k, n in enumerate(_perturbable(sc, self.mask, self.perturb)):
            # a different bump per input, so differences of inputs (log-ratios) change too
            a = sc.inputs[n]
            bump = self.value * (k + 1) * (1 + np.arange(a.size).reshape(a.shape) % 3)
            new[n] = np.where(_spread(free, a), a + bump, a).astype(a.dtype)
        return {f"~masked:{self.mask}": (new, {})}

    def evaluate(self, obs, sc):
        base, other = obs["base"], obs[f"~masked:{self.mask}"]
        return diff_runs(sc, base, other, observables(sc, self.outputs, base), self.mask, self.atol, self.rtol,
                         label=f"when only {self.mask}==0 positions changed")


def _finite_hunts(boundaries: tuple[str, ...], what: str, masked_rows: bool = False, **draw) -> tuple:
    """One property per kind of value inserted: a reducer that multiplies by the mask fails
    NaN and Inf, a sum that overflows fails a huge finite value; kept apart, a partial fix shows."""
    kinds = (("nan", ["nan"], "NaN"), ("inf", ["inf", "-inf"], "+-Inf"), ("huge", ["3e38"], "3e38 (finite)"))
    extra = {"masked_rows": True} if masked_rows else {}
    return tuple(hunted(*boundaries, name=f"finite.{k}", body={"values": v, **extra},
                        doc=f"{label} at masked positions leaves {what} finite", need_masked=True, **draw)
                 for k, v, label in kinds)


class Finite(_MaskFamily):
    """With NaN, +-Inf (or another value of `values`) at masked positions of the inputs, every
    output and gradient is finite at valid positions: token outputs at mask 1, row outputs
    in rows with a valid token, scalars when the batch has one. A batch with no valid
    position has nothing to check."""

    family = "finite"
    perturbs_masked = True
    hunt = (*_finite_hunts(LOSS_MASKED, "valid outputs"),
            *_finite_hunts(("advantages",), "valid advantages", min_prompt=1),
            *_finite_hunts(SURFACES, "valid log-probs, values, metrics and reductions, a fully masked row's included",
                           masked_rows=True),
            *_finite_hunts(ACTOR, "the response's log-probs and entropies", min_prompt=1))
    values: list[str | float] = ["nan", "inf", "-inf"]  # YAML reads 3e38 as a number
    masked_rows: bool = False  # row outputs of rows with no valid token must be finite too (a masked mean is 0)

    def check(self, sc):
        out = super().check(sc)
        if self.mask in sc.inputs and not (sc.inputs[self.mask] == 1).any():
            out.append(("mask", f"{self.mask!r} has no valid position: nothing there to keep finite"))
        return out

    def runs(self, sc):
        free = self._free(sc)
        out = {}
        for v in self.values:
            new = dict(sc.inputs)
            for n in _perturbable(sc, self.mask, self.perturb):
                a = sc.inputs[n]
                new[n] = np.where(_spread(free, a), np.float32(float(v)), a).astype(a.dtype)
            out[f"~poison:{v}"] = (new, {})
        return out

    def evaluate(self, obs, sc):
        for v in self.values:
            run = obs[f"~poison:{v}"]
            valid = run.inputs[self.mask].astype(bool)
            rows = valid.any(axis=1) if valid.ndim == 2 else valid
            rows = np.ones_like(rows) if self.masked_rows else rows
            for name in observables(sc, self.outputs, run):
                try:
                    x = resolve(name, run)
                except Missing:
                    continue
                where = valid if x.shape == valid.shape else rows if x.shape == rows.shape else np.ones(x.shape, bool)
                bad = where & ~np.isfinite(x)
                if bad.any():
                    kinds = sorted({"NaN" if np.isnan(e) else "Inf" for e in np.asarray(x)[bad].ravel()})
                    return Outcome("violated", f"{name} is {'/'.join(kinds)} at {int(bad.sum())} valid position(s) "
                                               f"when masked inputs hold {v}", x.tolist(), "finite", None,
                                   np.argwhere(bad)[:64].tolist(), {"poison": v, "observable": name})
        return Outcome("held")


class PaddingInvariant(_MaskFamily):
    """Appending `width` masked columns to every token tensor leaves the outputs at the
    original valid positions, and every scalar output, unchanged."""

    family = "padding_invariant"
    hunt = (hunted(*(b for b in LOSS_MASKED if b != "is_correction"),
                   doc="extra masked columns leave every output unchanged", body=REL),
            hunted(*SURFACES, doc="extra masked columns leave log-probs, values, metrics and reductions unchanged",
                   body=REL),
            hunted(*ACTOR, doc="extra padding columns leave the response's log-probs unchanged", body=REL,
                   min_prompt=1))
    width: int = 2
    fill: float = 3.0
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5

    def check(self, sc):
        return self._known_input(sc, self.mask, "mask") + self._known_outputs(sc, self.outputs)

    def runs(self, sc):
        new = {}
        for n, a in sc.inputs.items():
            port = sc.spec.input(n)
            if port.kind not in ("token", "vocab"):
                new[n] = a
                continue
            fill = 0.0 if port.dtype in ("mask", "int") else self.fill  # id 0: a token every vocabulary has
            new[n] = np.concatenate([a, np.full((a.shape[0], self.width) + a.shape[2:], fill, a.dtype)], axis=1)
        return {"~padded": (new, {})}

    def evaluate(self, obs, sc):
        base = obs["base"]
        t = base.inputs[self.mask].shape[1]
        cut = lambda name, y: y[:, :t] if y.ndim == 2 and y.shape[1] == t + self.width else y  # noqa: E731
        return diff_runs(sc, base, obs["~padded"], observables(sc, self.outputs, base), self.mask,
                         self.atol, self.rtol, map_b=cut, label=f"after padding {self.width} masked columns")
