"""What every invariant family shares: observations, comparison, outcome.

Invariant code is pure numpy over observations. It never imports a trainer or torch: a
family may ask for extra runs (perturbed copies of the inputs) and gradients, and the
worker produces them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..errors import SentinelError

if TYPE_CHECKING:
    from ..spec import Scenario

Verdict = Literal["held", "violated", "error", "skipped"]
MAX_POSITIONS = 64  # offending positions kept per result; enough to point, small enough to read


@dataclass
class RunObservation:
    """What one boundary call returned (see the worker)."""

    inputs: dict[str, np.ndarray]  # as sent
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    requires_grad: dict[str, bool] = field(default_factory=dict)
    grads: dict[str, np.ndarray | None] = field(default_factory=dict)  # "of/wrt" -> grad (None: no path)
    inputs_after: dict[str, np.ndarray] = field(default_factory=dict)


class Missing(SentinelError):
    """An observable the target did not produce: the invariant is skipped, not failed."""


GRAD_RE = re.compile(r"^grad:(\w+)/(\w+)$")
INPUT_RE = re.compile(r"^input:(\w+)$")


def resolve(ref: str, obs: RunObservation) -> np.ndarray:
    """An observable by name: `out` (an output), `grad:out/inp` (a gradient), `input:inp`
    (the state of an input after the call)."""
    if m := GRAD_RE.match(ref):
        key = f"{m[1]}/{m[2]}"
        if key not in obs.grads:
            raise Missing(f"gradient {key} was not observed")
        g = obs.grads[key]
        return np.zeros_like(obs.inputs[m[2]]) if g is None else g
    if m := INPUT_RE.match(ref):
        return obs.inputs_after.get(m[1], obs.inputs[m[1]])
    if ref not in obs.outputs:
        raise Missing(f"the target produced no output {ref!r}")
    return obs.outputs[ref]


_EXPR_NS = {n: getattr(np, n) for n in ("exp", "log", "clip", "where", "sum", "mean", "abs", "minimum",
                                        "maximum", "zeros_like", "ones_like", "sign", "sqrt", "isfinite")}


def evaluate_expected(expected: Any, obs: RunObservation) -> np.ndarray:
    """A literal (number or nested list) or a numpy expression over the run's inputs and outputs."""
    if isinstance(expected, str):
        ns = {**_EXPR_NS, **obs.inputs, **obs.outputs}
        try:
            return np.asarray(eval(expected, {"__builtins__": {}}, ns), dtype=np.float64)  # noqa: S307 - scenario files are code
        except NameError as e:
            raise Missing(f"expression {expected!r}: {e}") from None
    return np.asarray(expected, dtype=np.float64)


def compare(observed: np.ndarray, expected: np.ndarray, atol: float = 0.0, rtol: float = 0.0,
            where: np.ndarray | None = None) -> tuple[bool, np.ndarray, list[list[int]]]:
    """NaN-aware elementwise comparison -> (all equal, observed - expected, offending positions)."""
    o = np.asarray(observed, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    try:
        e = np.broadcast_to(e, o.shape)
    except ValueError:
        raise ShapeMismatch(f"observed shape {list(o.shape)} vs expected {list(e.shape)}") from None
    with np.errstate(invalid="ignore"):
        ok = np.isclose(o, e, atol=atol, rtol=rtol, equal_nan=True)
        ok |= (o == e)  # equal infinities
        diff = o - e
    if where is not None:
        ok |= ~np.broadcast_to(np.asarray(where, bool), o.shape)
    bad = np.argwhere(~ok)
    return bool(ok.all()), diff, bad[:MAX_POSITIONS].tolist()


class ShapeMismatch(SentinelError):
    pass


@dataclass
class Outcome:
    verdict: Verdict
    message: str = ""
    observed: Any = None
    expected: Any = None
    difference: Any = None
    positions: list[list[int]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def lists(x: Any) -> Any:
    return np.asarray(x).tolist() if x is not None else None


class Invariant(BaseModel):
    """Base of every family. Subclasses are pydantic models of their YAML body."""

    model_config = ConfigDict(extra="forbid")
    family: ClassVar[str] = "?"
    doc: ClassVar[str] = ""

    def check(self, sc: "Scenario") -> list[tuple[str, str]]:
        """Static checks against the boundary: (field, message) for each problem."""
        return []

    def runs(self, sc: "Scenario") -> dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]]:
        """Extra runs this check needs: name -> (inputs, config overrides)."""
        return {}

    def grads(self, sc: "Scenario") -> list[tuple[str, str]]:
        return []

    def evaluate(self, obs: dict[str, RunObservation], sc: "Scenario") -> Outcome:
        raise NotImplementedError

    # helpers for subclasses -----------------------------------------------------------
    @staticmethod
    def _output_names(sc: "Scenario", names: list[str] | None, kinds=("token", "row", "scalar")) -> list[str]:
        return names if names is not None else [p.name for p in sc.spec.outputs if p.kind in kinds]

    @staticmethod
    def _known_outputs(sc: "Scenario", names: list[str] | None, fld: str = "outputs") -> list[tuple[str, str]]:
        out = []
        for n in names or []:
            if m := GRAD_RE.match(n):  # grad:OUT/INP: a gradient the worker can take, else never observed
                if sc.spec.output(m[1]) is None or m[2] not in sc.spec.grad_inputs:
                    out.append((fld, f"{n!r}: gradients of {sc.boundary!r} are d(output)/d(input) for inputs "
                                     f"{list(sc.spec.grad_inputs)}"))
            elif m := INPUT_RE.match(n):
                if sc.spec.input(m[1]) is None:
                    out.append((fld, f"{n!r}: boundary {sc.boundary!r} has no input {m[1]!r}"))
            elif sc.spec.output(n) is None:
                out.append((fld, f"boundary {sc.boundary!r} has no output {n!r} (outputs: {', '.join(p.name for p in sc.spec.outputs)})"))
        return out

    @staticmethod
    def _known_expression(sc: "Scenario", expected: Any, fld: str = "expected") -> list[tuple[str, str]]:
        """An `expected` expression may name the boundary's inputs and outputs and the numpy
        functions of _EXPR_NS; any other name could never be evaluated (a check that cannot fail)."""
        if not isinstance(expected, str):
            return []
        try:
            tree = ast.parse(expected, mode="eval")
        except SyntaxError as e:
            return [(fld, f"not a valid expression: {e.msg}")]
        known = set(_EXPR_NS) | {p.name for p in sc.spec.inputs} | {p.name for p in sc.spec.outputs}
        unknown = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - known)
        if not unknown:
            return []
        return [(fld, f"expression {expected!r} names {', '.join(map(repr, unknown))}: not an input or output of "
                      f"{sc.boundary!r} nor one of {', '.join(sorted(_EXPR_NS))}")]

    @staticmethod
    def _known_input(sc: "Scenario", name: str | None, fld: str) -> list[tuple[str, str]]:
        if name is not None and sc.spec.input(name) is None:
            return [(fld, f"boundary {sc.boundary!r} has no input {name!r}")]
        return []

    @staticmethod
    def _valid(sc: "Scenario", name: str, arr: np.ndarray, inputs: dict[str, np.ndarray], mask: str | None) -> np.ndarray | None:
        """Where an output's values matter: its mask (token outputs) or everywhere."""
        port = sc.spec.output(name)
        if mask and port is not None and port.kind == "token" and mask in inputs and inputs[mask].shape == arr.shape:
            return inputs[mask].astype(bool)
        return None

    def summary(self) -> dict[str, Any]:
        return {self.family: self.model_dump(exclude_defaults=True)}


def observables(sc: "Scenario", names: list[str] | None, run: RunObservation) -> list[str]:
    """Observable names to compare across runs: the given ones, else every output and gradient."""
    if names is not None:
        return names
    return [p.name for p in sc.spec.outputs if p.name in run.outputs] + [f"grad:{k}" for k in run.grads]


def diff_runs(sc: "Scenario", a: RunObservation, b: RunObservation, names: list[str], mask: str | None,
              atol: float, rtol: float, map_b=None, rows: np.ndarray | None = None, label: str = "") -> Outcome:
    """Compare observables of run `a` against run `b` (after `map_b` aligns b to a's layout),
    only at `a`'s valid positions (mask) and selected rows. The first difference wins."""
    compared = []
    for name in names:
        try:
            x = resolve(name, a)
            y = resolve(name, b)
        except Missing:
            continue
        if map_b is not None:
            y = map_b(name, y)
        where = None
        base_name = GRAD_RE.match(name)[2] if GRAD_RE.match(name) else name
        if mask and x.ndim == 2 and mask in a.inputs and a.inputs[mask].shape == x.shape and (
                sc.spec.output(base_name) is None or sc.spec.output(base_name).kind == "token"):
            where = a.inputs[mask].astype(bool)
        if rows is not None and x.ndim >= 1 and x.shape[0] == len(rows):
            sel = np.broadcast_to(rows.reshape((-1,) + (1,) * (x.ndim - 1)), x.shape)
            where = sel if where is None else (where & sel)
        try:
            ok, diff, pos = compare(y, x, atol, rtol, where)
        except ShapeMismatch as e:
            return Outcome("violated", f"{name}: {e}", lists(y), lists(x))
        compared.append(name)
        if not ok:
            return Outcome("violated", f"{name} changed {label}".strip(), lists(y), lists(x), lists(diff), pos,
                           {"observable": name})
    if not compared:
        return Outcome("skipped", "none of the observables was produced by the target: " + ", ".join(names))
    return Outcome("held", details={"compared": compared})
