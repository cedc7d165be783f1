"""Python source for the values a trainer function received, so a bundle's validate.py can
build the very same call without RL-Sentinel.

`source(value)` writes a value as an expression that needs only torch, numpy, the standard
library and the trainer's own classes: tensors as `torch.tensor([...], dtype=...)` (NaN and
infinities spelled out), numpy arrays as `np.array([...], dtype=...)`, lists, tuples, sets,
dicts, defaultdicts, numbers, strings, `argparse.Namespace` (any subclass of it, as a plain
Namespace), the trainer's functions by name (and partials of them), the adapter's stand-ins
(`standins`: their class written out too), dataclasses of the trainer by their own
constructor, and other plain objects of the trainer as `_new(Class, {attributes})`. Anything else (a module object, a network, an open resource)
raises `NotSource`: the export says which argument could not be written rather than guessing.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import enum
import functools
import math
import sys
import types
from typing import Any, Callable

import numpy as np
import torch

from . import standins


class NotSource(Exception):
    """A value that has no faithful source form here."""


def number(x: float | int | bool) -> str:
    if isinstance(x, bool) or isinstance(x, int):
        return repr(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def _nested(x: Any) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_nested(v) for v in x) + "]"
    return number(x)


def tensor(t: torch.Tensor) -> str:
    grad = ", requires_grad=True" if t.requires_grad else ""  # a leaf in validate.py (before detach)
    t = t.detach().cpu()
    dtype = str(t.dtype)
    body = _nested(t.tolist()) if t.dim() else number(t.item())
    return f"torch.tensor({body}, dtype={dtype}{grad})"


class Writer:
    """Source for values; `imports` collects the trainer modules the source names.

    `allowed(module)` says whether a class may be named by import (the trainer's own
    modules); others are refused."""

    def __init__(self, allowed: Callable[[str], bool]):
        self.allowed = allowed
        self.imports: set[str] = set()
        self.standins: dict[str, str] = {}  # class name -> its source, for validate.py
        self.shared = False  # a value was written as a trainer-wide object (see `_global`)
        self._globals: dict[int, tuple[str, str]] = {}
        self._indexed: set[str] = set()

    def _global(self, x: Any) -> str | None:
        """`module.NAME` when `x` is a module-level object of the trainer (AReaL's
        stats_tracker.DEFAULT_TRACKER): written by reference, since it is that object the
        function writes to and other calls read (a copy would hold no lock and share nothing)."""
        for name, mod in list(sys.modules.items()):
            if name in self._indexed or mod is None or not self.allowed(name):
                continue
            self._indexed.add(name)
            for attr, v in list(vars(mod).items()):  # instances of the trainer's own classes only
                if not attr.startswith("_") and not issubclass(type(v), type) \
                        and self.allowed(getattr(type(v), "__module__", "") or ""):
                    self._globals.setdefault(id(v), (name, attr))
        hit = self._globals.get(id(x))
        if hit is None or getattr(sys.modules.get(hit[0]), hit[1], None) is not x:
            return None
        self.shared = True
        self.imports.add(hit[0])
        return f"_import({hit[0]!r}, {hit[1]!r})"

    def _cls(self, cls: type) -> str:
        cls = cls.__dict__.get("__sentinel_recorded__", cls)  # a recording copy is its class's instance
        mod = cls.__module__
        if not self.allowed(mod) or "<locals>" in cls.__qualname__:
            raise NotSource(f"an instance of {mod}.{cls.__qualname__}, which is not the trainer's own class")
        self.imports.add(mod)
        return f"_import({mod!r}, {cls.__qualname__!r})"

    def begin(self) -> None:
        """A new call's arguments: objects are shared within one call only."""
        self._seen: dict[int, tuple[str, Any]] = {}
        self.shared = False

    def source(self, x: Any, depth: int = 0) -> str:
        """`x` as source; an object that appears twice in one call's arguments (TRL's model
        is both `model` and `self.model`) is one object in validate.py too: `(_v1 := ...)`
        where it first appears, `_v1` after."""
        if x is None or isinstance(x, (bool, int, float, str, enum.Enum, torch.dtype, torch.device)) \
                or isinstance(x, (list, tuple, dict, types.FunctionType, functools.partial)):
            return self._source(x, depth)
        seen = getattr(self, "_seen", None)
        if seen is None:
            return self._source(x, depth)
        if id(x) in seen and seen[id(x)][1] is x:
            return seen[id(x)][0]
        text = self._source(x, depth)
        name = f"_v{len(seen) + 1}"
        seen[id(x)] = (name, x)
        return f"({name} := {text})"

    def _source(self, x: Any, depth: int = 0) -> str:
        if depth > 24:
            raise NotSource("a value nested deeper than 24 levels")
        if x is None or isinstance(x, (bool, int, float)):
            return number(x) if x is not None else "None"
        if isinstance(x, str):
            return repr(x)
        if isinstance(x, torch.Tensor):
            return tensor(x)
        if isinstance(x, np.ndarray):  # verl's group uids: an object array of strings
            items = self.source(x.tolist(), depth + 1) if x.dtype != object else \
                "[" + ", ".join(self.source(v, depth + 1) for v in x.reshape(-1)) + "]"
            shape = "" if x.dtype != object or x.ndim == 1 else f".reshape({tuple(x.shape)!r})"
            return f"np.array({items}, dtype={_np_dtype(x.dtype)}){shape}"
        if isinstance(x, np.generic):
            return self.source(x.item(), depth + 1)
        if isinstance(x, torch.dtype):
            return str(x)
        if isinstance(x, torch.device):
            return f"torch.device({str(x)!r})"
        if isinstance(x, enum.Enum):
            return f"{self._cls(type(x))}[{x.name!r}]"
        if standins.is_standin(type(x)):  # the adapter's model / accelerator / engine stand-in
            try:
                standins.write(type(x), self.standins)
            except standins.NotWritable as e:
                raise NotSource(str(e)) from None
            items = f", {self.source(dict(x), depth + 1)}" if isinstance(x, dict) else ""  # verl's _Batch
            return f"_new({type(x).__name__}, {self.source(dict(vars(x)), depth + 1)}{items})"
        if isinstance(x, collections.defaultdict) and x.default_factory in (list, dict, int, float, set):
            return f"collections.defaultdict({x.default_factory.__name__}, {self.source(dict(x), depth + 1)})"
        if isinstance(x, (set, frozenset)):
            return f"{type(x).__name__}([{', '.join(self.source(v, depth + 1) for v in x)}])"
        if isinstance(x, (list, tuple)):
            items = [self.source(v, depth + 1) for v in x]
            if isinstance(x, tuple):
                return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
            return "[" + ", ".join(items) + "]"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{self.source(k, depth + 1)}: {self.source(v, depth + 1)}"
                                   for k, v in x.items()) + "}"
        if getattr(type(x), "__sentinel_options__", False):  # an adapter's stand-in for the trainer's
            # argparse args (OpenRLHF's): the options it set, as the Namespace the trainer gets
            return "argparse.Namespace(**" + self.source({k: v for k, v in vars(x).items()
                                                          if not k.startswith("_")}, depth + 1) + ")"
        if isinstance(x, argparse.Namespace):  # slime's args (a subclass whose unset options raise)
            return "argparse.Namespace(**" + self.source(dict(vars(x)), depth + 1) + ")"
        if isinstance(x, types.SimpleNamespace):
            return "types.SimpleNamespace(**" + self.source(dict(vars(x)), depth + 1) + ")"
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            init = {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if f.init}
            rest = {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if not f.init}
            made = f"{self._cls(type(x))}(**{self.source(init, depth + 1)})"
            return f"_set({made}, {self.source(rest, depth + 1)})" if rest else made
        if isinstance(x, functools.partial):  # AReaL's actor keeps partial(constant_gae_lambda, value=...)
            return (f"functools.partial({self.source(x.func, depth + 1)}, *{self.source(list(x.args), depth + 1)}, "
                    f"**{self.source(dict(x.keywords), depth + 1)})")
        if isinstance(x, types.FunctionType) and self.allowed(x.__module__) and "<locals>" not in x.__qualname__:
            self.imports.add(x.__module__)  # a function of the trainer: by name
            return f"_import({x.__module__!r}, {x.__qualname__!r})"
        if isinstance(x, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
            raise NotSource(f"a {type(x).__name__} ({getattr(x, '__name__', x)!r})")
        if (ref := self._global(x)) is not None:
            return ref
        if hasattr(x, "__dict__") and (not isinstance(x, torch.nn.Module) or self.allowed(
                x.__class__.__dict__.get("__sentinel_recorded__", type(x)).__module__)):
            # (a module of the trainer's own, OpenRLHF's PolicyLoss: its state, bookkeeping dicts included)
            # an adapter's spy on the instance calls through: validate.py spies there itself
            state = {k: v for k, v in vars(x).items()
                     if not (isinstance(v, types.FunctionType) and v.__dict__.get("__sentinel_spy__"))}
            return f"_new({self._cls(type(x))}, {self.source(state, depth + 1)})"
        raise NotSource(f"a value of type {type(x).__module__}.{type(x).__qualname__}")


def _np_dtype(d: np.dtype) -> str:
    return "object" if d == object else f"np.{d.name}"


def literal(x: Any) -> str:
    """Nested lists of numbers (a report's observed / expected values) as source."""
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in x) + "]"
    if x is None:
        return "None"
    return number(x)
