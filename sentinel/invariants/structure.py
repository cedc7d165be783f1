"""Structure of a batch: sequence-level decisions are uniform over a sequence, rows are
independent of their order, and groups do not leak into each other."""

from __future__ import annotations

import numpy as np

from .base import (ACTOR, LOSS_MASKED, REL, SURFACES, Invariant, Missing, Outcome, Tolerance, diff_runs, hunted, lists,
                   observables, resolve)


def _perm_body(ex) -> dict:
    return {"perm": list(ex.params["perm"]), **REL}


class SequenceUniform(Invariant):
    """`output` takes one value over the valid tokens of each sequence: a sequence-level
    decision (OPSM rejection, GSPO KL) must not be made token by token
    (https://github.com/THUDM/slime/pull/1917). `per_sequence` names inputs the claim
    assumes are one value per sequence: GSPO's clipped loss is uniform only where the
    advantage is (arXiv 2507.18071 eq. 5-7: one A_i per response); with per-token advantages
    it varies token by token, correctly, so such an input is outside the claim."""

    family = "sequence_uniform"
    hunt = (hunted("opsm_mask", doc="the OPSM decision is one per sequence, never token by token",
                   body={"output": "opsm_mask"}),
            hunted("policy_loss", doc="GSPO (importance_sampling_level sequence): with one advantage per sequence, "
                   "every token of it gets the same clipped loss",
                   body={"output": "pg_loss", "atol": 1e-6, "per_sequence": ["advantages"]},
                   config={"importance_sampling_level": ["sequence"], "use_decoupled_loss": [False]},  # no
                   seq_advantages=True),  # per-token behaviour weight (AReaL's decoupled loss multiplies one in)
            hunted("gspo_kl", doc="the GSPO sequence KL is one value per sequence",
                   body={"output": "seq_kl", "atol": 1e-6}))
    output: str
    mask: str = "loss_mask"
    run: str = "base"
    atol: Tolerance = 0.0
    per_sequence: list[str] = []

    def check(self, sc):
        out = self._known_outputs(sc, [self.output], "output") + self._known_input(sc, self.mask, "mask")
        inputs = sc.variants[self.run][0] if self.run in sc.variants else sc.inputs
        for name in self.per_sequence:
            out += self._known_input(sc, name, "per_sequence")
            a, m = inputs.get(name), inputs.get(self.mask)
            if a is None or m is None or a.shape != m.shape:
                continue
            varying = [b for b in range(a.shape[0]) if np.unique(a[b][m[b].astype(bool)], equal_nan=True).size > 1]
            if varying:
                out.append(("per_sequence", f"{name} varies within the valid tokens of row(s) {varying[:8]}: the "
                                            f"claim is for one {name} value per sequence"))
        return out

    def evaluate(self, obs, sc):
        run = obs[self.run]
        try:
            x = resolve(self.output, run)
        except Missing as e:
            return Outcome("skipped", str(e))
        m = run.inputs[self.mask].astype(bool)
        expected = np.array(x, dtype=np.float64)
        positions = []
        for b in range(x.shape[0]):
            vals = x[b][m[b]]
            if vals.size == 0:
                continue
            # the sequence's decision is its most common value; the rest are offending tokens
            uniq, counts = np.unique(vals, return_counts=True)
            mode = uniq[np.argmax(counts)] if len(uniq) > 1 else uniq[0]
            expected[b][m[b]] = mode
            for t in np.flatnonzero(m[b]):
                if abs(x[b, t] - mode) > self.atol:
                    positions.append([b, int(t)])
        if not positions:
            return Outcome("held", observed=lists(x))
        return Outcome("violated", f"{self.output} differs within a sequence at {len(positions)} valid token(s)",
                       lists(x), lists(expected), lists(x - expected), positions[:64])


class PermutationEquivariant(Invariant):
    """Reordering the rows of the batch reorders the outputs the same way; scalar outputs
    do not change."""

    family = "permutation_equivariant"
    hunt = (hunted(*LOSS_MASKED, doc="permuting rows permutes the outputs; scalars do not change", body=_perm_body,
                   min_batch=2, perm=True),
            hunted("advantages", doc="permuting rows (and their group ids) permutes the advantages", body=_perm_body,
                   min_batch=2, perm=True, min_prompt=1),
            hunted("reward_norm", doc="permuting rows (and their group ids) permutes the normalised rewards",
                   body=_perm_body, min_batch=2, perm=True),
            hunted(*SURFACES, doc="permuting rows permutes log-probs, values and row reductions; metrics and "
                   "batch reductions do not change", body=_perm_body, min_batch=2, perm=True),
            hunted(*ACTOR, doc="rows come back in their order: permuting the batch's rows permutes the log-probs "
                   "and entropies the same way, whatever the batching", body=_perm_body, min_batch=2, perm=True,
                   min_prompt=1))
    outputs: list[str] | None = None
    perm: list[int] | None = None
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5

    def _perm(self, sc) -> np.ndarray:
        b = next(a.shape[0] for n, a in sc.inputs.items() if sc.spec.input(n).kind != "scalar")
        return np.asarray(self.perm if self.perm is not None else list(range(b))[::-1])

    def check(self, sc):
        out = self._known_outputs(sc, self.outputs)
        b = next(a.shape[0] for n, a in sc.inputs.items() if sc.spec.input(n).kind != "scalar")
        if self.perm is not None and sorted(self.perm) != list(range(b)):
            out.append(("perm", f"not a permutation of range({b})"))
        elif b < 2:
            out.append(("", "needs at least two rows"))
        return out

    def runs(self, sc):
        p = self._perm(sc)
        return {"~permuted": ({n: (a[p] if a.ndim else a) for n, a in sc.inputs.items()}, {})}

    def evaluate(self, obs, sc):
        p = self._perm(sc)
        inv = np.argsort(p)
        base = obs["base"]
        unperm = lambda name, y: y[inv] if y.ndim and y.shape[0] == len(p) else y  # noqa: E731
        return diff_runs(sc, base, obs["~permuted"], observables(sc, self.outputs, base), None,
                         self.atol, self.rtol, map_b=unperm, label=f"under row permutation {p.tolist()}")


class GroupIsolation(Invariant):
    """Changing `perturb` (default: rewards) in one group leaves the outputs of every other
    group unchanged (GRPO statistics are per group)."""

    family = "group_isolation"
    hunt = (hunted("advantages", doc="with per-group statistics only, one group's rewards do not move another "
                   "group's advantages", body=dict(REL),
                   config={"estimator": ["grpo", "reinforce_plus_plus_baseline", "gae"],
                           "reward_norm": [None, {"mean_level": "group", "std_level": "group"},
                                           {"mean_level": "group", "std_level": None}],
                           "normalize_advantages": [False], "adv_norm": [None]},  # batch whitening mixes groups
                   groups="always", min_groups=2, min_batch=2, min_prompt=1),
            hunted("reward_norm", doc="group-level normalisation: one group's rewards do not move another group's",
                   body={"output": "rewards", "mask": None, **REL},
                   config={"mean_level": ["group"], "std_level": ["group", None]}, groups="always", min_groups=2,
                   min_batch=2))
    output: str = "advantages"
    group: str = "group"
    perturb: str = "rewards"
    delta: float = 10.0
    mask: str | None = "loss_mask"
    atol: Tolerance = 1e-6
    rtol: Tolerance = 1e-5

    def check(self, sc):
        out = self._known_outputs(sc, [self.output], "output") + self._known_input(sc, self.group, "group")
        out += self._known_input(sc, self.perturb, "perturb")
        if sc.spec.input(self.perturb) is not None and self.perturb not in sc.inputs:
            out.append(("perturb", f"the scenario gives no {self.perturb!r} input to perturb"))
        if self.group not in sc.inputs:
            out.append(("group", f"the scenario gives no {self.group!r} input"))
        elif len(np.unique(sc.inputs[self.group])) < 2:
            out.append(("group", "needs at least two groups"))
        return out

    def _target_group(self, sc):
        return sc.inputs[self.group][0]

    def runs(self, sc):
        g = sc.inputs[self.group] == self._target_group(sc)
        new = dict(sc.inputs)
        a = sc.inputs[self.perturb]
        bump = self.delta * (1 + np.arange(len(g)))
        new[self.perturb] = np.where(g.reshape((-1,) + (1,) * (a.ndim - 1)), a + bump.reshape((-1,) + (1,) * (a.ndim - 1)), a).astype(a.dtype)
        return {"~group": (new, {})}

    def evaluate(self, obs, sc):
        others = sc.inputs[self.group] != self._target_group(sc)
        return diff_runs(sc, obs["base"], obs["~group"], [self.output], self.mask, self.atol, self.rtol, rows=others,
                         label=f"in other groups when only group {self._target_group(sc)}'s {self.perturb} changed")
