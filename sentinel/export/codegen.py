"""Python source for the values a trainer function received, so a bundle's validate.py can
build the very same call without RL-Sentinel.

`source(value)` writes a value as an expression that needs only torch, numpy, the standard
library and the trainer's own classes: tensors as `torch.tensor([...], dtype=...)` (NaN and
infinities spelled out), lists, tuples, dicts, numbers, strings, `argparse.Namespace` (any
subclass of it, as a plain Namespace), dataclasses of the trainer by their own constructor,
and other plain objects of the trainer as `_new(Class, {attributes})`. Anything else (a
module object, a network, an open resource) raises `NotSource`: the export says which
argument could not be written rather than guessing.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import math
import types
from typing import Any, Callable

import torch


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
    t = t.detach().cpu()
    dtype = str(t.dtype).replace("torch.", "torch.")
    body = _nested(t.tolist()) if t.dim() else number(t.item())
    grad = ", requires_grad=True" if t.requires_grad else ""
    return f"torch.tensor({body}, dtype={dtype}{grad})"


class Writer:
    """Source for values; `imports` collects the trainer modules the source names.

    `allowed(module)` says whether a class may be named by import (the trainer's own
    modules); others are refused."""

    def __init__(self, allowed: Callable[[str], bool]):
        self.allowed = allowed
        self.imports: set[str] = set()

    def _cls(self, cls: type) -> str:
        mod = cls.__module__
        if not self.allowed(mod) or "<locals>" in cls.__qualname__:
            raise NotSource(f"an instance of {mod}.{cls.__qualname__}, which is not the trainer's own class")
        self.imports.add(mod)
        return f"_import({mod!r}, {cls.__qualname__!r})"

    def source(self, x: Any, depth: int = 0) -> str:
        if depth > 24:
            raise NotSource("a value nested deeper than 24 levels")
        if x is None or isinstance(x, (bool, int, float)):
            return number(x) if x is not None else "None"
        if isinstance(x, str):
            return repr(x)
        if isinstance(x, torch.Tensor):
            return tensor(x)
        if isinstance(x, torch.dtype):
            return str(x)
        if isinstance(x, torch.device):
            return f"torch.device({str(x)!r})"
        if isinstance(x, enum.Enum):
            return f"{self._cls(type(x))}[{x.name!r}]"
        if isinstance(x, (list, tuple)):
            items = [self.source(v, depth + 1) for v in x]
            if isinstance(x, tuple):
                return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
            return "[" + ", ".join(items) + "]"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{self.source(k, depth + 1)}: {self.source(v, depth + 1)}"
                                   for k, v in x.items()) + "}"
        if isinstance(x, argparse.Namespace):  # slime's args (a subclass whose unset options raise)
            return "argparse.Namespace(**" + self.source(dict(vars(x)), depth + 1) + ")"
        if isinstance(x, types.SimpleNamespace):
            return "types.SimpleNamespace(**" + self.source(dict(vars(x)), depth + 1) + ")"
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            init = {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if f.init}
            rest = {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if not f.init}
            made = f"{self._cls(type(x))}(**{self.source(init, depth + 1)})"
            return f"_set({made}, {self.source(rest, depth + 1)})" if rest else made
        if isinstance(x, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
            raise NotSource(f"a {type(x).__name__} ({getattr(x, '__name__', x)!r})")
        if hasattr(x, "__dict__") and not isinstance(x, torch.nn.Module):
            return f"_new({self._cls(type(x))}, {self.source(dict(vars(x)), depth + 1)})"
        raise NotSource(f"a value of type {type(x).__module__}.{type(x).__qualname__}")


def literal(x: Any) -> str:
    """Nested lists of numbers (a report's observed / expected values) as source."""
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in x) + "]"
    if x is None:
        return "None"
    return number(x)
