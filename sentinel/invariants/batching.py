"""Batching: how an actor schedules a batch through the model (micro-batch size, a token
budget, packing) must not change what it computes for any row."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..adapters.options import is_trainer
from .base import Invariant, Outcome, Tolerance, diff_runs, hunted, observables

# the schedule every actor has: the whole batch in one padded forward pass
PLAIN = {"micro_batch_size": None, "use_dynamic_bsz": False, "use_remove_padding": False}


class BatchingInvariant(Invariant):
    """The same input called again with the config overrides of each entry of `against`
    (other micro-batch sizes, dynamic batching to a token budget, padding removed) gives the
    same `outputs` at valid positions (mask) as the base call: a metamorphic relation. An
    actor's batching options only schedule the forward pass; each row's log-prob at position
    t is a function of that row's logits at t alone, so a row that comes back in another
    row's place, a micro-batch dropped or concatenated out of order, or a packed result put
    back at a shifted offset shows as a difference.

    Tolerance (atol 1e-5, rtol 1e-4, as for every relation between runs, base.REL): the two
    calls run the same per-position log-softmax on the same logits, but in tensors of other
    shapes (a [1, nnz, V] packed sequence, a [B_m, T, V] micro-batch), so a vectorised
    reduction may sum the V terms of a logsumexp in another order. In float32 that moves a
    result by a few units in the last place of max |logits / T| + log V: with the hunt's
    logits (|x| <= 4, T >= 0.5, V <= 5) under 10 * 2**-24 * 8 ~ 5e-6, below atol. A row swap
    or a one-token shift moves a log-prob by the difference of two drawn logit rows, on a
    0.25 grid divided by T: far above it."""

    family = "batching_invariant"
    judges_other_calls = True  # its verdict is about calls at other options, not the drawn one
    hunt = (hunted("actor_logprobs",
                   doc="log-probs and entropy do not depend on micro-batch size, dynamic batching or packing: "
                       "the drawn schedule agrees with the whole batch in one padded pass",
                   body={"against": [PLAIN]}, min_prompt=1),
            # apart, so that a target without fixed-size micro-batches still hunts the one above
            hunted("actor_logprobs", name="batching_invariant.one_row",
                   doc="the drawn schedule agrees with one row per micro-batch (packing as drawn)",
                   body={"against": [{"micro_batch_size": 1, "use_dynamic_bsz": False}]}, min_prompt=1))
    against: list[dict[str, Any]] = Field(default_factory=lambda: [dict(PLAIN)])
    outputs: list[str] | None = None
    mask: str | None = "loss_mask"
    atol: Tolerance = 1e-5
    rtol: Tolerance = 1e-4

    def check(self, sc):
        out = self._known_outputs(sc, self.outputs) + self._known_input(sc, self.mask, "mask")
        if not self.against:
            out.append(("against", "name at least one set of config overrides to call with"))
        for i, overrides in enumerate(self.against):
            if not overrides:
                out.append(("against", f"entry {i} overrides nothing: it is the base call"))
            # a trainer option (slime's context-parallel size) is judged by the target's adapter
            elif (why := sc.spec.problem({k: v for k, v in overrides.items() if not is_trainer(k)})) is not None:
                out.append(("against", f"entry {i}: {why}"))
        return out

    def runs(self, sc):
        return {f"~batching:{i}": (dict(sc.inputs), dict(o)) for i, o in enumerate(self.against)}

    def evaluate(self, obs, sc):
        base = obs["base"]
        names = observables(sc, self.outputs, base)
        for i, overrides in enumerate(self.against):
            out = diff_runs(sc, base, obs[f"~batching:{i}"], names, self.mask, self.atol, self.rtol,
                            label=f"when called with {overrides} (base config {sc.config})")
            if out.verdict != "held":
                return Outcome(out.verdict, out.message, out.observed, out.expected, out.difference, out.positions,
                               {**out.details, "against": overrides})
        return Outcome("held", details={"compared": names, "against": self.against})
