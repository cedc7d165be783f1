"""Finding signatures: when two counterexamples are one bug.

A signature is (property, observable, the config choices that matter, position class).
Two findings with one signature are one bug: after a finding the hunt goes on with its
signature excluded, and `--known` excludes signatures from the start, so a known open bug
cannot hide a second one on the same property.

- observable: what differs or fails (`loss`, `grad:loss/log_probs`, `input:ref_log_probs`,
  `exception` for a differential side that raises).
- config: each config key whose other choices make the failure go away, with the choices
  under which it persists (found by trying every other choice of each key alone); a key
  whose every choice fails is left out (it does not matter).
- position class: which masked positions the failure needs, from the layout of each row's
  loss mask (`masked-head` before its first valid token, `masked-interior` between valid
  tokens, `masked-tail` after the last, `masked-row` a row with no valid token), plus
  `group-boundary` (the failure needs two groups) and `non-finite` (the failing value is
  NaN / Inf). "Needs" is tested: for a family that perturbs masked positions
  (masked_invariance, finite) by perturbing only one class; otherwise by setting that
  class's values to 0 (head / interior / tail) or putting a valid row in place of each fully
  masked row (the batch keeps its size: "needs a masked row" is not "needs two rows").

Pure numpy over examples; the caller supplies `probe`, which evaluates a changed example.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

import numpy as np

from ..invariants.masking import mask_layout

LAYOUT = ("masked-head", "masked-interior", "masked-tail", "masked-row")
GROUP_BOUNDARY, NON_FINITE = "group-boundary", "non-finite"
# families whose check perturbs masked positions itself: restrict where (their `at` field)
PERTURBING = ("masked_invariance", "finite")
# the `at` value of a masking family for each layout class
AT = {f"masked-{k}": k for k in ("head", "interior", "tail", "row")}

# probe(example, invariant-body overrides) -> (verdict, what failed): "violated" | "held" | "n/a";
# what failed is an observable, or a tuple of them (a differential probe: every one that differs)
Probe = Callable[[Any, dict[str, Any]], tuple[str, Any]]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class Signature:
    property: str
    observable: str
    config: tuple[tuple[str, tuple[str, ...]], ...] = ()  # key -> JSON of each choice it persists under
    position: tuple[str, ...] = ()

    @classmethod
    def make(cls, prop: str, observable: str, config: dict[str, list[Any]], position: Iterable[str]) -> "Signature":
        return cls(prop, observable, tuple(sorted((k, tuple(_key(v) for v in vs)) for k, vs in config.items())),
                   tuple(sorted(set(position))))

    def admits(self, config: dict[str, Any]) -> bool:
        """The config makes every choice this signature needs."""
        return all(_key(config.get(k)) in vs for k, vs in self.config)

    def overlaps(self, config: dict[str, list[Any]]) -> bool:
        """Some config fails under both: every key the two name shares a choice."""
        mine = dict(self.config)
        return all(set(mine[k]) & {_key(v) for v in vs} for k, vs in config.items() if k in mine)

    def config_dict(self) -> dict[str, list[Any]]:
        return {k: [json.loads(v) for v in vs] for k, vs in self.config}

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


def position_class(ex, family: str, observable: str, probe: Probe, bad_value: bool) -> tuple[str, ...]:
    """The position labels the failure needs (see the module's docstring)."""
    present = list(layout(ex))
    labels: list[str] = []
    if family in PERTURBING:
        labels = [c for c in present if _fails(probe, ex, observable, {"at": AT[c]})] or present
    else:
        for c in present:
            if c == "masked-row":  # needed when a valid row in its place makes the failure go away
                filled = fill_masked_rows(ex)
                if filled is None or not _fails(probe, filled, observable):
                    labels.append(c)
            elif not _fails(probe, neutralise(ex, c), observable):
                labels.append(c)
    merged = one_group(ex)
    if merged is not None and not _fails(probe, merged, observable):
        labels.append(GROUP_BOUNDARY)
    if bad_value:
        labels.append(NON_FINITE)
    return tuple(sorted(labels))


def config_that_matters(ex, choices: dict[str, list[Any]], observable: str, probe: Probe) -> dict[str, list[Any]]:
    """Each config key some other choice of which makes the failure go away, with the choices
    under which it persists (the example's own first)."""
    out: dict[str, list[Any]] = {}
    for key, values in choices.items():
        if key not in ex.config:
            continue
        cur, failing, held = ex.config[key], [ex.config[key]], False
        for v in values:
            if _key(v) == _key(cur):
                continue
            r = _fails(probe, replace(ex, config={**ex.config, key: v}), observable)
            if r:
                failing.append(v)
            elif r is False:
                held = True
        if held:
            out[key] = failing
    return out


def signature(prop: str, family: str, ex, observable: str, bad_value: bool, choices: dict[str, list[Any]],
              probe: Probe) -> Signature:
    """The full signature of a (shrunk) failure."""
    return Signature.make(prop, observable, config_that_matters(ex, choices, observable, probe),
                          position_class(ex, family, observable, probe, bad_value))


def known_match(known: list[Signature], prop: str, family: str, ex, observable: str, bad_value: bool,
                probe: Probe, choices: dict[str, list[Any]]) -> Signature | None:
    """The known signature this failure has, if any. Cheap parts first (property,
    observable); the position class, which needs probes, only when one of them matches; then
    the config: the example's own config fails under the known signature, or else the configs
    this failure needs overlap the known one's (the same bug seen through another threshold)."""
    cands = [k for k in known if k.property == prop and k.observable == observable]
    if not cands:
        return None
    position = position_class(ex, family, observable, probe, bad_value)
    cands = [k for k in cands if k.position == position]
    if not cands:
        return None
    hit = next((k for k in cands if k.admits(ex.config)), None)
    if hit is not None:
        return hit
    needs = config_that_matters(ex, choices, observable, probe)
    return next((k for k in cands if k.overlaps(needs)), None)
