"""Precision: the loss path keeps its arithmetic accuracy when the model's tensors arrive in
bf16 or fp16.

Mixed-precision training hands the loss path some tensors in a low dtype (the current policy's
log-probs from a bf16 forward) beside others kept in fp32 (rollout and reference log-probs,
advantages). A correct loss path computes in at least fp32 from there: `log_probs.float() -
old_log_probs`, not `log_probs - old_log_probs.to(log_probs.dtype)`, which rounds the fp32
operand to 8 bits of mantissa and moves the ratio by up to 2**-8 * |log p| per token.

The family makes two extra runs on the same values: `precision:DTYPE:CAST`, where the inputs named in
`cast` are handed over in DTYPE and the rest as given (fp32), and `precision:DTYPE:CAST:float64`, where the
same values (the cast ones rounded through DTYPE first) are handed over in float64. The two
differ only by the arithmetic the function performs, never by its inputs, so the difference is
bounded by the compute precision the function promises (`compute`, fp32 unless declared):

    |y_low - y_64| <= (gamma(ops) + gamma(n)) * M**2,     gamma(k) = k*u / (1 - k*u)

with u the unit roundoff of `compute` (2**-24 for fp32), `ops` the length of the longest chain
of elementary operations from an input to the output (declared; 16 by default: PPO's chain is
sub, exp, clamp, two muls, neg, max, where, div, 9 of them), n the element
count of the largest input (a reduction over n terms) and M = max(1, |inputs|, |y_64|) over
the positions that matter (each input's valid positions, the compared positions of y_64). Why:
each IEEE operation rounds with relative error <= u (the standard model, Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., §2.2); a chain of k of them has relative error <=
gamma(k) (Lemma 3.1); the loss path's terms multiply at most two bounded factors (ratio times
advantage), so each term's error is <= gamma(ops) * M**2, and a sum of n terms adds gamma(n) *
sum|t| (§4.2), divided by the count it normalises by. The float64 run's own error (u = 2**-53) is
below that bound by nine orders of magnitude. The bound is conservative (M**2 where a term is
often far smaller), and still separates the bug class: rounding one fp32 operand of magnitude M
to bf16 (u = 2**-8) moves a term of size ~1 by up to 2**-9 * M, about 1400 / M times the bound
at the defaults (ops 16, n 8); with fp16 (u = 2**-11), about 170 / M times. Scenarios keep M
where that ratio is large (the catalog's |log p| ~ 20 gives ~70x and ~9x at worst rounding).

Values on the hunt's dyadic grids are exact in bf16 and fp16, so a cast there rounds nothing:
both precision runs scale every float input by (1 + j), j in [0, 2**-5) from a fixed
low-discrepancy sequence, which keeps signs and zeros and takes the values off the low dtype's
grid.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .base import (GRAD_RE, Invariant, Missing, Outcome, ShapeMismatch, compare, hunted, lists, observables,
                   resolve)

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}
GOLDEN = (5 ** 0.5 - 1) / 2


def gamma(k: int, u: float) -> float:
    return k * u / (1 - k * u)


def off_grid(a: np.ndarray) -> np.ndarray:
    """`a` scaled by 1 + j per element, j = frac(i * golden ratio) * 2**-5: no value stays on
    a dyadic grid, none changes sign, zeros stay zero."""
    j = np.modf(np.arange(a.size, dtype=np.float64) * GOLDEN)[0].reshape(a.shape) * 2.0 ** -5
    return (a.astype(np.float64) * (1 + j)).astype(a.dtype)


class Precision(Invariant):
    """With the inputs in `cast` handed over in `dtype` (bf16, fp16), every observable stays
    within the `compute` precision's bound of the same function's float64 result on the same
    values (bound and derivation in the module docstring)."""

    family = "precision"
    judges_other_calls = True  # bf16/fp16 and float64 runs, not the fp32 call two sides are compared on
    hunt = (hunted("policy_loss", name="precision.bf16",
                   doc="with bf16 log-probs beside fp32 old log-probs and advantages, the loss is computed "
                       "at fp32 accuracy (no operand rounded to bf16)",
                   body={"dtype": "bfloat16", "cast": ["log_probs"], "observables": ["loss"]}),
            hunted("policy_loss", name="precision.fp16",
                   doc="with fp16 log-probs beside fp32 old log-probs and advantages, the loss is computed "
                       "at fp32 accuracy (no operand rounded to fp16)",
                   body={"dtype": "float16", "cast": ["log_probs"], "observables": ["loss"]}))
    dtype: Literal["bfloat16", "float16"]
    cast: list[str]
    observables: list[str] | None = None  # default: every output the target produced
    compute: Literal["float32", "float64"] = "float32"
    ops: int = 16
    mask: str | None = "loss_mask"

    @property
    def runs_named(self) -> tuple[str, str]:
        # one pair per (dtype, cast): two precision checks in a scenario must not share a run
        low = f"precision:{self.dtype}:{'+'.join(self.cast)}"
        return low, f"{low}:float64"

    def check(self, sc):
        out = self._known_outputs(sc, self.observables, "observables")
        out += [("observables", f"{o!r}: gradients are not compared across precisions")
                for o in self.observables or [] if GRAD_RE.match(o)]
        for n in self.cast:
            port = sc.spec.input(n)
            if port is None:
                out.append(("cast", f"boundary {sc.boundary!r} has no input {n!r}"))
            elif port.dtype != "float":
                out.append(("cast", f"input {n!r} is {port.dtype}, not a float tensor a model would hand over in {self.dtype}"))
        if not self.cast:
            out.append(("cast", "name at least one float input that arrives in the low dtype"))
        if self.ops < 1:
            out.append(("ops", "the chain has at least one operation"))
        return out

    def _floats(self, sc) -> list[str]:
        return [n for n in sc.inputs if (p := sc.spec.input(n)) is not None and p.dtype == "float"]

    def runs(self, sc):
        low, wide = self.runs_named
        inputs = {n: off_grid(a) if n in self._floats(sc) else a for n, a in sc.inputs.items()}
        casts_low = {n: [self.dtype] for n in self.cast if n in inputs}
        casts_wide = {n: ([self.dtype] if n in self.cast else []) + ["float64"] for n in self._floats(sc)}
        return {low: (inputs, {}, casts_low), wide: (inputs, {}, casts_wide)}

    def bound(self, sc, inputs: dict[str, np.ndarray], wide: np.ndarray, where: np.ndarray | None) -> float:
        """(gamma(ops) + gamma(n)) * M**2 over the values that matter: an input's valid positions
        (its port's mask; masked garbage never reaches a correct result) and the float64
        result where it is compared."""
        u = UNIT_ROUNDOFF[self.compute]
        vals = []
        for n in self._floats(sc):
            a, m = np.abs(np.asarray(inputs[n], np.float64)), sc.spec.input(n).mask
            if m in inputs and inputs[m].shape == a.shape:
                a = a[inputs[m].astype(bool)]
            vals.append(a[np.isfinite(a)])
        y = np.abs(np.asarray(wide, np.float64))
        y = y[np.broadcast_to(where, y.shape)] if where is not None else y
        m = max([1.0, *(float(v.max()) for v in vals if v.size), float(y[np.isfinite(y)].max(initial=0.0))])
        n = max((inputs[f].size for f in self._floats(sc)), default=1)
        return (gamma(self.ops, u) + gamma(n, u)) * m * m

    def evaluate(self, obs, sc):
        low_name, wide_name = self.runs_named
        low, wide = obs[low_name], obs[wide_name]
        compared = []
        for name in observables(sc, self.observables, low):
            try:
                y_low, y_64 = resolve(name, low), resolve(name, wide)
            except Missing:
                continue
            if GRAD_RE.match(name):
                continue
            where = self._valid(sc, name, np.asarray(y_low), low.inputs, self.mask)
            b = self.bound(sc, low.inputs, y_64, where)
            try:
                ok, diff, pos = compare(y_low, y_64, atol=b, rtol=0.0, where=where)
            except ShapeMismatch as e:
                return Outcome("violated", f"{name}: {e}", lists(y_low), lists(y_64))
            compared.append(name)
            if not ok:
                at = tuple(pos[0]) if pos and np.ndim(y_64) == len(pos[0]) else ()
                err = float(np.abs(np.asarray(diff, np.float64)[at]))
                where_txt = f" at {list(at)}" if at else ""
                return Outcome(
                    "violated",
                    f"{name} with {', '.join(self.cast)} in {self.dtype}: {float(np.asarray(y_low, np.float64)[at]):.9g}"
                    f"{where_txt}, float64 on the same values {float(np.asarray(y_64, np.float64)[at]):.9g}; error "
                    f"{err:.3g} exceeds the {self.compute} bound {b:.3g} ({err / b:.3g}x)",
                    lists(y_low), lists(y_64), lists(diff), pos,
                    {"observable": name, "bound": b, "observed_as": f"{self.dtype} run", "expected_as": "float64 run"})
        if not compared:
            return Outcome("skipped", "none of the observables was produced by the target")
        return Outcome("held", details={"compared": compared})
