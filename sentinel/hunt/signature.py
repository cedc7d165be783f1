"""Finding signatures: when two counterexamples are one bug.

A signature is (property, observable, the config choices that matter, position class).
Two findings with one signature are one bug: after a finding the hunt goes on with its
signature excluded, and `--known` excludes signatures from the start, so a known open bug
cannot hide a second one on the same property.

- observable: what differs or fails (`loss`, `grad:loss/log_probs`, `input:ref_log_probs`,
  `exception` for a differential side that raises).
- config: each config key whose other choices make the failure go away, with the classes of
  the choices under which it persists (`canonical`: a name, a bool, null, or a number's
  sign: `=0`, `>0`, `<0`), found by trying each other class of each key alone; a key whose
  every class fails is left out (it does not matter). Classes, not values: whether a
  threshold of 0.2 or 0.28 still fails depends on the values drawn, not on the bug, so the
  same bug gets the same signature at two revisions and two seeds; a coefficient at 0 (a
  term turned off) and a mode are what a bug can need.
- position class: which masked positions the failure needs, from the layout of each row's
  loss mask (`masked-head` before its first valid token, `masked-interior` between valid
  tokens, `masked-tail` after the last, `masked-row` a row with no valid token), plus
  `group-boundary` (the failure needs two groups) and `non-finite` (the failing value is
  NaN / Inf). "Needs" is tested: for a family that perturbs masked positions
  (`perturbs_masked`: masked_invariance, finite) by perturbing only one class; otherwise by setting that
  class's values to 0 or making its positions valid (head / interior / tail: the failure
  needs the values there, or the masked layout itself), or putting a valid row in place of
  each fully masked row (the batch keeps its size: "needs a masked row" is not "needs two rows").

Pure numpy over examples; the caller supplies `probe`, which evaluates a changed example.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

import numpy as np

from ..invariants import REGISTRY
from ..invariants.masking import mask_layout

LAYOUT = ("masked-head", "masked-interior", "masked-tail", "masked-row")
GROUP_BOUNDARY, NON_FINITE = "group-boundary", "non-finite"
# the `at` value of a masking family for each layout class
AT = {f"masked-{k}": k for k in ("head", "interior", "tail", "row")}
DIFFERENTIAL = "differential"  # a differential hunt's family: two sides differ

# probe(example, invariant-body overrides) -> (verdict, what failed): "violated" | "held" | "n/a";
# what failed is an observable, or a tuple of them (a differential probe: every one that differs)
Probe = Callable[[Any, dict[str, Any]], tuple[str, Any]]


def perturbs(family: str) -> bool:
    """The family perturbs masked positions itself (`Invariant.perturbs_masked`): its `at`
    field restricts where."""
    cls = REGISTRY.get(family)
    return bool(cls is not None and cls.perturbs_masked)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def canonical(value: Any) -> str:
    """A config value's class in a signature (see the module docstring): a name as is, a
    bool / null as JSON, a number by its sign; a class label is its own class."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):
        return _key(value)
    if isinstance(value, numbers.Real):  # numpy's scalars too
        return "=0" if value == 0 else ">0" if value > 0 else "<0"
    return _key(value)


@dataclass(frozen=True)
class Signature:
    property: str
    observable: str
    config: tuple[tuple[str, tuple[str, ...]], ...] = ()  # key -> the classes (`canonical`) it persists under
    position: tuple[str, ...] = ()

    @classmethod
    def make(cls, prop: str, observable: str, config: dict[str, list[Any]], position: Iterable[str]) -> "Signature":
        """`config`: key -> choices or their classes (a signature read back, or an older
        one's values: each becomes its class)."""
        return cls(prop, observable, tuple(sorted((k, tuple(sorted({canonical(v) for v in vs})))
                                                  for k, vs in config.items())), tuple(sorted(set(position))))

    def admits(self, config: dict[str, Any]) -> bool:
        """The config makes every choice this signature needs."""
        return all(canonical(config.get(k)) in vs for k, vs in self.config)

    def overlaps(self, config: dict[str, list[Any]]) -> bool:
        """Some config fails under both: every key the two name shares a class."""
        mine = dict(self.config)
        return all(set(mine[k]) & {canonical(v) for v in vs} for k, vs in config.items() if k in mine)

    def choices(self, key: str, values: list[Any]) -> list[Any]:
        """Those of `values` (a key's choices) this signature persists under (all: the key does not matter)."""
        mine = dict(self.config).get(key)
        return list(values) if mine is None else [v for v in values if canonical(v) in mine]

    def config_dict(self) -> dict[str, list[str]]:
        return {k: list(vs) for k, vs in self.config}

    def as_dict(self) -> dict[str, Any]:
        return {"property": self.property, "observable": self.observable, "config": self.config_dict(),
                "position": list(self.position)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Signature":
        return cls.make(d["property"], d.get("observable", ""), d.get("config") or {}, d.get("position") or [])

    def text(self) -> str:
        cfg = ", ".join(f"{k}={'|'.join(vs)}" for k, vs in self.config)
        return (f"{self.property} · {self.observable or '-'} · {{{cfg}}} · "
                f"{'+'.join(self.position) or 'any position'}")


# --- the layout of an example ------------------------------------------------------------

def layout(ex) -> dict[str, np.ndarray]:
    """Masked positions of each layout class present, as [B, T] booleans (none for row-only boundaries)."""
    m = ex.inputs.get("loss_mask")
    if m is None or m.ndim != 2:
        return {}
    return {f"masked-{k}": v for k, v in mask_layout(m).items() if v.any()}


def _float_token_inputs(ex) -> list[str]:
    m = ex.inputs.get("loss_mask")
    return [n for n, a in ex.inputs.items() if m is not None and a.shape == m.shape and a.dtype.kind == "f"
            and n not in ("loss_mask", "attention_mask")]


def neutralise(ex, label: str):
    """The example with the values at `label`'s masked positions set to 0."""
    where = layout(ex).get(label)
    if where is None:
        return ex
    new = {n: (np.where(where, 0, a).astype(a.dtype) if n in _float_token_inputs(ex) else a)
           for n, a in ex.inputs.items()}
    return replace(ex, inputs=new)


def unmask(ex, label: str):
    """The example with `label`'s masked positions made valid (mask 1, values 0): whether the
    failure needs the masked layout itself, not the values there."""
    where = layout(ex).get(label)
    if where is None:
        return ex
    new = neutralise(ex, label).inputs
    new = {n: (np.where(where, 1, a).astype(a.dtype) if n == "loss_mask" else a) for n, a in new.items()}
    if "attention_mask" in new and new["attention_mask"].shape == where.shape:
        new["attention_mask"] = np.where(where, 1, new["attention_mask"]).astype(new["attention_mask"].dtype)
    return replace(ex, inputs=new)


def fill_masked_rows(ex):
    """The example with each fully masked row replaced by a copy of the first row that has a
    valid token (its token tensors; the batch keeps its size, rewards and groups). None:
    no row has a valid token, or none is fully masked."""
    m = ex.inputs.get("loss_mask")
    if m is None or m.ndim != 2:
        return None
    has = m.astype(bool).any(axis=1)
    if has.all() or not has.any():
        return None
    src = int(np.argmax(has))

    def fill(a: np.ndarray) -> np.ndarray:
        if a.ndim != 2 or a.shape != m.shape:
            return a
        out = a.copy()
        out[~has] = a[src]
        return out
    return replace(ex, inputs={n: fill(a) for n, a in ex.inputs.items()},
                   variants={v: {n: fill(a) for n, a in ov.items()} for v, ov in ex.variants.items()})


def one_group(ex):
    """The example with every row in one group (None: it has no two groups)."""
    g = ex.inputs.get("group")
    if g is None or len(np.unique(g)) < 2:
        return None
    return replace(ex, inputs={**ex.inputs, "group": np.zeros_like(g)})


def nonfinite(observed: Any, positions: list[list[int]]) -> bool:
    """The failing value is NaN or Inf (at the offending positions where there are some)."""
    try:
        x = np.asarray(observed, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if x.size == 0:
        return False
    if positions and x.ndim:
        try:
            x = np.asarray([x[tuple(p)] for p in positions if len(p) == x.ndim])
        except IndexError:
            pass
    return bool(x.size) and not np.isfinite(x).all()


# --- finding the signature -----------------------------------------------------------------

def _fails(probe: Probe, ex, observable: str, overrides: dict[str, Any] | None = None) -> bool | None:
    verdict, obs = probe(ex, overrides or {})
    if verdict == "n/a":
        return None
    # a differential probe names every observable that differs
    return verdict == "violated" and (obs == observable or (isinstance(obs, tuple) and observable in obs))


def sufficient(family: str, bad_value: bool) -> bool:
    """Do this failure's labels name masked positions where a value alone makes it fail (a
    masking family's own perturbation, or a NaN / Inf drawn there), rather than a layout it
    needs? Then a shared label is one bug: a reducer that multiplies by the mask fails at a
    hole and in a masked row alike."""
    return perturbs(family) or (family == DIFFERENTIAL and bad_value)


def _alone(probe: Probe, ex, family: str, c: str, observable: str) -> bool:
    """Does the failure persist with only class `c`'s masked values left (perturbed, or drawn)?"""
    if perturbs(family):
        return bool(_fails(probe, ex, observable, {"at": AT[c]}))
    return bool(_fails(probe, reduced(ex, (c, GROUP_BOUNDARY)), observable))


def position_class(ex, family: str, observable: str, probe: Probe, bad_value: bool) -> tuple[str, ...]:
    """The position labels the failure needs (see the module's docstring)."""
    present = list(layout(ex))
    labels: list[str] = []
    if sufficient(family, bad_value):
        labels = [c for c in present if _alone(probe, ex, family, c, observable)] or present
    else:
        for c in present:
            if c == "masked-row":  # needed when a valid row in its place makes the failure go away
                filled = fill_masked_rows(ex)
                if filled is None or not _fails(probe, filled, observable):
                    labels.append(c)
            elif _fails(probe, neutralise(ex, c), observable) is False or \
                    _fails(probe, unmask(ex, c), observable) is False:
                labels.append(c)
    merged = one_group(ex)
    if merged is not None and not _fails(probe, merged, observable):
        labels.append(GROUP_BOUNDARY)
    if bad_value:
        labels.append(NON_FINITE)
    return tuple(sorted(labels))


AMPLIFY = (2.0, 4.0)  # the example's float values further out, where a threshold no longer hides a bug


def amplified(ex, factor: float):
    """The example with every float token input (log-probs, advantages, values ...) times
    `factor`: a ratio or a difference further from where a threshold of the config sits."""
    def scale(a):
        with np.errstate(over="ignore", invalid="ignore"):  # a huge drawn value may overflow: it stays inf
            return (a * factor).astype(a.dtype)
    names = _float_token_inputs(ex)
    return replace(ex, inputs={n: scale(a) if n in names else a for n, a in ex.inputs.items()},
                   variants={v: {n: scale(a) if n in names else a for n, a in ov.items()} for v, ov in ex.variants.items()})


def config_that_matters(ex, choices: dict[str, list[Any]], observable: str, probe: Probe) -> dict[str, list[str]]:
    """Each config key some other class of choices (`canonical`) makes the failure go away
    under, with the classes it persists under (sorted). A class fails when one of its choices
    does, on the example or on it `amplified` (a threshold that the drawn values happen not to
    cross is no part of the bug); the example's own class fails."""
    out: dict[str, list[str]] = {}
    for key, values in choices.items():
        if key not in ex.config:
            continue
        failing, held = {canonical(ex.config[key])}, False
        classes: dict[str, list[Any]] = {}
        for v in values:
            classes.setdefault(canonical(v), []).append(v)
        for c, vs in classes.items():
            if c in failing:
                continue
            results = []
            for x in (ex, *(amplified(ex, f) for f in AMPLIFY)):
                for v in vs:
                    results.append(_fails(probe, replace(x, config={**x.config, key: v}), observable))
                    if results[-1]:
                        failing.add(c)
                        break
                if c in failing or results[0] is None:
                    break
            held = held or (c not in failing and False in results)
        if held:
            out[key] = sorted(failing)
    return out


def signature(prop: str, family: str, ex, observable: str, bad_value: bool, choices: dict[str, list[Any]],
              probe: Probe) -> Signature:
    """The full signature of a (shrunk) failure."""
    return Signature.make(prop, observable, config_that_matters(ex, choices, observable, probe),
                          position_class(ex, family, observable, probe, bad_value))


def reduced(ex, keep: tuple[str, ...]):
    """The example with the values at every masked class not in `keep` set to 0, each fully
    masked row replaced by a valid one unless `keep` names masked-row, and its groups merged
    unless `keep` names group-boundary: where a bug needing `keep` still fails, and the junk
    and rows that other bugs feed on are gone. (Holes stay holes: the valid tokens, which a
    bug may be about, do not change.)"""
    r = ex
    if "masked-row" not in keep:
        r = fill_masked_rows(r) or r
    for c in [c for c in layout(r) if c not in keep and c != "masked-row"]:
        r = neutralise(r, c)
    if GROUP_BOUNDARY not in keep:
        r = one_group(r) or r
    return r


LEAKED = 7.5  # stands in for a NaN: outside the drawn values' range, so a leak of it shows


def finite_version(ex):
    """The example with every NaN / Inf of its inputs replaced by LEAKED: whether a known bug
    that leaks a value also leaks this NaN."""
    fix = lambda a: np.where(np.isfinite(a), a, LEAKED).astype(a.dtype) if a.dtype.kind == "f" else a  # noqa: E731
    return replace(ex, inputs={n: fix(a) for n, a in ex.inputs.items()},
                   variants={v: {n: fix(a) for n, a in ov.items()} for v, ov in ex.variants.items()})


def _leaks(probe: Probe, ex, observable: str) -> bool:
    """A NaN / Inf that the values at masked positions make: gone with every one of them 0. A
    known non-finite bug on the same property, observable and config is then this one wherever
    the value sits (a product with the mask leaks from a hole, the tail and a masked row alike);
    a 0/0 of a masked row, say, stays when the values are zeroed and is not taken for it."""
    zeroed = ex
    for c in layout(ex):
        zeroed = neutralise(zeroed, c)
    return zeroed is not ex and _fails(probe, zeroed, observable) is False and bool(_fails(probe, ex, observable))


def is_known(k: Signature, family: str, ex, observable: str, bad_value: bool, probe: Probe) -> bool:
    """Does known bug `k` make this failure? Its flags agree, and the failure persists where
    only what `k` needs is left: on the example reduced to `k`'s layout (`reduced`). An
    example with a second bug besides `k` counts as `k`'s: the second shows on examples
    without `k`'s layout. Where the labels say "a value here alone fails" (`sufficient`), the
    kind of masked position is not a second bug (a reducer that multiplies by the mask fails
    at a hole, in the padding and in a masked row alike): the flags and the failure suffice.
    A NaN failure is a known value-leaking bug's when the same example with the NaN made
    finite fails as it does; a non-finite failure the masked values make (`_leaks`) is a
    known non-finite bug's wherever they sit."""
    if bad_value and NON_FINITE not in k.position:
        ex = finite_version(ex)
        if not _fails(probe, ex, observable):
            return False
        bad_value = False
    if (NON_FINITE in k.position) != bad_value:
        return False
    if bad_value and not sufficient(family, bad_value) and _leaks(probe, ex, observable):
        return True
    if sufficient(family, bad_value):
        return any(c in AT for c in k.position) == bool(layout(ex)) and bool(_fails(probe, ex, observable))
    labels = [c for c in k.position if c in AT and c in layout(ex)]
    if any(c in AT and c not in labels for c in k.position):  # it needs a layout this example lacks
        return False
    return bool(_fails(probe, reduced(ex, k.position), observable))


def known_match(known: list[Signature], prop: str, family: str, ex, observable: str, bad_value: bool,
                probe: Probe, choices: dict[str, list[Any]]) -> Signature | None:
    """The known signature this failure has, if any: same property and observable (cheap),
    then the config (the example's own config fails under the known signature, or else the
    configs this failure needs overlap the known one's: the same bug seen through another
    threshold), then the position (`is_known`, a probe or two)."""
    cands = [k for k in known if k.property == prop and k.observable == observable]
    if not cands:
        return None
    admitted = [k for k in cands if k.admits(ex.config)]
    if len(admitted) < len(cands):
        needs = config_that_matters(ex, choices, observable, probe)
        admitted += [k for k in cands if k not in admitted and k.overlaps(needs)]
    return next((k for k in admitted if is_known(k, family, ex, observable, bad_value, probe)), None)
