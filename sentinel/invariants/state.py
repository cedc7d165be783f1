"""No mutation: a boundary call must leave its inputs (the trainer's logged state) intact.

Catches aliasing such as slime's `k *= kl_coef` on the tensors of rollout_data["kl"]
(https://github.com/THUDM/slime/pull/2114).
"""

from __future__ import annotations

from .base import Invariant, Outcome, compare, hunted, lists


class Unmutated(Invariant):
    """After every run, each input in `inputs` (default: all) holds exactly what was sent."""

    family = "unmutated"
    hunt = (hunted("policy_loss", "kl", "is_correction", "advantages",
                   doc="the call leaves every input tensor as it was"),
            hunted("logprobs", "values", "masked_reduce",
                   doc="the call leaves the caller's logits, head outputs and values as they were"))
    inputs: list[str] | None = None

    def check(self, sc):
        return [p for n in (self.inputs or []) for p in self._known_input(sc, n, "inputs")]

    def evaluate(self, obs, sc):
        for run_name, run in obs.items():
            for name in self.inputs or list(run.inputs):
                if name not in run.inputs_after:
                    continue
                ok, diff, pos = compare(run.inputs_after[name], run.inputs[name])
                if not ok:
                    return Outcome("violated", f"run {run_name!r}: the call mutated input {name!r} in place",
                                   lists(run.inputs_after[name]), lists(run.inputs[name]), lists(diff), pos,
                                   {"run": run_name, "input": name})
        return Outcome("held")
