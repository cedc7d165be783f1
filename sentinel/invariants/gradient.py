"""Gradient flow: the gradient of a loss has the stated form; correction weights carry none; a
straight-through estimator has one estimator's value and another's gradient.

The off-policy IS correction (https://github.com/THUDM/slime/pull/2084) multiplies the
policy gradient by clip(pi_theta / pi_rollout); that weight must be detached so the gradient
flows only through log pi.
"""

from __future__ import annotations

from typing import Any

from .base import (REL, Invariant, Missing, Outcome, ShapeMismatch, Tolerance, compare, evaluate_expected, hunted,
                   lists, resolve)
from .formulas import KL_FORMULA


def _cispo_gradient(ex) -> dict[str, Any]:
    lo, hi = 1 - ex.config["eps_clip"], 1 + ex.config["eps_clip_high"]
    return {"of": "loss", "wrt": "log_probs", "where": "loss_mask",
            "expected": (f"-clip(exp(log_probs - old_log_probs), {lo!r}, {hi!r}) * advantages * loss_mask"
                         " / sum(loss_mask)")}


def _ppo_gradient(ex) -> dict[str, Any]:
    """-ratio * A / N where the unclipped branch is the one PPO keeps (inside the clip range,
    or outside it on the side that does not help), and not capped by the dual clip."""
    eps, high, c = ex.config["eps_clip"], ex.config["eps_clip_high"], ex.config["eps_clip_c"]
    lo, hi = 1 - eps, 1 + (eps if high is None else high)
    r = "exp(log_probs - old_log_probs)"
    kept = (f"(({r} >= {lo!r}) & ({r} <= {hi!r}) | (advantages > 0) & ({r} < {lo!r})"
            f" | (advantages < 0) & ({r} > {hi!r}))")
    if c is not None:
        kept += f" & ~((advantages < 0) & ({r} > {c!r}))"
    return {"of": "loss", "wrt": "log_probs", "where": "loss_mask",
            "expected": f"-{r} * advantages * loss_mask / sum(loss_mask) * ({kept})"}


class Gradient(Invariant):
    """d(of)/d(wrt) equals `expected` (literal or numpy expression over the run)."""

    family = "gradient"
    hunt = (hunted("policy_loss", doc="PPO's gradient is -ratio * A / N at every valid token the clip keeps, "
                   "0 where it binds", body=_ppo_gradient,
                   config={"loss_agg": ["token-mean"], "importance_sampling_level": ["token"],
                           "use_decoupled_loss": [False]}),  # on-policy: no behaviour weight (AReaL's decoupled loss)
            hunted("cispo_loss", doc="CISPO's gradient flows through log pi only: -sg(clip(ratio)) * A / N at "
                   "every valid token", body=_cispo_gradient,
                   config={"loss_agg": ["token-mean"], "use_decoupled_loss": [False]}),
            hunted("is_correction", doc="off-policy IS: d loss / d log pi = -w * A / N (the weight is a constant)",
                   body={"of": "loss", "wrt": "log_probs", "where": "loss_mask",
                         "expected": "-weights * advantages * loss_mask / sum(loss_mask)"},
                   config={"method": ["off_policy_is"], "loss_agg": ["token-mean"]}))
    of: str
    wrt: str
    expected: Any
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5
    where: str | None = None
    run: str = "base"

    def check(self, sc):
        out = self._known_outputs(sc, [self.of], "of") + self._known_input(sc, self.where, "where")
        out += self._known_expression(sc, self.expected, f"grad:{self.of}/{self.wrt}", self.run)
        if self.wrt not in sc.spec.grad_inputs:
            out.append(("wrt", f"gradients of {sc.boundary!r} are taken w.r.t. {list(sc.spec.grad_inputs)}"))
        return out

    def grads(self, sc):
        return [(self.of, self.wrt)]

    def evaluate(self, obs, sc):
        run = obs[self.run]
        key = f"{self.of}/{self.wrt}"
        if key not in run.grads:
            return Outcome("skipped", f"gradient {key} was not observed")
        g = run.grads[key]
        if g is None:
            return Outcome("violated", f"{self.of} has no gradient path to {self.wrt}", None, lists(self.expected))
        try:
            expected = evaluate_expected(self.expected, run)
            ok, diff, pos = compare(g, expected, self.atol, self.rtol, run.inputs[self.where] if self.where else None)
        except Missing as e:
            return Outcome("skipped", str(e))
        except ShapeMismatch as e:
            return Outcome("violated", str(e), lists(g), lists(self.expected))
        return Outcome("held" if ok else "violated", "" if ok else f"d{self.of}/d{self.wrt} differs from the stated form",
                       lists(g), lists(expected), lists(diff), pos)


class Detached(Invariant):
    """`output` carries no gradient: it does not require grad, and d(sum output)/d(wrt) is 0."""

    family = "detached"
    hunt = (hunted("is_correction", doc="the IS correction weight carries no gradient", body={"output": "weights"}),)
    output: str
    wrt: str | None = None

    def _wrt(self, sc) -> str | None:
        return self.wrt or (sc.spec.grad_inputs[0] if sc.spec.grad_inputs else None)

    def check(self, sc):
        out = self._known_outputs(sc, [self.output], "output")
        if self._wrt(sc) not in sc.spec.grad_inputs:
            out.append(("wrt", f"boundary {sc.boundary!r} takes no gradient w.r.t. {self._wrt(sc)!r}"))
        return out

    def grads(self, sc):
        return [(self.output, self._wrt(sc))]

    def evaluate(self, obs, sc):
        run = obs["base"]
        if self.output not in run.outputs:
            return Outcome("skipped", f"the target produced no output {self.output!r}")
        key = f"{self.output}/{self._wrt(sc)}"
        g = run.grads.get(key)
        rg = run.requires_grad.get(self.output, False)
        leaked = g is not None and bool((abs(g) > 0).any())
        details = {"requires_grad": rg}
        if not rg and not leaked:
            return Outcome("held", "", details=details)
        import numpy as np
        pos = np.argwhere(np.abs(g) > 0)[:64].tolist() if g is not None else []
        return Outcome("violated", f"{self.output} is attached to the graph: gradient flows through it into {self._wrt(sc)}",
                       lists(g) if g is not None else "requires_grad", 0.0, lists(g), pos, details)


def _straight_through_kl(ex) -> dict[str, Any]:
    """kl_type `k1+` / `k3+`: the value of k1 / k3 (the name without its +), the gradient of k2."""
    return {"output": "kl", "value": KL_FORMULA[ex.config["kl_type"][:-1]], "wrt": "log_probs",
            "gradient": "log_probs - ref_log_probs", "where": "loss_mask", **REL}


class StraightThrough(Invariant):
    """A straight-through estimator: `output` has the value `value`, and d(sum output)/d(wrt)
    equals `gradient` (another estimator's), both compared where `where` is 1."""

    family = "straight_through"
    hunt = (hunted("kl", doc="a straight-through KL (kl_type k1+ / k3+, verl PR 2953) has the value of k1 / k3 and "
                   "the gradient of k2: d kl / d log pi = log pi - log ref at every valid token",
                   body=_straight_through_kl, config={"kl_type": ["k1+", "k3+"]}),)
    output: str
    value: Any
    gradient: Any
    wrt: str
    where: str | None = None
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5

    def check(self, sc):
        grad = f"grad:{self.output}/{self.wrt}"
        out = self._known_outputs(sc, [self.output, grad], "output") + self._known_input(sc, self.where, "where")
        return (out + self._known_expression(sc, self.value, self.output, fld="value")
                + self._known_expression(sc, self.gradient, grad, fld="gradient"))

    def grads(self, sc):
        return [(self.output, self.wrt)]

    def evaluate(self, obs, sc):
        run = obs["base"]
        key = f"{self.output}/{self.wrt}"
        where = run.inputs[self.where] if self.where else None
        try:
            observed = resolve(self.output, run)
            if key not in run.grads:
                return Outcome("skipped", f"gradient {key} was not observed")
            value, gradient = evaluate_expected(self.value, run), evaluate_expected(self.gradient, run)
            ok_v, diff_v, pos_v = compare(observed, value, self.atol, self.rtol, where)
            if run.grads[key] is None:
                return Outcome("violated", f"{self.output} has no gradient path to {self.wrt}", None, lists(gradient))
            ok_g, diff_g, pos_g = compare(run.grads[key], gradient, self.atol, self.rtol, where)
        except Missing as e:
            return Outcome("skipped", str(e))
        except ShapeMismatch as e:
            return Outcome("violated", str(e))
        if not ok_v:
            return Outcome("violated", f"{self.output}'s value differs from the estimator it stands for",
                           lists(observed), lists(value), lists(diff_v), pos_v)
        if not ok_g:
            return Outcome("violated", f"d{self.output}/d{self.wrt} differs from the gradient it borrows",
                           lists(run.grads[key]), lists(gradient), lists(diff_g), pos_g)
        return Outcome("held")
