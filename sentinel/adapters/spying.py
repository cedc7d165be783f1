"""Recording the calls of a target function while calling through (`spy`).

`listening(fn)`: while active, `fn(owner, name, arguments, result)` sees every spied call too
(the exporter's recording: an observable read inside a trainer call, such as the token loss
verl hands `agg_loss`, is replayed by spying the same place in the exported validate.py).

`composes`: marks a pure-torch function of the adapter that builds a trainer call's argument
from the drawn inputs (slime's packed logits from the log-probs); the exporter writes it into
validate.py and rebuilds that argument from a leaf, so a gradient reaches the drawn input."""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator

_LISTENERS: list[Callable[[Any, str, dict[str, Any], Any], None]] = []
COMPOSERS: dict[Any, Callable] = {}  # code object -> the marked function (`composes`)


def composes(fn: Callable) -> Callable:
    """Mark `fn` (returned unchanged) as a composition function: module level, pure torch, and
    naming only modules, constants and other marked functions, so its source runs on its own."""
    fn.__sentinel_standin__ = True  # type: ignore[attr-defined] - written out as the stand-ins are
    COMPOSERS[fn.__code__] = fn
    return fn


@contextlib.contextmanager
def listening(fn: Callable[[Any, str, dict[str, Any], Any], None]) -> Iterator[None]:
    _LISTENERS.append(fn)
    try:
        yield
    finally:
        _LISTENERS.remove(fn)


@contextlib.contextmanager
def spy(module: Any, name: str,
        before: Callable[[dict[str, Any]], None] | None = None) -> Iterator[list[tuple[dict[str, Any], Any]]]:
    """Replace ``module.name`` (a module's or class's attribute, or the entry `name` of a dict
    such as a trainer's function registry) by a call-through wrapper for the duration; yields
    the list of (bound arguments, result) of every call. `before` sees the bound arguments
    before the real call (to copy what the call may change). Target code that looks the name
    up at call time reaches the wrapper. Where there is no `name`, nothing changes (no calls)."""
    calls: list[tuple[dict[str, Any], Any]] = []
    if isinstance(module, dict):
        get, put = module.get, module.__setitem__
    else:
        get, put = (lambda k, d=None: getattr(module, k, d)), (lambda k, v: setattr(module, k, v))
    real = get(name, None)
    if real is None:
        yield calls
        return
    sig = inspect.signature(real)

    def arguments(args: tuple, kwargs: dict) -> dict[str, Any]:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return {}
        bound.apply_defaults()
        return dict(bound.arguments)

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        if before is not None:
            before(arguments(args, kwargs))
        out = real(*args, **kwargs)
        calls.append((arguments(args, kwargs), out))
        for listener in _LISTENERS:
            listener(module, name, calls[-1][0], out)
        return out

    wrapper.__sentinel_spy__ = True  # type: ignore[attr-defined] - a call-through: never written out
    put(name, wrapper)
    try:
        yield calls
    finally:
        put(name, real)
