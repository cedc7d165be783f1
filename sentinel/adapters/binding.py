"""Calling a target function whose signature drifts between versions, and finding it.

- `parameters`, `signature_text`, `bind`: a canonical call bound to a target signature (a name
  it lacks is signature drift: `Unsupported`, never silently dropped);
- `lookup`: a function by name in the target's loaded modules, else `Unsupported`;
- `resolve`: what a declared ``module:qualname`` call (`@implements`) names in this process;
- `watching`: `bind`'s absent declarations, seen by the exporter's recording.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import types
from typing import Any, Callable, Iterator

from sentinel.errors import Unsupported


def parameters(fn: Callable) -> dict[str, inspect.Parameter]:
    """A target function's parameters ({} when it has no inspectable signature)."""
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def signature_text(fn: Callable) -> str:
    """`qualname(signature)` for drift messages."""
    try:
        return f"{getattr(fn, '__qualname__', fn)}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return repr(fn)


_WATCHERS: list[Callable[[Callable, dict[str, Any]], None]] = []


@contextlib.contextmanager
def watching(fn: Callable[[Callable, dict[str, Any]], None]) -> Iterator[None]:
    """While active, `fn(target, absent)` sees each `bind` call's `absent` declarations (the
    exporter's recording: validate.py leaves out an argument recorded at its absent value
    where the function at the checkout it runs against has no such parameter)."""
    _WATCHERS.append(fn)
    try:
        yield
    finally:
        _WATCHERS.remove(fn)


def bind(fn: Callable, boundary: str, required: dict[str, Any], optional: dict[str, Any] | None = None,
         aliases: dict[str, tuple[str, ...]] | None = None, absent: dict[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments for `fn` (a function or a config class) at this target version.

    required: passed as given (None included) under the name, or the first of its
      `aliases` the signature has; a name it has neither way is signature drift.
    optional: None means "leave the target's default" (not passed); any other value is
      passed under its name or alias where the signature has one or takes ``**kwargs``, and
      is signature drift where it does not (never silently dropped).
    absent: for a parameter that comes and goes between versions, how a version without it
      behaves (no cap: None; one fixed estimator: its value). A requested value equal to it
      is not passed where the parameter is missing; another value is an option that version
      lacks (`Unsupported` without "signature drift": not a failed call). A parameter the
      signature requires and nothing else supplies gets this value.
    A parameter without a default that nothing supplies is drift too.
    Drift raises `Unsupported` naming the signature and the boundary."""
    params = parameters(fn)
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    absent = absent or {}
    for watcher in _WATCHERS:
        watcher(fn, absent)
    out: dict[str, Any] = {}

    def place(key: str, value: Any, strict: bool) -> None:
        hit = next((n for n in (key, *((aliases or {}).get(key, ()))) if n in params), None)
        if hit is not None or (not strict and has_var_kw):
            out[hit or key] = value
        elif key in absent:
            if not _same(value, absent[key]):
                raise Unsupported(f"option missing: {getattr(fn, '__qualname__', fn)} has no parameter {key!r} at this "
                                  f"version (it always behaves as {key}={absent[key]!r}), so {key}={value!r} cannot "
                                  f"be applied (boundary {boundary!r})")
        elif strict:
            raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r} (boundary {boundary!r})")
        else:
            raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r}, so {key}={value!r} "
                              f"cannot be applied (boundary {boundary!r})")

    for key, value in required.items():
        place(key, value, True)
    for key, value in (optional or {}).items():
        if value is not None:
            place(key, value, False)
    for name, p in params.items():
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in out:
            if name in absent:
                out[name] = absent[name]
                continue
            raise Unsupported(f"signature drift: {signature_text(fn)} requires {name!r}, which the adapter cannot "
                              f"supply (boundary {boundary!r})")
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - tensors and the like: not the neutral scalar
        return False


def lookup(mods: dict[str, types.ModuleType], name: str, modules: tuple[str, ...], *, target: str, boundary: str,
           version: str, errors: dict[str, str] | None = None) -> Callable:
    """The callable `name` from the first of `modules` (loaded, in `mods`) that has it;
    else `Unsupported` naming the files searched, the version and, for a module that did
    not import, why (`errors`)."""
    for mod in modules:
        fn = getattr(mods.get(mod), name, None)
        if callable(fn):
            return fn
    where = " or ".join(m.replace(".", "/") + ".py" for m in modules)
    why = "".join(f" ({errors[m]})" for m in modules if errors and m in errors)
    raise Unsupported(f"{target} has no {name} in {where} at {version}{why} (needed by boundary {boundary!r})")


def resolve(call: str) -> Any:
    """The object a declared call (``"module:qualname"``, as in `@implements`) names in this
    process, importing its module if need be; None where the module does not import or
    lacks the name (a target version without it)."""
    module, _, qualname = call.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - any import failure means: not here
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj
