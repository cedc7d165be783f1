"""Options read: the args/config objects an adapter hands a trainer, as recording proxies.

An adapter passes every args/config object it builds through `recorded(obj)` (argparse or
types.SimpleNamespace, a dataclass, a dict, an OmegaConf-like config). While a call is being
observed (`recording(boundary, roots)`, entered by `sentinel.observe`), the object returned
is a copy whose class is a subclass of the original's (so `isinstance` still holds) that logs
each option the *trainer's* code reads, with the value read: a read counts when the frame
that reads is in a file under one of `roots` (the trainer's checkout or package), so the
adapter's own reads (building or translating the config) never count. Nested config objects
are recorded too, under dotted names (`actor.clip_ratio`). Outside a recording, `recorded`
returns the object itself: `sentinel run` pays nothing.

`drain()` hands over (and forgets) what this process recorded: boundary -> option -> the
distinct values read, which the hunt reports as options read / varied / read but not varied.

Trainer options (the one home of the rule): an option a trainer reads that no boundary
config has (TRL's `beta`, OpenRLHF's KL estimator) is declared in the adapter's
`option_domains` under the key `trainer:<name>`, its values with the trainer's default
first. The hunt draws it like a config key (both sides of a differential hunt get the same
drawn config); a drawn config holds the key only at a value other than the default, so a
catalog scenario (which never sets it) and a default draw are the same config. The adapter
reads it from the config it is called with (`config["trainer:beta"]`: `Adapter.call` fills
in the default) and sets it on the args it builds. An adapter that does not declare the key
(the reference, another target) answers Unsupported: the referee's "no such config".
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterator

# boundary -> option -> {repr(value): value}, for every recording this process made
_LOG: dict[str, dict[str, dict[str, Any]]] = {}
_ACTIVE: list["_Recording"] = []
_SUBCLASSES: dict[type, type] = {}
MAX_VALUES = 20  # distinct values kept per option (enough to tell varied from pinned)
_PLAIN = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class Pin:
    """An option the trainer reads that an adapter keeps at one value on purpose, with why
    (an adapter's `pinned` table; `sentinel list boundaries --target T` shows it)."""

    boundary: str  # "*" for every boundary
    option: str  # the name as recorded (dotted for a nested config)
    reason: str

    def applies(self, boundary: str) -> bool:
        return self.boundary in ("*", boundary)


def pin(boundary: str, *options: str, reason: str) -> tuple[Pin, ...]:
    """`pinned = (*pin("policy_loss", "qkv_format", reason="..."), ...)`."""
    return tuple(Pin(boundary, o, reason) for o in options)


# Path answers kept across calls (a hunt records every call: ~0.7 ms each to realpath the roots
# again). Keyed by the paths themselves: another checkout is another root path.
@functools.lru_cache(maxsize=256)
def _real_roots(roots: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(os.path.realpath(r) for r in roots if r)


@functools.lru_cache(maxsize=16384)
def _under(filename: str, roots: tuple[str, ...]) -> bool:
    """`filename` is one of the (real) `roots` or in a folder among them."""
    real = os.path.realpath(filename)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


class _Recording:
    def __init__(self, boundary: str, roots: tuple[str, ...]):
        self.boundary = boundary
        self.roots = _real_roots(roots)

    def by_trainer(self, filename: str) -> bool:
        return _under(filename, self.roots)

    def read(self, name: str, value: Any) -> None:
        if isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value):
            value = tuple(value)  # a range (reward clip bounds): one option value
        elif _config_like(value):  # a nested config is recorded by its own reads; as a value it is
            value = Nested(f"<{type(value).__name__}>")  # "set" (AReaL's adv_norm: a NormConfig or None)
        elif not isinstance(value, _PLAIN):
            return  # a model, a tensor or a method is no option
        values = _LOG.setdefault(self.boundary, {}).setdefault(name, {})
        if len(values) < MAX_VALUES:
            values.setdefault(repr(value), value)


@contextlib.contextmanager
def recording(boundary: str, roots: tuple[str, ...] | list[str]) -> Iterator[None]:
    """Record the trainer's option reads of objects made by `recorded` for the duration."""
    rec = _Recording(boundary, tuple(roots))
    _ACTIVE.append(rec)
    try:
        yield
    finally:
        _ACTIVE.pop()
        for k in [k for k, e in _REC.items() if e[0] is rec]:
            del _REC[k]


class Nested(str):
    """The value of an option read as a nested config object (its class name in brackets): an
    option read only so is the nested config's own fields, and is not reported; one read as a
    config and as None (an optional normalisation) was varied."""


def drain() -> dict[str, dict[str, list[Any]]]:
    """What this process recorded since the last drain: boundary -> option -> values read
    (an option read only as nested configs left out: its fields are the options)."""
    out = {b: {n: [str(x) if isinstance(x, Nested) else x for x in v.values()] for n, v in sorted(opts.items())
               if not all(isinstance(x, Nested) for x in v.values())} for b, opts in _LOG.items()}
    _LOG.clear()
    return out


TRAINER = "trainer:"  # the prefix of a drawn config key that names a trainer option


def is_trainer(key: str) -> bool:
    """The config key names a trainer option (no boundary has it)."""
    return isinstance(key, str) and key.startswith(TRAINER)


def trainer_options(config: dict[str, Any]) -> dict[str, Any]:
    """The trainer options a config sets (name without the prefix -> value)."""
    return {k[len(TRAINER):]: v for k, v in config.items() if is_trainer(k)}


def with_trainer_defaults(config: dict[str, Any], domains: dict[str, tuple[Any, ...]], who: str,
                          boundary: str) -> dict[str, Any]:
    """`config` with every trainer option the adapter declares on `boundary` (`domains`, its
    option_domains there) at its default where unset; a trainer option it does not declare, or
    a value outside its domain, is a config this target does not have (Unsupported)."""
    from ..errors import Unsupported
    for k, v in config.items():
        if is_trainer(k) and (k not in domains or v not in domains[k]):
            have = ", ".join(f"{o}: {list(vs)}" for o, vs in domains.items() if is_trainer(o)) or "none"
            raise Unsupported(f"{who} has no trainer option {k}={v!r} on {boundary} (its trainer options: {have})")
    return {**{k: vs[0] for k, vs in domains.items() if is_trainer(k)}, **config}


def _config_like(value: Any) -> bool:
    if isinstance(value, dict):
        return True
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return True
    return hasattr(value, "__dict__") and type(value).__module__ in ("argparse", "types") or \
        type(value).__name__ in ("DictConfig",) or getattr(type(value), "__sentinel_options__", False)


def recorded(obj: Any, prefix: str = "", *, instance: bool = False) -> Any:
    """`obj` as a recording copy while a call is recorded; `obj` itself otherwise (or when it
    is not a config object this module knows how to record). `instance`: record `obj`'s own
    attributes although it is no config object (a bare trainer whose loss reads `self.beta`)."""
    if not _ACTIVE or not (instance or _config_like(obj)) or type(obj) in _SUBCLASSES.values():
        return obj
    rec = _ACTIVE[-1]
    cls = _subclass(type(obj))
    if cls is None:
        return obj
    if isinstance(obj, dict):
        out = cls(obj)
    elif type(obj).__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE: a copy can take the subclass
        out = copy.copy(obj)
        object.__setattr__(out, "__class__", cls)
    else:  # types.SimpleNamespace: a static type, rebuilt as the subclass
        out = cls(**vars(obj))
    _REC[id(out)] = (rec, prefix, out)  # the object kept too: its id is not reused meanwhile
    return out


# id of a recording copy -> (its recording, its name prefix, the copy), until the recording ends
_REC: dict[int, tuple[_Recording, str, Any]] = {}


def _entry(obj: Any) -> tuple[_Recording, str] | None:
    e = _REC.get(id(obj))
    return (e[0], e[1]) if e is not None and e[2] is obj and e[0] in _ACTIVE else None


def _note(rec: _Recording, prefix: str, name: str, value: Any, holder: Any, depth: int = 2) -> Any:
    """Log one read (when the reader, `depth` frames up, is the trainer's) and return the value,
    a nested config object recorded under the dotted name."""
    frame = sys._getframe(depth)
    if rec.by_trainer(frame.f_code.co_filename):
        rec.read(prefix + name, value)
    if _config_like(value) and type(value) not in _SUBCLASSES.values():
        inner = recorded(value, prefix + name + ".")
        if inner is not value:
            _store(holder, name, inner)
        return inner
    return value


def _store(holder: Any, name: str, value: Any) -> None:
    """Keep a recorded nested object in its parent, so the trainer's writes to it persist."""
    if isinstance(holder, dict):
        dict.__setitem__(holder, name, value)
        return
    d = getattr(holder, "__dict__", None)
    if isinstance(d, dict) and name in d:
        d[name] = value


def _subclass(base: type) -> type | None:
    if base in _SUBCLASSES:
        return _SUBCLASSES[base]
    if issubclass(base, dict):
        def getitem(self, key, depth=2):
            value = base.__getitem__(self, key)
            entry = _entry(self)
            return _note(*entry, str(key), value, self, depth) if entry else value

        def get(self, key, default=None):
            return getitem(self, key, 3) if base.__contains__(self, key) else default
        body: dict[str, Any] = {"__getitem__": getitem, "get": get}
    else:
        def getattribute(self, name):
            value = base.__getattribute__(self, name)
            if name.startswith("_"):
                return value
            entry = _entry(self)
            if entry is None or not _is_option(self, base, name):
                return value
            return _note(*entry, name, value, self)
        body = {"__getattribute__": getattribute}
    try:
        cls = type(f"Recorded{base.__name__}", (base,), {**body, "__module__": base.__module__,
                                                          "__sentinel_recorded__": base})  # export writes the base
    except TypeError:  # a final class: not recorded
        cls = None
    _SUBCLASSES[base] = cls  # type: ignore[assignment]
    return cls


def _is_option(obj: Any, base: type, name: str) -> bool:
    """A data attribute or field (a method or property of the class is not an option)."""
    d = object.__getattribute__(obj, "__dict__") if hasattr(obj, "__dict__") else {}
    if name in d:
        return True
    if dataclasses.is_dataclass(base) and name in {f.name for f in dataclasses.fields(base)}:
        return True
    content = d.get("_content") if isinstance(d, dict) else None  # OmegaConf keeps its keys here
    return isinstance(content, dict) and name in content
