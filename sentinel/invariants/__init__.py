"""Invariant families. Each is a pydantic model of its YAML body, in a module of this package
grouped by theme, with its `sentinel hunt` properties declared beside it. Every module here is
imported, and every class that names its `family` registers itself in `REGISTRY` (YAML key ->
family): adding a family is adding a class, nothing else. Invariant code is target-free: it
never imports a trainer."""

import importlib
import pkgutil

from .base import REGISTRY, Invariant, Outcome, RunObservation

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["REGISTRY", "Invariant", "Outcome", "RunObservation"]
