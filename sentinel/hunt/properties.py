"""Hunt properties: one generic invariant family on one boundary, over drawn examples.

A property names a boundary and an invariant family (sentinel/invariants), how its
examples are drawn (keyword arguments of `sentinel.strategies.examples`: configs, batch
shapes, masked positions, groups, variants) and the invariant's YAML body for one example.
No property knows a trigger; each says what must hold for every input. Each family declares
its own properties beside it (`hunt = (hunted(...), ...)`); `PROPERTIES` collects them into
the table `sentinel hunt --list` shows, which both sides of a hunt (the driver, and the
round in the worker's child) read.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .. import strategies as S
from ..adapters.options import is_trainer
from ..boundaries import get as get_boundary
from ..errors import RegistryError
from ..invariants import REGISTRY, Invariant

FORMULA_FAMILIES = ("close", "equals", "gradient")  # families whose hunts state the reference's formula
# ...and those that state what the canonical config computes (GSPO's one loss per sequence): a
# trainer option (a KL term in the loss, an entropy mask) may change that on purpose, so these
# properties do not draw trainer options; the families that hold whatever the options do
# (finite, masking, padding, permutation, precision, ...) do
CANONICAL_FAMILIES = FORMULA_FAMILIES + ("sequence_uniform",)

# seconds of shrinking per finding before the best so far is kept (the driver's default for
# each round, and a round's own default)
SHRINK_TIME = 20.0

@dataclass(frozen=True)
class Property:
    """A generic invariant family on a boundary over generated examples."""

    name: str  # boundary.family[.qualifier]
    boundary: str
    family: str
    doc: str
    draw: dict[str, Any]  # keyword arguments of strategies.examples
    body: Callable[[S.Example], dict[str, Any]]  # the invariant's YAML body for one example
    origin: str = __name__  # the module that declares its family: the worker imports it to find the property

    def config_choices(self, domains: Mapping[str, Any] | None = None) -> dict[str, list[Any]]:
        """The config choices drawn; `domains` (an adapter's `option_domains` for this
        boundary) adds values to an option the property itself does not restrict."""
        out = {**S.CONFIG_CHOICES[self.boundary], **self.draw.get("config", {})}
        for k, values in (domains or {}).items():
            if is_trainer(k):  # a trainer option, default first
                if self.family not in CANONICAL_FAMILIES:
                    out[k] = list(values)
            elif k not in self.draw.get("config", {}):
                base = out.get(k) or [get_boundary(self.boundary).config[k]]
                out[k] = base + [v for v in values if v not in base]
        return out

    def strategy(self, exclude: dict[str, list[Any]] | None = None, pin: dict[str, Any] | None = None,
                 domains: Mapping[str, Any] | None = None):
        """The property's example strategy without the `exclude`d config choices (those the
        target raised Unsupported for), with the `pin`ned ones (--config key=value) as the
        only choice of their key and the target's `domains` added; built once per process,
        and validated."""
        pin = {k: v for k, v in (pin or {}).items() if k in get_boundary(self.boundary).config or is_trainer(k)}
        key = (self.name, repr(sorted((exclude or {}).items())), repr(sorted(pin.items())),
               repr(sorted((domains or {}).items())))
        if key not in _STRATEGIES:
            kw = dict(self.draw)
            if exclude or pin or domains:
                kw["config"] = {k: [pin[k]] if k in pin else [v for v in vs if v not in (exclude or {}).get(k, [])]
                                for k, vs in self.config_choices(domains).items()}
                kw["config"].update({k: [v] for k, v in pin.items() if k not in kw["config"]})
            _STRATEGIES[key] = S.examples(self.boundary, **kw)
            _STRATEGIES[key].validate()
        return _STRATEGIES[key]

    def pinned_out(self, pin: dict[str, Any]) -> str | None:
        """Why `pin` (--config) leaves this property nothing to draw (None: it does not)."""
        for k, v in pin.items():
            vs = self.draw.get("config", {}).get(k)
            if vs is not None and v not in vs:
                return f"--config {k}={v!r}: this property draws only {k} in {vs}"
        return None

    def invariant(self, ex: S.Example, overrides: dict[str, Any] | None = None) -> Invariant:
        """The invariant for one example; `overrides` change fields of its body (a signature's
        probes restrict a masking family to one kind of masked position with `at`)."""
        return REGISTRY[self.family].model_validate({**self.body(ex), **(overrides or {})})

    def admits(self, config: dict[str, Any]) -> bool:
        """The config is one this property draws (its own restrictions of config choices; a
        canonical family draws no trainer option, which a config holds only off its default).
        A differential finding is judged only by the properties that admit its config: a
        formula judging AReaL's metrics under rejection sampling (which masks tokens on purpose)
        once labelled a planted bug `fixed` ("base violates metrics.ratio_mean")."""
        if self.family in CANONICAL_FAMILIES and any(is_trainer(k) for k in config):
            return False
        return all(k not in config or config[k] in vs for k, vs in self.draw.get("config", {}).items())


class Properties(Mapping[str, Property]):
    """Every family's declared hunts (sentinel/invariants: `hunt = (hunted(...), ...)` beside the
    family), one property per boundary: a new family brings its properties with it, also one
    registered after this module was imported (a plugin, a test)."""

    def __init__(self) -> None:
        self._table: dict[str, Property] = {}
        self._seen: set[type] = set()

    def _collect(self) -> None:
        for cls in [c for c in REGISTRY.values() if c not in self._seen]:
            self._seen.add(cls)
            for h in cls.hunt:
                fixed = h.body or {}
                body = h.body if callable(h.body) else (lambda ex, _b=fixed: dict(_b))
                for boundary in h.boundaries:
                    name = f"{boundary}.{h.name or cls.family}"
                    if name in self._table:
                        raise RegistryError(f"hunt property {name!r} is declared twice")
                    self._table[name] = Property(name, boundary, cls.family, h.doc, dict(h.draw), body, cls.__module__)

    def forget(self, family: str) -> None:
        """Drop a family's properties (a plugin or a test that unregisters the family)."""
        self._table = {n: p for n, p in self._table.items() if p.family != family}
        self._seen = {c for c in self._seen if c.family != family}

    def __getitem__(self, name: str) -> Property:
        self._collect()
        return self._table[name]

    def __iter__(self) -> Iterator[str]:
        self._collect()
        return iter(dict(self._table))

    def __len__(self) -> int:
        self._collect()
        return len(self._table)


PROPERTIES = Properties()
_STRATEGIES: dict[Any, Any] = {}


def get(name: str, origin: str | None = None) -> Property:
    """The property `name`; where this process has not met its family yet, the family's
    module `origin` is imported first (a family declared outside sentinel, in the worker)."""
    if name not in PROPERTIES and origin:
        importlib.import_module(origin)
    return PROPERTIES[name]


def select(boundaries: list[str] | None = None, families: list[str] | None = None,
           names: list[str] | None = None) -> list[Property]:
    """Properties filtered by boundary, invariant family and/or name: a name selects itself and
    the properties split from it (`kl.finite` selects kl.finite.nan, .inf and .huge)."""
    out = []
    for p in PROPERTIES.values():
        if boundaries and p.boundary not in boundaries:
            continue
        if families and p.family not in families:
            continue
        if names and not any(p.name == n or p.name.startswith(n + ".") for n in names):
            continue
        out.append(p)
    return sorted(out, key=lambda p: (p.boundary, p.name))
