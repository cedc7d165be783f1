"""Inside the worker: read the functions a target's boundaries map, and put a mutant in place.

Runs in the worker (its forked child), where the adapter has imported the target. A mutant
is compiled from its source and its code object assigned to the original function
(`fn.__code__ = ...`): every reference to the function sees it at once (the module's name,
`from m import fn` elsewhere, a table of functions, an adapter attribute bound at load),
and it keeps the original's globals, defaults and closure. It lives in one forked child and
dies with it, so one warm worker serves every mutant.
"""

from __future__ import annotations

import __future__
import ast
import functools
import importlib
import inspect
import operator
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Callable

from . import reach

_SWAPS: dict[str, Callable] = {}  # function name -> what its swap mutant calls (this forked child only)
_PLACED: dict[types.FunctionType, types.CodeType] = {}  # a function with a mutant in place here -> its own code
_FUTURES = functools.reduce(operator.or_, (getattr(__future__, f).compiler_flag for f in __future__.all_feature_names))


def _lookup(name: str) -> Any:
    """The object "module:qualname" names, a class attribute as the class body holds it (a
    staticmethod, classmethod or property object, not what the attribute access returns)."""
    module, _, qual = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = vars(obj)[part] if isinstance(obj, type) and part in vars(obj) else getattr(obj, part)
    return obj


def resolve(name: str) -> types.FunctionType:
    """The plain function behind "module:qualname" (a method, static or class method, a
    property's getter, a decorated function's wrapped original)."""
    obj = _lookup(name)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    obj = inspect.unwrap(obj)
    if not isinstance(obj, types.FunctionType):
        raise TypeError(f"{name} is a {type(obj).__name__}, not a Python function")
    return obj


def members(name: str) -> list[str]:
    """A mapped name as the functions it stands for: a class (mapped whole, so that --coverage
    counts its body once) stands for the methods its body defines; anything else for itself."""
    try:
        obj = _lookup(name)
    except Exception:  # noqa: BLE001 - absent at this commit: `sources` reports why
        return [name]
    if not isinstance(obj, type):
        return [name]
    kinds = (types.FunctionType, staticmethod, classmethod, property)
    return [f"{name}.{k}" for k, v in vars(obj).items() if isinstance(v, kinds)] or [name]


def sources(adapter, root: Path | None) -> dict[str, Any]:
    """{"mapping": boundary -> calls, "functions": name -> {source, line, file} or {error}}
    for every boundary the adapter implements."""
    table = type(adapter).mapping()
    mapping = {b: [m for c in table[b]["calls"] for m in members(c)] for b in adapter.supported() if b in table}
    functions: dict[str, dict[str, Any]] = {}
    for name in sorted({c for calls in mapping.values() for c in calls}):
        try:
            fn = resolve(name)
            lines, line = inspect.getsourcelines(fn)
            file = Path(inspect.getsourcefile(fn) or fn.__code__.co_filename)
            shown = _shown(file, root, fn.__module__)
            functions[name] = {"source": textwrap.dedent("".join(lines)), "line": line, "file": shown}
        except Exception as e:  # noqa: BLE001 - a call the adapter names that cannot be read: reported, not mutated
            functions[name] = {"error": f"{type(e).__name__}: {e}"}
    return {"mapping": mapping, "functions": functions}


def _shown(file: Path, root: Path | None, module: str) -> str:
    """A function's file as the report names it: relative to the checkout, else to the
    folder holding its top-level package (`verl/trainer/ppo/core_algos.py`)."""
    top = sys.modules.get(module.split(".")[0])
    bases = [Path(root)] if root else []
    if top is not None and getattr(top, "__file__", None):
        bases.append(Path(top.__file__).resolve().parent.parent)
    for b in bases:
        try:
            return str(file.resolve().relative_to(b.resolve()))
        except ValueError:
            continue
    return file.name


def _bare(fdef: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """No decorators, defaults or annotations: the code object is all a mutant replaces, and
    evaluating those here would need the module's names."""
    fdef.decorator_list, fdef.returns = [], None
    a = fdef.args
    a.defaults, a.kw_defaults = [], [None] * len(a.kwonlyargs)
    for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
        if x is not None:
            x.annotation = None


def compiled(fn: types.FunctionType, source: str, line: int) -> types.CodeType:
    """The code object of `source` (a definition of `fn`), with `fn`'s free variables (a
    method's `__class__` cell, a closure's names) so it can take `fn`'s place."""
    fdef = ast.parse(textwrap.dedent(source)).body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ValueError("a mutant's source is one function definition")
    _bare(fdef)
    fdef.name = fn.__code__.co_name
    free = [v for v in fn.__code__.co_freevars if v != "__class__"]
    if free:  # every free variable referenced, so the code keeps the closure's layout
        fdef.body.insert(0, ast.If(ast.Constant(False), [ast.Expr(ast.Tuple([ast.Name(v, ast.Load()) for v in free],
                                                                              ast.Load()))], []))
    parts = fn.__qualname__.split(".")
    inner: ast.stmt = fdef
    if len(parts) > 1 and parts[-2] != "<locals>":  # a method: in a class of its name (super(), name mangling)
        inner = ast.ClassDef(parts[-2], [], [], [fdef], [])
        fetch = f"vars({parts[-2]})[{fdef.name!r}]"
    elif fdef.name not in free:  # a module's function: named apart in the factory, so a recursive call
        fdef.name = fetch = "__sentinel_function__"  # stays a global (the module's, mutant in place)
    else:
        fetch = fdef.name
    factory = ast.FunctionDef("__sentinel_mutant__", ast.arguments([], [], None, [], [], None, []),
                              [*(ast.Assign([ast.Name(v, ast.Store())], ast.Constant(None)) for v in free), inner,
                               ast.Return(ast.parse(fetch, mode="eval").body)], [])
    module = ast.Module([factory], [])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, line - 1)
    scope: dict[str, Any] = {}
    # under its module's `from __future__` imports, not this file's (a nested def's annotations)
    code = compile(module, fn.__code__.co_filename, "exec", flags=fn.__code__.co_flags & _FUTURES, dont_inherit=True)
    exec(code, scope)  # noqa: S102 - the mutant, by design
    new = scope["__sentinel_mutant__"]()
    if isinstance(new, (staticmethod, classmethod)):
        new = new.__func__
    return new.__code__.replace(co_name=fn.__code__.co_name, co_qualname=fn.__code__.co_qualname)


def swapped(name: str) -> Callable:
    """What a swap mutant's body calls (`mutants.swapped`)."""
    return _SWAPS[name]


def _swap(fn: types.FunctionType, name: str, replacement: str) -> None:
    """Register the call of swap mutant `name`: the replacement, run with `fn`'s original code
    back in place, so a replacement that builds on the function it replaces (a plant that
    falls back to the correct math) gets the original, not itself."""
    repl, original = resolve(replacement), fn.__code__

    def call(*args: Any, **kwargs: Any) -> Any:
        mutant, fn.__code__ = fn.__code__, original
        try:
            return repl(*args, **kwargs)
        finally:
            fn.__code__ = mutant
    _SWAPS[name] = call


def apply(mutant: dict[str, Any]) -> None:
    """Put the mutant in place of its function, in this process (a forked child), its reach
    marker armed (`reach`). One an earlier call put in place here is taken out first: where the
    worker cannot fork (CUDA initialised at load) every mutant runs in the worker itself, and the
    one before would run in this one's jobs and fire its marker."""
    for f, code in _PLACED.items():
        f.__code__ = code
    _PLACED.clear()
    _SWAPS.clear()  # the previous swap mutant's call: only its own mutant may answer `swapped`
    fn = resolve(mutant["function"])
    reach.arm()
    if mutant.get("swap"):
        _swap(fn, mutant["function"], mutant["swap"])
    _PLACED[fn] = fn.__code__
    fn.__code__ = compiled(fn, mutant["source"], int(mutant.get("line", 1)))
