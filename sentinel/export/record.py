"""The recording instruments of the recording run (a subprocess, `python -m sentinel.export.select`): the scenario through
its target's adapter exactly as `sentinel run` calls it, with every call the adapter makes
into the trainer's code recorded as data (function, arguments as Python source, what came
back), and every import the trainer's modules made logged, so the bundle can stub only the
modules the recorded functions' import path reaches.
"""

from __future__ import annotations

import builtins
import gc
import importlib
import importlib.util
import inspect
import sys
import types
from pathlib import Path
from typing import Any, Callable

from sentinel.adapters import binding, spying

from . import standins

CO_VARARGS, CO_VARKEYWORDS = 0x04, 0x08
HARNESS = (str(Path(__file__).resolve().parents[1]),)  # the sentinel package: never the trainer


class ImportLog:
    """Every `import` statement and `importlib.import_module` call run while active: importer
    module -> absolute names asked for."""

    def __init__(self) -> None:
        self.edges: dict[str, set[str]] = {}
        self._orig = builtins.__import__

    def __enter__(self) -> "ImportLog":
        orig = self._orig

        def hooked(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - builtins' names
            importer = (globals or {}).get("__name__", "?")
            try:
                full = importlib.util.resolve_name("." * level + name, (globals or {}).get("__package__")) \
                    if level else name
            except (ImportError, ValueError):
                full = name
            names = {full, *(f"{full}.{f}" for f in (fromlist or ()) if f != "*")}
            self.edges.setdefault(importer, set()).update(names)
            return orig(name, globals, locals, fromlist, level)

        real_import_module = self._orig_module = importlib.import_module

        def import_module(name, package=None):  # a package's lazy __getattr__ (AReaL's areal.engine)
            importer = sys._getframe(1).f_globals.get("__name__", "?")
            try:
                full = importlib.util.resolve_name(name, package) if name.startswith(".") else name
            except (ImportError, ValueError):
                full = name
            self.edges.setdefault(importer, set()).add(full)
            return real_import_module(name, package)

        builtins.__import__ = hooked
        importlib.import_module = import_module
        return self

    def __exit__(self, *exc: Any) -> None:
        builtins.__import__ = self._orig
        importlib.import_module = self._orig_module

    def closure(self, start: str) -> set[str]:
        """The module names `start`'s import reaches (its parent packages' imports included)."""
        parts = start.split(".")
        todo = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        seen: set[str] = set()
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            todo.extend(self.edges.get(m, ()))
            p = m.split(".")
            todo.extend(".".join(p[:i]) for i in range(1, len(p)))
        return seen


class Calls:
    """sys.setprofile hook: each call from adapter code into trainer code (outermost only:
    what the trainer function calls itself is its own business), its arguments written as
    source at entry, its live arguments and return value kept for matching."""

    def __init__(self, is_trainer: Callable[[str], bool], is_adapter: Callable[[str], bool], writer) -> None:
        self.is_trainer, self.is_adapter, self.writer = is_trainer, is_adapter, writer
        self.calls: list[dict[str, Any]] = []
        # per call: its arguments, what it returned, and what the adapter's spies saw inside it
        self.live: list[tuple[dict[str, Any], Any, list[tuple[dict[str, Any], Any]]]] = []
        self._active = None
        self._listening = spying.listening(self._spied)
        self._absent: dict[types.CodeType, dict[str, Any]] = {}  # bind's absent values, by the bound code
        # the adapter's composition functions' calls (`spying.composes`): (function, arguments, result)
        self.composed: list[tuple[Callable, dict[str, Any], Any]] = []
        self._composing = None
        self.used: set[str] = set()  # top-level modules whose code the trainer's calls ran
        # per call: the tensors its result and arguments held when it returned (a later call
        # may put more into the same object: verl's data, which compute_advantage fills in)
        self.fresh: list[set[int]] = []
        self._watching = binding.watching(self._bound)

    def __enter__(self) -> "Calls":
        self._listening.__enter__()
        self._watching.__enter__()
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)
        self._watching.__exit__(*exc)
        self._listening.__exit__(*exc)

    def _bound(self, fn: Any, absent: dict[str, Any]) -> None:
        """The adapter bound `fn`'s arguments declaring `absent` (how a version without one of
        them behaves): kept for the call of that function that follows."""
        target = getattr(fn, "__init__", None) if isinstance(fn, type) else fn
        code = getattr(inspect.unwrap(target) if callable(target) else target, "__code__", None)
        if code is not None and absent:
            self._absent[code] = dict(absent)

    def _spied(self, owner: Any, name: str, arguments: dict[str, Any], out: Any) -> None:
        """A spied call inside the active trainer call: validate.py spies the same place, so
        `SPY[i]` (the i-th spied call: its bound arguments and result) replays it."""
        if self._active is None:
            return
        entry, (args, _, seen) = self.calls[-1], self.live[-1]
        seen.append((arguments, out))
        place = {"name": name}
        if isinstance(owner, types.ModuleType):
            place["module"] = owner.__name__
        elif isinstance(owner, type):
            place["class"] = [owner.__module__, owner.__qualname__]
        elif (arg := next((k for k, v in args.items() if v is owner), None)) is not None:
            place["arg"] = arg
        else:
            place["error"] = f"the spied {name!r} lives on a {type(owner).__name__} that is not an argument of the call"
        places = entry.setdefault("spies", [])
        if place not in places:
            places.append(place)
        entry.setdefault("spied", []).append(places.index(place))  # capture i -> its place

    def _hook(self, frame, event, arg) -> None:
        if self._active is not None:  # inside a trainer call: which modules' code it runs
            if event == "call":
                self.used.add(str(frame.f_globals.get("__name__", "")).split(".")[0])
            elif event == "c_call":
                owner = getattr(arg, "__self__", None)
                name = getattr(arg, "__module__", None) or (
                    getattr(owner, "__name__", None) if isinstance(owner, types.ModuleType)
                    else getattr(type(owner), "__module__", None))
                self.used.add(str(name or "").split(".")[0])
        if self._composing is None and self._active is None and event == "call" \
                and frame.f_code in spying.COMPOSERS:
            self._composing = frame
            self.composed.append((spying.COMPOSERS[frame.f_code], dict(frame.f_locals), None))
            return
        if event == "return" and frame is self._composing:
            self._composing = None
            self.composed[-1] = (*self.composed[-1][:2], arg)
            return
        if event == "call" and self._active is None:
            code = frame.f_code
            if not self.is_trainer(code.co_filename):
                return
            caller, hops = frame.f_back, 0
            # through a library's wrapper (OpenRLHF's @torch.no_grad() methods: the adapter calls
            # torch's decorate_context, which calls the trainer's function)
            while caller is not None and hops < 3 and not self.is_trainer(caller.f_code.co_filename) \
                    and not self.is_adapter(caller.f_code.co_filename):
                caller, hops = caller.f_back, hops + 1
            if caller is None or not self.is_adapter(caller.f_code.co_filename):
                return
            if code.co_name.startswith("<"):  # a lambda or comprehension of the trainer's module
                return
            self._active = frame
            self.calls.append(self._describe(frame))
        elif event == "return" and frame is self._active:
            self._active = None
            self.live[-1] = (self.live[-1][0], arg, self.live[-1][2])
            import torch
            self.fresh[len(self.live) - 1] = {id(v) for _, v in candidates(arg, self.live[-1][0], self.live[-1][2])
                                              if isinstance(v, torch.Tensor)}

    def _describe(self, frame) -> dict[str, Any]:
        code = frame.f_code
        names = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
        loc = frame.f_locals
        star = code.co_varnames[len(names)] if code.co_flags & CO_VARARGS else None
        extra = len(names) + (1 if star else 0)
        starstar = code.co_varnames[extra] if code.co_flags & CO_VARKEYWORDS else None
        fn = _function_of(frame)
        factory = None
        if fn is None:  # a closure the trainer returned (slime's get_sum_of_sample_mean -> sum_of_token):
            # replayable by calling the recorded call that returned it, else not at all
            factory = next((i for i, (_, r, _) in enumerate(self.live) if getattr(r, "__code__", None) is code), None)
        entry: dict[str, Any] = {"module": frame.f_globals.get("__name__"), "qualname": getattr(fn, "__qualname__", code.co_name),
                                 "file": code.co_filename, "line": code.co_firstlineno}
        if fn is not None and hasattr(fn, "__wrapped__"):  # a decorated function: where its body is
            inner = inspect.unwrap(fn).__code__
            entry.update(module=fn.__module__, file=inner.co_filename, line=inner.co_firstlineno)
        args = {n: loc[n] for n in names if n in loc}
        self.live.append((dict(args), None, []))
        self.fresh.append(set())
        if factory is not None:
            entry["factory"] = factory
            entry["qualname"] = f"{self.calls[factory]['qualname']}.<locals>.{code.co_name}"
        elif fn is None and code.co_freevars:
            entry["error"] = f"{code.co_name} is a closure whose maker was not called from the adapter: not importable"
        try:
            # every named argument by name; those that must go by position (positional-only, or
            # before a non-empty *args) are listed in `positional`
            self.writer.begin()
            entry["args"] = {n: self.writer.source(v) for n, v in args.items()}
            cut = code.co_argcount if star and loc.get(star) else code.co_posonlyargcount
            entry["positional"] = names[:cut]
            entry["star"] = [self.writer.source(v) for v in loc.get(star) or ()] if star else []
            entry["kwextra"] = {k: self.writer.source(v) for k, v in (loc.get(starstar) or {}).items()} if starstar else {}
            # it takes a trainer-wide object: what earlier calls did to that object matters
            entry["shared"] = self.writer.shared
            # an argument at the value the adapter declared for a version without it: validate.py
            # leaves it out where the function it runs against has no such parameter
            absent = self._absent.get(code, {})
            entry["absent"] = sorted(n for n, v in args.items() if n in absent and _same(v, absent[n]))
        except Exception as e:  # noqa: BLE001 - codegen.NotSource and anything a repr raises
            entry["error"] = f"{type(e).__name__}: {e}"
        return entry


def _same(a: Any, b: Any) -> bool:
    """Exactly the declared value: the same object, or an equal plain scalar (never a tensor)."""
    if a is b:
        return True
    plain = (bool, int, float, str)
    return type(a) is type(b) and isinstance(a, plain) and a == b


def _function_of(frame):
    """The function object a frame runs (for its qualified name), where findable: by its
    module's globals and classes, else (a decorator's wrapper, AReaL's trace_perf
    sync_wrapper around PPOActor.compute_advantages) the closure over this frame's cells,
    which `functools.wraps` named after the method it decorates."""
    code = frame.f_code
    if code.co_freevars:
        cells = [frame.f_locals.get(n) for n in code.co_freevars]
        for f in gc.get_referrers(code):
            if isinstance(f, types.FunctionType) and f.__code__ is code and hasattr(f, "__wrapped__") \
                    and all(c.cell_contents is v for c, v in zip(f.__closure__ or (), cells)):
                return f
    for value in frame.f_globals.values():
        target = inspect.unwrap(value) if callable(value) else None
        if getattr(target, "__code__", None) is code:
            return target
        if isinstance(value, type):
            for attr in vars(value).values():
                f = getattr(attr, "__func__", attr)
                if getattr(inspect.unwrap(f) if callable(f) else f, "__code__", None) is code:
                    return f
    # a method of a class its module holds wrapped (slime's `@ray.remote` RolloutManager): the one
    # function object that runs this code, named where it was defined
    owners = [f for f in gc.get_referrers(code) if isinstance(f, types.FunctionType) and f.__code__ is code]
    if len(owners) == 1 and "<locals>" not in owners[0].__qualname__ and not code.co_freevars:
        return owners[0]
    return None


def candidates(result: Any, args: dict[str, Any], spied=()) -> list[tuple[str, Any]]:
    """(source path, value) for every tensor, list of tensors or list of numbers in what a call
    returned (`result...`), in its arguments after the call (`ARGS[...]`) and in what the
    adapter's spies saw inside it (`SPY[i][0][...]` arguments, `SPY[i][1]` result), through
    lists, dicts and objects' attributes, depth <= 3."""
    import torch
    out: list[tuple[str, Any]] = []

    def walk(path: str, v: Any, depth: int) -> None:
        if isinstance(v, torch.Tensor) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
            out.append((path, v))
        elif isinstance(v, (list, tuple)) and v:
            if all(isinstance(t, torch.Tensor) for t in v) or all(isinstance(t, (int, float)) for t in v):
                out.append((path, list(v)))
            if depth < 3:
                for i, t in enumerate(v[:8]):
                    walk(f"{path}[{i}]", t, depth + 1)
        elif isinstance(v, dict) and depth < 3:
            for k, t in v.items():
                if isinstance(k, str):
                    walk(f"{path}[{k!r}]", t, depth + 1)
        elif depth < 3 and isinstance(getattr(v, "__dict__", None), dict) and not isinstance(v, type) \
                and (not callable(v) or standins.is_standin(type(v))) and type(v).__module__ != "builtins":
            # an object the trainer fills in (OpenRLHF's Experience.advantages): by attribute
            for k, t in vars(v).items():
                if k.isidentifier() and not k.startswith("_"):
                    walk(f"{path}.{k}", t, depth + 1)

    walk("result", result, 0)
    if isinstance(result, tuple) and len(result) >= 2 and isinstance(result[0], torch.Tensor) and (
            isinstance(result[1], (int, float)) and not isinstance(result[1], bool)
            or isinstance(result[1], torch.Tensor) and result[1].dim() == 0):
        # (loss, normaliser): slime's loss_function returns both and Megatron divides (one micro-batch)
        with torch.no_grad():
            out.append(("result[0] / result[1]", result[0] / result[1]))
    for name, v in args.items():
        walk(f"ARGS[{name!r}]", v, 1)
    for i, (arguments, got) in enumerate(spied):
        walk(f"SPY[{i}][1]", got, 1)
        for name, v in arguments.items():
            walk(f"SPY[{i}][0][{name!r}]", v, 2)
    return out
