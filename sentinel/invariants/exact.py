"""Exact expectations: an observable equals a literal or a formula over the run."""

from __future__ import annotations

from typing import Any

from .. import boundaries
from .base import Invariant, Missing, Outcome, ShapeMismatch, compare, evaluate_expected, hunted, lists, resolve

KL_FORMULA = {
    "k1": "log_probs - ref_log_probs",
    "k2": "(log_probs - ref_log_probs) ** 2 / 2",
    "k3": "exp(ref_log_probs - log_probs) - 1 - (ref_log_probs - log_probs)",
    "low_var_kl": "clip(exp(ref_log_probs - log_probs) - 1 - (ref_log_probs - log_probs), -10, 10)",
}


def _mode_formula(mode: str, x: str) -> str:
    """The reference formula of loss_agg `mode` over per-token values `x` (adapters/reference.py
    `aggregate`: rows with no valid token take no part in a sequence mean)."""
    kept = f"where(loss_mask > 0, {x}, 0)"
    if mode == "token-mean":
        return f"sum({kept}) / maximum(sum(loss_mask), 1)"
    per_row = f"sum({kept}, axis=1)"
    if mode == "seq-mean-token-mean":
        per_row += " / maximum(sum(loss_mask, axis=1), 1)"
    has = "any(loss_mask > 0, axis=1)"
    return f"sum(where({has}, {per_row}, 0)) / maximum(count_nonzero({has}), 1)"


def _mode_hunts() -> tuple:
    """One property per loss_agg mode and boundary: each mode has its own formula, so a wrong
    denominator in one mode is not blurred with another's."""
    out = []
    for b, key, x in (("loss_agg", "mode", "values"), ("policy_loss", "loss_agg", "pg_loss"),
                      ("cispo_loss", "loss_agg", "pg_loss"), ("is_correction", "loss_agg", "pg_loss")):
        for mode in boundaries.LOSS_AGG:
            out.append(hunted(b, name=f"mode.{mode}", doc=f"loss_agg {mode}: the loss is the {mode} of "
                              f"{'the values' if x == 'values' else 'pg_loss'} over valid tokens",
                              body={"output": "loss", "expected": _mode_formula(mode, x), "atol": 1e-5, "rtol": 1e-4},
                              config={key: [mode]}, min_valid=1))
    return tuple(out)


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
            *_mode_hunts())
    output: str
    expected: Any
    atol: float = 1e-6
    rtol: float = 1e-5
    run: str = "base"
    where: str | None = None

    def check(self, sc):
        return self._known_outputs(sc, [self.output], "output") + self._known_input(sc, self.where, "where") + \
            self._known_expression(sc, self.expected, self.output, self.run) + (
            [("run", f"no variant named {self.run!r}")] if self.run != "base" and self.run not in sc.variants else [])

    def grads(self, sc):
        from .base import GRAD_RE
        m = GRAD_RE.match(self.output)
        return [(m[1], m[2])] if m else []

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
    atol: float = 0.0
    rtol: float = 0.0
