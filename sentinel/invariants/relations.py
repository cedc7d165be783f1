"""Relations between runs: two configurations that must agree, and a variant that must not
move what it does not touch."""

from __future__ import annotations

import numpy as np

from .. import boundaries
from .base import Invariant, Tolerance, diff_runs, hunted


class Agree(Invariant):
    """Each observable agrees between two runs (base or variants): e.g. the off-policy IS
    correction equals vanilla TIS when pi_theta == pi_old."""

    family = "agree"
    between: list[str]
    observables: list[str]
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5
    mask: str | None = "loss_mask"

    def check(self, sc):
        out = self._known_outputs(sc, self.observables, "observables")
        if len(self.between) != 2:
            out.append(("between", "name exactly two runs"))
        out += [("between", f"no variant named {r!r}") for r in self.between if r != "base" and r not in sc.variants]
        return out

    def grads(self, sc):
        from .base import GRAD_RE
        return [(m[1], m[2]) for o in self.observables if (m := GRAD_RE.match(o))]

    def evaluate(self, obs, sc):
        a, b = self.between
        return diff_runs(sc, obs[a], obs[b], self.observables, self.mask, self.atol, self.rtol,
                         label=f"between runs {a!r} and {b!r}")


ROW_SELECTORS = ("all", "has_eos", "no_eos")


class UnchangedUnder(Invariant):
    """`output` at the selected rows is the same in the base run and in `variant`
    (rows: all, has_eos, no_eos — from attention_mask — or a list of indices)."""

    family = "unchanged_under"
    hunt = (hunted("advantages", name="no_eos_isolation",
                   doc="with mask_no_eos_with_zero, a no-EOS row's reward does not move any row with EOS",
                   body={"variant": "no_eos_rewards", "output": "advantages", "rows": "has_eos"},
                   config={"mask_no_eos_with_zero": [True],
                           "reward_norm": list(boundaries.get("advantages").option("reward_norm").hunt[1:])},
                   eos="mixed", min_prompt=1, variant="no_eos_rewards"),
            hunted("reward_norm", name="masked_rows",
                   doc="a row with mask 0 (any reward, NaN included) does not move the normalised reward of kept rows",
                   body=lambda ex: {"variant": "masked_row_rewards", "output": "rewards",
                                    "rows": list(ex.params["rows"]), "mask": None},
                   variant="masked_row_rewards"))
    variant: str
    output: str
    rows: str | list[int] = "all"
    mask: str | None = "loss_mask"
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5

    def check(self, sc):
        out = self._known_outputs(sc, [self.output], "output")
        if self.variant not in sc.variants:
            out.append(("variant", f"no variant named {self.variant!r} (variants: {', '.join(sc.variants) or 'none'})"))
        if isinstance(self.rows, str) and self.rows not in ROW_SELECTORS:
            out.append(("rows", f"rows is one of {ROW_SELECTORS} or a list of row indices"))
        if isinstance(self.rows, list):
            b = sc.inputs[self.mask].shape[0] if self.mask in sc.inputs else len(next(iter(sc.inputs.values())))
            out += [("rows", f"row {r} is out of range for a batch of {b}") for r in self.rows if not -b <= r < b]
        if self.rows in ("has_eos", "no_eos") and "attention_mask" not in sc.inputs:
            out.append(("rows", f"rows: {self.rows} needs an attention_mask input"))
        return out

    def _rows(self, sc) -> np.ndarray:
        b = sc.inputs[self.mask].shape[0] if self.mask in sc.inputs else len(next(iter(sc.inputs.values())))
        if isinstance(self.rows, list):
            sel = np.zeros(b, bool)
            sel[self.rows] = True
            return sel
        if self.rows == "all":
            return np.ones(b, bool)
        no_eos = sc.inputs["attention_mask"].astype(bool).all(axis=1)  # filled the length: no EOS
        return ~no_eos if self.rows == "has_eos" else no_eos

    def evaluate(self, obs, sc):
        return diff_runs(sc, obs["base"], obs[self.variant], [self.output], self.mask, self.atol, self.rtol,
                         rows=self._rows(sc), label=f"at rows {self.rows} under variant {self.variant!r}")
