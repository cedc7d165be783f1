"""One example through the target, in the worker (its forked child): the property's verdict,
and the probes a signature needs.

`check` plans the runs a property's invariant needs, calls the target through the adapter
(`sentinel.observe`, the same path `sentinel run` takes) and evaluates the invariant; a
`Checker` wraps it for one property and target with the probe `signature` asks for (the
same property on a changed example) and the replay of known findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sentinel.errors import Unsupported

from ... import strategies as S
from ...errors import SentinelError
from ...invariants import RunObservation
from ...invariants.base import Outcome
from ...observe import observe
from ...runner import plan
from ...spec import Scenario
from ..differences import deviation_for
from ..known import fitted
from ..properties import FORMULA_FAMILIES, Property
from ..signature import Signature, known_match, nonfinite, signature




class NotApplicable(SentinelError):
    """The drawn example does not meet the property's precondition (the invariant's static
    checks): rejected, never a finding."""


def scenario_for(prop: Property, ex: S.Example, overrides: dict[str, Any] | None = None):
    """The in-memory scenario of one example (what the YAML of a finding loads to)."""
    try:
        inv = prop.invariant(ex, overrides)
    except (KeyError, IndexError, TypeError, ValueError) as e:  # a parameter this example lacks, a bad override
        raise NotApplicable(f"the property does not apply to this example: {str(e).splitlines()[0]}") from None
    variants = {n: ({**ex.inputs, **ov}, {}) for n, ov in ex.variants.items()}
    sc = Scenario(id=f"hunt-{prop.name}", title=prop.doc, description="", boundary=ex.boundary, targets=["*"],
                  config=dict(ex.config), inputs=dict(ex.inputs), variants=variants, grads=[], invariants=[inv],
                  provenance=[], tags=["hunt"])
    problems = inv.check(sc)
    if problems:
        raise NotApplicable("; ".join(m for _, m in problems))
    return sc


def check(prop: Property, ex: S.Example, adapter, device, overrides: dict[str, Any] | None = None
          ) -> tuple[Outcome, dict[str, RunObservation], dict | None, Any]:
    """Evaluate one example: plan the runs its invariant needs, call the target, evaluate.
    Returns (outcome, observations by run, the function reached, the invariant). Raises
    NotApplicable, or the adapter's Unsupported, for an example that does not apply."""
    sc = scenario_for(prop, ex, overrides)
    obs, function = {}, None
    for run in plan(sc):
        o, fn = observe(adapter, device, sc.boundary, run.inputs, run.config, run.grads, run.casts, run.extras)
        # inputs come back in their own dtypes, as runner.evaluate decodes them (no copy where they
        # have it: each is already the call's own array)
        o["inputs_after"] = {n: a.astype(run.inputs[n].dtype, copy=False) for n, a in o["inputs_after"].items()}
        obs[run.name] = RunObservation(inputs=run.inputs, **o)
        function = function or fn
    inv = sc.invariants[0]
    with np.errstate(all="ignore"):
        outcome = inv.evaluate(obs, sc)
    return outcome, obs, function, inv


def observable_of(inv: Any, outcome: Outcome) -> str:
    """What failed: the outcome's observable, else the invariant's output or gradient."""
    if outcome.details.get("observable"):
        return str(outcome.details["observable"])
    if getattr(inv, "of", None) and getattr(inv, "wrt", None):
        return f"grad:{inv.of}/{inv.wrt}"
    if outcome.details.get("input"):
        return f"input:{outcome.details['input']}"
    return str(getattr(inv, "output", "") or "")


@dataclass
class Checker:
    """One property on one target (in-process adapter): checks, probes and known signatures."""

    prop: Property
    adapter: Any
    device: Any
    exclude: dict[str, list[Any]] = field(default_factory=dict)
    known: list[Signature] = field(default_factory=list)
    pin: dict[str, Any] = field(default_factory=dict)  # --config: the only choice of these keys
    deviations: dict[str, dict[str, Any]] = field(default_factory=dict)  # the adapter's declared ones
    domains: dict[str, Any] = field(default_factory=dict)  # the adapter's option_domains for this boundary
    probes: int = 0

    def check(self, ex: S.Example, overrides: dict[str, Any] | None = None):
        return check(self.prop, ex, self.adapter, self.device, overrides)

    def probe(self, ex: S.Example, overrides: dict[str, Any]) -> tuple[str, str | None]:
        """The property on a changed example: (violated | held | n/a, what failed)."""
        self.probes += 1
        try:
            outcome, _, _, inv = self.check(ex, overrides)
        except Exception:  # noqa: BLE001 - not applicable, unsupported, or the target raised: no answer
            return "n/a", None
        if outcome.verdict not in ("held", "violated"):
            return "n/a", None
        return outcome.verdict, observable_of(inv, outcome) if outcome.verdict == "violated" else None

    def choices(self) -> dict[str, list[Any]]:
        """The config choices drawn here (a pinned key has one: it cannot matter)."""
        return {k: [self.pin[k]] if k in self.pin else [v for v in vs if v not in self.exclude.get(k, [])]
                for k, vs in self.prop.config_choices(self.domains).items()}

    def deviation(self, ex: S.Example, outcome: Outcome, inv: Any, skipped: bool = False) -> str | None:
        """The declared deviation a violation of a formula property is (None: none). Only a
        property that states the reference's formula can meet a convention that departs from it.
        skipped: the one that would have been, had it applied at this checkout."""
        if self.prop.family not in FORMULA_FAMILIES or not self.deviations:
            return None
        return deviation_for(self.deviations, self.prop.boundary, observable_of(inv, outcome), ex.config, skipped)

    def known_as(self, ex: S.Example, outcome: Outcome, inv: Any) -> Signature | None:
        """The known signature a violation has (None: a new bug)."""
        if not self.known:
            return None
        return known_match(self.known, self.prop.name, self.prop.family, ex, observable_of(inv, outcome),
                           nonfinite(outcome.observed, outcome.positions), self.probe, self.choices())

    def signature(self, ex: S.Example, outcome: Outcome, inv: Any) -> Signature:
        return signature(self.prop.name, self.prop.family, ex, observable_of(inv, outcome),
                         nonfinite(outcome.observed, outcome.positions), self.choices(), self.probe)

    def replay(self, known_examples: list[dict[str, Any]]) -> list[tuple[Signature, str]]:
        """Known findings given as examples (scenario files): those this property fails on,
        as (signature, where from). An example counts for this property when its scenario
        names the property's family and it fits the property's boundary (its own boundary,
        or another whose inputs it carries: a bug in a shared reducer fails the same input
        on every boundary that reaches it), in a config the property draws."""
        out = []
        for k in known_examples:
            if k.get("families") and self.prop.family not in k["families"]:
                continue
            ex = fitted(k, self.prop.boundary)
            if ex is None or not self.prop.admits(ex.config):
                continue
            try:
                outcome, _, _, inv = self.check(ex)
            except Exception:  # noqa: BLE001 - not applicable here, or the target raised: nothing known
                continue
            if outcome.verdict == "violated":
                sig = self.signature(ex, outcome, inv)
                if sig not in self.known:
                    self.known.append(sig)
                out.append((sig, k.get("source", "")))
        return out


def unsupported_reason(e: BaseException) -> str:
    if isinstance(e, (NotApplicable, Unsupported)):
        return (str(e).splitlines()[0][:300] if str(e) else type(e).__name__)
    return f"{type(e).__name__}: {str(e)[:200]}"

