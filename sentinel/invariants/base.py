"""What every invariant family shares: observations, comparison, outcome.

Invariant code is pure numpy over observations. It never imports a trainer or torch: a
family may ask for extra runs (perturbed copies of the inputs) and gradients, and the
worker produces them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Callable, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .. import expr
from ..errors import RegistryError, SentinelError

if TYPE_CHECKING:
    from ..spec import Scenario

Verdict = Literal["held", "violated", "error", "skipped"]
# atol / rtol of every family: a finite number >= 0. NaN, infinity or a negative tolerance
# decides every comparison alike, and a quoted "1e-3" is a typo, not a number (strict).
Tolerance = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
MAX_POSITIONS = 64  # offending positions kept per result; enough to point, small enough to read


@dataclass
class RunObservation:
    """What one boundary call returned (see the worker)."""

    inputs: dict[str, np.ndarray]  # as sent
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    requires_grad: dict[str, bool] = field(default_factory=dict)
    grads: dict[str, np.ndarray | None] = field(default_factory=dict)  # "of/wrt" -> grad (None: no path)
    inputs_after: dict[str, np.ndarray] = field(default_factory=dict)
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # only those a scenario names (is_extra)


class Missing(SentinelError):
    """An observable the target did not produce: the invariant is skipped, not failed."""


GRAD_RE = re.compile(r"^grad:(\w+)/(\w+)$")
INPUT_RE = re.compile(r"^input:(\w+)$")
# A value beside the boundary's canonical outputs, named by sentinel/adapters/observables.py:
# what the trainer's function returned (`returned` for a lone tensor, `returned:metrics.clipfrac`)
# or changed on its args/config object (`config:kl_coef`). Target-specific: a scenario may pin one, and where a
# target (or a version) has no such value the check is skipped, never held. A config attribute the call
# left as it was is observed, not missing (`config:X` 0.0, `config:X.value` the value it kept:
# observables.Watch): only an attribute the watched object lacks, or no watched object, is absent.
# Also a local a trainer function held at its return (`local:avg_seq_kl`, adapters.frames) and the
# gradient of the loss it returned where that loss is no canonical output (`loss_grad:log_probs`).
EXTRA_PREFIXES = ("returned:", "config:", "local:", "loss_grad:")


def is_extra(observable: str) -> bool:
    return observable == "returned" or observable.startswith(EXTRA_PREFIXES)


def resolve(ref: str, obs: RunObservation) -> np.ndarray:
    """An observable by name: `out` (an output), `grad:out/inp` (a gradient), `input:inp`
    (the state of an input after the call), `returned:path` / `config:attr` (an extra)."""
    if m := GRAD_RE.match(ref):
        key = f"{m[1]}/{m[2]}"
        if key not in obs.grads:
            raise Missing(f"gradient {key} was not observed")
        g = obs.grads[key]
        return np.zeros_like(obs.inputs[m[2]]) if g is None else g
    if m := INPUT_RE.match(ref):
        return obs.inputs_after.get(m[1], obs.inputs[m[1]])
    if is_extra(ref):
        if ref not in obs.extras:
            raise Missing(f"the target returned no {ref!r}")
        return obs.extras[ref]
    if ref not in obs.outputs:
        raise Missing(f"the target produced no output {ref!r}")
    return obs.outputs[ref]


def evaluate_expected(expected: Any, obs: RunObservation) -> np.ndarray:
    """A literal (number or nested list) or an expression (sentinel.expr) over the run's inputs
    and outputs."""
    if isinstance(expected, str):
        try:
            return expr.evaluate(expected, {**obs.inputs, **obs.outputs})
        except expr.UnknownName as e:
            raise Missing(f"expression {expected!r}: {e}") from None
    return np.asarray(expected, dtype=np.float64)


def declared_shape(sc: "Scenario", ref: str, run: str = "base") -> tuple[int, ...] | None:
    """The shape an observable must have on a run: token outputs [B, T], row outputs [B],
    scalars (), gradients and inputs the shape of their input; None where unknown."""
    inputs = sc.variants[run][0] if run in sc.variants else sc.inputs
    if m := GRAD_RE.match(ref):
        return inputs[m[2]].shape if m[2] in inputs else None
    if m := INPUT_RE.match(ref):
        return inputs[m[1]].shape if m[1] in inputs else None
    port = sc.spec.output(ref)
    token = next((a.shape for n, a in inputs.items() if sc.spec.input(n) and sc.spec.input(n).kind == "token"), None)
    rows = next((a.shape for n, a in inputs.items() if sc.spec.input(n) and sc.spec.input(n).kind == "row"), None)
    if port is None:
        return None
    if port.kind == "scalar":
        return ()
    if port.kind == "token":
        return token
    return rows if rows is not None else token[:1] if token is not None else None


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
    if where is not None:  # a [B, T] mask over [B, T, ...] values (a gradient of logits): every trailing entry
        w = np.asarray(where, bool)
        if w.ndim < o.ndim and w.shape == o.shape[:w.ndim]:
            w = w.reshape(w.shape + (1,) * (o.ndim - w.ndim))
        ok |= ~np.broadcast_to(w, o.shape)
    bad = np.argwhere(~ok)
    return bool(ok.all()), diff, bad[:MAX_POSITIONS].tolist()


class ShapeMismatch(SentinelError):
    pass


def _short(x: Any, n: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= n else r[:n - 3] + "..."


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


REGISTRY: dict[str, type["Invariant"]] = {}  # YAML key -> family; filled as the family modules load

# Two runs of float code may sum in a different order (a permuted batch, padded columns):
# relations between runs get this much slack. Hunted values are drawn on dyadic grids, so sums
# of inputs are exact; only transcendental results (exp, log) carry rounding.
REL = {"atol": 1e-5, "rtol": 1e-4}
# token boundaries whose inputs live under loss_mask: the mask families hunt on all of them
LOSS_MASKED = ("opsm_mask", "policy_loss", "cispo_loss", "gspo_kl", "kl", "gae", "is_correction", "loss_agg")
# the surfaces beside the loss (log-probs from logits, the critic's values, logged metrics, masked
# reductions): the generic families hunt on each of them too
SURFACES = ("logprobs", "values", "metrics", "masked_reduce")
# the actor's batch-to-log-probs method: drawn with a prompt token in front of every response, since a
# real actor scores token t from position t - 1 and a sequence's first token has none
ACTOR = ("actor_logprobs",)


@dataclass(frozen=True)
class Hunted:
    """A `sentinel hunt` property of a family, declared beside the family: on each of
    `boundaries`, examples drawn with `draw` (keyword arguments of strategies.examples) are
    checked with the invariant whose YAML body is `body` (a dict, or a function of the drawn
    example). Its name is `BOUNDARY.NAME`, NAME defaulting to the family."""

    boundaries: tuple[str, ...]
    doc: str
    body: dict[str, Any] | Callable[[Any], dict[str, Any]] | None = None
    name: str = ""
    draw: dict[str, Any] = field(default_factory=dict)


def hunted(*boundaries: str, doc: str, body=None, name: str = "", **draw: Any) -> Hunted:
    return Hunted(boundaries, doc, body, name, draw)


class Invariant(BaseModel):
    """Base of every family. Subclasses are pydantic models of their YAML body."""

    model_config = ConfigDict(extra="forbid")
    family: ClassVar[str] = "?"
    doc: ClassVar[str] = ""
    hunt: ClassVar[tuple[Hunted, ...]] = ()  # its `sentinel hunt` properties
    # it perturbs masked positions itself, and its `at` field restricts which kind: a hunt
    # finding's signature probes each kind through `at` (sentinel/hunt/signature.py)
    perturbs_masked: ClassVar[bool] = False
    # its verdict is about calls other than the drawn one (another dtype): it cannot explain a
    # difference between two sides called on the drawn input (the differential hunt skips it)
    judges_other_calls: ClassVar[bool] = False

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A class that names its own `family` is registered: a new family is one new class."""
        super().__pydantic_init_subclass__(**kwargs)
        if "family" in cls.__dict__:
            if cls.family in REGISTRY:
                raise RegistryError(f"invariant family {cls.family!r} is defined twice")
            REGISTRY[cls.family] = cls

    def check(self, sc: "Scenario") -> list[tuple[str, str]]:
        """Static checks against the boundary: (field, message) for each problem."""
        return []

    def runs(self, sc: "Scenario") -> dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]]:
        """Extra runs this check needs: name -> (inputs, config overrides)."""
        return {}

    def grads(self, sc: "Scenario") -> list[tuple[str, str]]:
        return []

    def extras(self, sc: "Scenario") -> list[str]:
        """The extras (is_extra) this check reads: the worker sends back only those."""
        return []

    def evaluate(self, obs: dict[str, RunObservation], sc: "Scenario") -> Outcome:
        raise NotImplementedError

    # helpers for subclasses -----------------------------------------------------------
    @staticmethod
    def _known_outputs(sc: "Scenario", names: list[str] | None, fld: str = "outputs",
                       extras: bool = False) -> list[tuple[str, str]]:
        """Problems with the observables `names`; `extras`: the family reads a target's extras
        (it lists them in `extras()`, so the worker sends them back); elsewhere one is refused."""
        out = []
        for n in names or []:
            if m := GRAD_RE.match(n):  # grad:OUT/INP: a gradient the worker can take, else never observed
                if sc.spec.output(m[1]) is None or m[2] not in sc.spec.differentiable:
                    out.append((fld, f"{n!r}: gradients of {sc.boundary!r} are d(output)/d(input) for inputs "
                                     f"{list(sc.spec.differentiable)}"))
            elif m := INPUT_RE.match(n):
                if sc.spec.input(m[1]) is None:
                    out.append((fld, f"{n!r}: boundary {sc.boundary!r} has no input {m[1]!r}"))
            elif is_extra(n):  # a target's own value: known only at run time (skipped where absent)
                if not extras:
                    out.append((fld, f"{n!r}: a target's extra is read by equals and close only"))
                elif n.endswith(":"):
                    out.append((fld, f"{n!r}: name the value after the colon (e.g. returned:metrics.clipfrac)"))
            elif sc.spec.output(n) is None:
                out.append((fld, f"boundary {sc.boundary!r} has no output {n!r} (outputs: {', '.join(p.name for p in sc.spec.outputs)})"))
        return out

    @staticmethod
    def _known_expression(sc: "Scenario", expected: Any, observable: str | None = None, run: str = "base",
                          fld: str = "expected") -> list[tuple[str, str]]:
        """`expected` must be evaluable on every target: an expression in the language of
        sentinel.expr naming only the boundary's inputs and outputs (a typo would skip the
        check forever), or a literal whose shape fits the observable's declared shape."""
        want = declared_shape(sc, observable, run) if observable else None
        if not isinstance(expected, str):
            try:
                lit = np.asarray(expected, dtype=np.float64)
                if expected is None:
                    raise TypeError
            except (TypeError, ValueError, OverflowError):
                return [(fld, f"a literal is a number or a nested list of numbers, not {_short(expected)}")]
            if want is not None:
                try:
                    fits = np.broadcast_shapes(lit.shape, want) == tuple(want)
                except ValueError:
                    fits = False
                if not fits:
                    return [(fld, f"a literal of shape {list(lit.shape)} cannot match {observable!r}, "
                                  f"whose shape here is {list(want)}")]
            return []
        names = {p.name for p in sc.spec.inputs} | {p.name for p in sc.spec.outputs}
        inputs = sc.variants[run][0] if run in sc.variants else sc.inputs
        sample = {**inputs, **{p.name: np.zeros(s) for p in sc.spec.outputs
                               if (s := declared_shape(sc, p.name, run)) is not None}}
        try:
            expr.check(expected, names, sample)
        except expr.UnknownName as e:
            return [(fld, f"expression {_short(expected)} {e} of boundary {sc.boundary!r}")]
        except expr.ExprError as e:
            return [(fld, f"expression {_short(expected)}: {e}")]
        return []

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


# what a relational family's observed / expected values are: two runs of the target, not a
# value and its expectation (renderers read these labels from the result's details)
RUN_LABELS = {"observed_as": "variant run", "expected_as": "base run"}


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
            return Outcome("violated", f"{name}: {e}", lists(y), lists(x), details=dict(RUN_LABELS))
        compared.append(name)
        if not ok:
            at = tuple(pos[0]) if pos and np.ndim(x) == len(pos[0]) else ()
            was, now = np.asarray(x, np.float64)[at], np.asarray(y, np.float64)[at]
            where = f" at {list(at)}" if at else ""
            # name both runs: "observed nan, expected 0.0" would call the base run's NaN the expectation
            return Outcome("violated", f"{name} changed {label}: {now:.6g}{where} in that run, {was:.6g} in the base run",
                           lists(y), lists(x), lists(diff), pos, {"observable": name, **RUN_LABELS})
    if not compared:
        return Outcome("skipped", "none of the observables was produced by the target: " + ", ".join(names))
    return Outcome("held", details={"compared": compared})
