"""Exact expectations: an observable equals a literal or a formula over the run."""

from __future__ import annotations

from typing import Any

from . import formulas
from .base import (Invariant, Missing, Outcome, ShapeMismatch, Tolerance, compare, evaluate_expected, hunted,
                   is_extra, lists, resolve)
from .formulas import KL_FORMULA


class Close(Invariant):
    """`observable` matches `expected` (a number, nested list or numpy expression over the
    run's inputs and outputs) within atol + rtol * |expected|, optionally only where `where`
    (a mask input) is 1."""

    family = "close"
    hunt = (hunted("advantages", name="logged_kl",
                   doc="with a KL penalty (kl_coef > 0), the KL kept for logging is still the KL formula of kl_type "
                   "at valid tokens after the call (a trainer may skip the KL when kl_coef is 0)",
                   body=lambda ex: {"output": "logged_kl", "expected": KL_FORMULA[ex.config["kl_type"]],
                                    "where": "loss_mask", "atol": 1e-6, "rtol": 1e-5},
                   config={"kl_coef": [0.1, 0.05, 1.0], "reward_norm": [None], "mask_no_eos_with_zero": [False],
                           "reward_clip": [None]}, min_prompt=1),
            *formulas.HUNTS)
    output: str
    expected: Any
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5
    run: str = "base"
    where: str | None = None

    def check(self, sc):
        return self._known_outputs(sc, [self.output], "output", extras=True) + self._known_input(sc, self.where, "where") + \
            self._known_expression(sc, self.expected, self.output, self.run) + (
            [("run", f"no variant named {self.run!r}")] if self.run != "base" and self.run not in sc.variants else [])

    def grads(self, sc):
        from .base import GRAD_RE
        m = GRAD_RE.match(self.output)
        return [(m[1], m[2])] if m else []

    def extras(self, sc):
        return [self.output] if is_extra(self.output) else []

    def evaluate(self, obs, sc):
        run = obs[self.run]
        try:
            observed = resolve(self.output, run)
            expected = evaluate_expected(self.expected, run)
        except Missing as e:
            return Outcome("skipped", str(e))
        where = run.inputs[self.where] if self.where else None
        try:
            ok, diff, pos = compare(observed, expected, self.atol, self.rtol, where)
        except ShapeMismatch as e:
            return Outcome("violated", str(e), lists(observed), lists(expected))
        msg = "" if ok else f"{self.output} differs from expected at {len(pos)} position(s)"
        return Outcome("held" if ok else "violated", msg, lists(observed), lists(expected), lists(diff), pos)


class Equals(Close):
    """`observable` equals `expected` exactly (NaN equals NaN)."""

    family = "equals"
    hunt = ()  # its hunts are Close's
    atol: Tolerance = 0.0
    rtol: Tolerance = 0.0
