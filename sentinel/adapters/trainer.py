"""`TrainerAdapter`: what every real trainer's adapter repeats, declared once.

A trainer adapter says, as class attributes, which package it calls (`package`, `marker`: a
module a checkout must hold), how its import path is installed (`extra`: the pip extra with the
light packages imported for real; `install_hint`: the commands that install it all), which
third-party modules may be stubbed (`heavy`; None: any missing one but `light`), which modules
`load()` imports (`modules`, then `optional_modules`), where `_fn` looks a function up
(`lookup_modules`), the files `sentinel history` watches (`loss_path_files`, required), and its
KL names (`kl_names`). Its declared tables (`unsupported`, `preconditions`, `deviations`,
`declines`) are the contract's (`contract.Adapter`).

`load()` is one outline: locate the trainer (a checkout first on ``sys.path``, or the installed
package), import its modules with stubs and the host's logging kept, then report facts
(version, module files, stubs, import time, and what `_facts` adds). A trainer with more steps
(a shim to install, a package entered without its ``__init__``) overrides the hooks, or `load`.
"""

from __future__ import annotations

import inspect
import re
import time
import types
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import torch

from sentinel.errors import TargetError

from .binding import lookup
from .contract import Adapter
from .loading import (first_on_path, keep_host_logging, locate, module_exists, module_files, pip_hint, source_of,
                      version_facts)
from .shims import import_with_stubs

# The canonical KL names and the k1 / k2 / k3 estimators most trainers call them.
K_NAMES: Mapping[str, str] = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}


def floating(x: torch.Tensor) -> torch.Tensor:
    """A float tensor as is (keeping its autograd graph); an integer one as float32."""
    return x if x.is_floating_point() else x.float()


def shifts_rewards(config: Mapping[str, Any]) -> bool:
    """Whether an `advantages` config shifts or scales the rewards (reward_bias, reward_scaling)."""
    return float(config["reward_bias"]) != 0.0 or float(config["reward_scaling"] or 1.0) != 1.0


class TrainerAdapter(Adapter):
    """Base class of the real trainers' adapters (see the module docstring)."""

    package: ClassVar[str] = ""
    marker: ClassVar[str] = ""
    extra: ClassVar[str | None] = None
    install_hint: ClassVar[str] = ""
    light: ClassVar[frozenset[str]] = frozenset()
    heavy: ClassVar[frozenset[str] | None] = None
    modules: ClassVar[tuple[str, ...]] = ()
    optional_modules: ClassVar[tuple[str, ...]] = ()
    lookup_modules: ClassVar[tuple[str, ...]] = ()
    kl_names: ClassVar[Mapping[str, str]] = K_NAMES

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.package or not cls.loss_path_files:
            raise TypeError(f"{cls.__name__}: a trainer adapter declares its `package` and its `loss_path_files` "
                            f"(what `sentinel history` watches)")

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        super().__init__(root, device, options)
        self.mods: dict[str, types.ModuleType] = {}  # loaded modules
        self.errors: dict[str, str] = {}  # why an optional module is not loaded
        self.facts: dict[str, Any] = {}

    # --- locating and importing ---------------------------------------------------------------
    def _locate(self, *, one_version: bool = True) -> Path:
        """The trainer's folder (a checkout, else the installed package), first on sys.path."""
        root = locate(self.name, self.package, self.marker, self.root, hint=self.install_hint or None,
                      one_version=one_version)
        first_on_path(root)
        self.root = root
        return root

    def trainer_roots(self) -> list[str]:
        """The trainer's package folder (in the checkout, or where it is installed)."""
        return [str(Path(self.root) / self.package)] if self.root is not None else []

    def _import(self, name: str) -> types.ModuleType:
        """Import `name`, stubbing the missing heavy modules on the way (`shims.import_with_stubs`)."""
        allowed = None if self.heavy is None else self.heavy | set(self.options.get("extra_stubs") or ())
        if self.heavy is None:
            hint = f"install it: {pip_hint(self.extra)}"
        else:
            hint = f"{self.install_hint}, or options.extra_stubs"
        return import_with_stubs(name, target=self.name, own=self.package, stubs=self.stubs, allowed=allowed,
                                 light=self.light, hint=hint)

    def _optional(self, name: str, *, enabled: bool = True, strict: bool = True) -> None:
        """A module some boundaries need: disabled, or absent at this version, it is noted in
        `errors` (those boundaries fall back or are unsupported); present, it is imported, and an
        import failure fails the load (`strict`) or is noted too."""
        if not enabled:
            self.errors[name] = "disabled by options"
        elif strict and not module_exists(self.root, name):
            self.errors[name] = f"{name.replace('.', '/')}.py does not exist at this version"
        elif strict:
            self.mods[name] = self._import(name)
        else:
            try:
                self.mods[name] = self._import(name)
            except Exception as e:  # noqa: BLE001 - optional: the boundaries that need it say unsupported
                self.errors[name] = f"{type(e).__name__}: {e}"

    def _importing(self):
        """The context the trainer's modules are imported in (default: the host's logging kept)."""
        return keep_host_logging()

    def _prepare(self, root: Path) -> None:
        """Before the imports: shims, backports, packages entered without their ``__init__``."""

    def _version(self, root: Path, from_checkout: bool) -> dict[str, Any]:
        """{"package_version", "commit", "version"} for the report."""
        return version_facts(root, None, from_checkout)

    def _facts(self, root: Path) -> dict[str, Any]:
        """What else this trainer's report says about the loaded version."""
        return {}

    def load(self) -> dict[str, Any]:
        from_checkout = self.root is not None
        root = self._locate()
        self._prepare(root)
        t0 = time.perf_counter()
        with self._importing():
            for name in self.modules:
                self.mods[name] = self._import(name)
            boundary_s = time.perf_counter() - t0
            self._import_optional(root)
        self.facts = {**self._version(root, from_checkout), "module_files": module_files(self.mods.values(), root),
                      "stubs": list(self.stubs), "boundary_import_s": round(boundary_s, 4), **self._facts(root)}
        if self.errors:
            self.facts["optional_module_errors"] = dict(self.errors)
        return dict(self.facts)

    def _import_optional(self, root: Path) -> None:
        for name in self.optional_modules:
            self._optional(name)

    # --- lookups ------------------------------------------------------------------------------
    def _fn(self, name: str, *modules: str, boundary: str) -> Callable:
        """The trainer's function `name` from the first of `modules` (default: `lookup_modules`)
        that has it; `Unsupported` where this version has none (with the import error of a
        module that failed)."""
        return lookup(self.mods, name, modules or self.lookup_modules, target=self.name, boundary=boundary,
                      version=self.facts.get("version", "this version"), errors=self.errors)

    def _kl_name(self, kl_type: str, default: str | None = None, fn: Callable | None = None) -> str | None:
        """The trainer's name for a canonical KL type (`default` where it has none). A
        straight-through type (`k3+`) is the base type's name with its `+`, only where the
        code of the trainer's KL function `fn` dispatches on a `+` suffix; None elsewhere."""
        if kl_type.endswith("+"):
            base = self.kl_names.get(kl_type[:-1], None if default is None else kl_type[:-1])
            return f"{base}+" if base is not None and fn is not None and straight_through(fn) else None
        return self.kl_names.get(kl_type, default)


_PLUS_SUFFIX = re.compile(r"""\.endswith\(\s*(["'])\+\1\s*\)""")


def straight_through(fn: Callable) -> bool:
    """Whether `fn`'s own code takes straight-through KL names (it tests for a `+` suffix, as
    verl's kl_penalty does since PR 2953): read from the code, so an old commit says no. Code
    whose source cannot be read answers neither: a `TargetError` that says why (an error, not
    `unsupported`: the option may well exist there)."""
    fn = inspect.unwrap(fn)
    try:
        src = source_of(fn)
    except (OSError, TypeError) as e:
        where = getattr(getattr(fn, "__code__", None), "co_filename", None) or getattr(fn, "__module__", "?")
        raise TargetError(f"cannot read the source of {getattr(fn, '__qualname__', fn)!r} ({where}: "
                          f"{type(e).__name__}: {e}), so whether it takes straight-through KL names "
                          f"('+' suffix) is unknown") from None
    return bool(_PLUS_SUFFIX.search(src))
