"""An adapter's stand-in classes, written out for a bundle's validate.py.

Some trainer functions take objects the adapter builds because the real ones need a GPU, a
model or several processes: TRL's ``_compute_loss`` scores a `CanonicalPolicy` and gathers
through a one-process accelerator; AReaL's PPOActor holds a `_NoEngine`. A class marked
``__sentinel_standin__ = True`` is such a stand-in: validate.py gets its source verbatim
(it is the adapter's, small, and the bundle's reader sees exactly what the trainer was fed),
with what its code names from its module: modules as imports, constants by value, typing
names, RL-Sentinel's exceptions as plain ``Exception`` subclasses, and other stand-ins. A
function marked so (`spying.composes`: slime's packed logits) is written the same way, without
its decorator.
Anything else it names (a helper function of the adapter) makes it `NotSource`: the export
says so rather than writing a class that fails when called.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import textwrap
import types
import typing

STANDIN = "__sentinel_standin__"


class NotWritable(Exception):
    """A stand-in whose code needs something that has no source form here."""


def is_standin(obj: type | types.FunctionType) -> bool:
    return bool(getattr(obj, "__dict__", {}).get(STANDIN))


def _source(obj: type | types.FunctionType) -> str:
    """Its source from its `def`/`class` line (decorators are the adapter's marks)."""
    src = textwrap.dedent(inspect.getsource(obj))
    node = ast.parse(src).body[0]
    return "\n".join(src.splitlines()[node.lineno - 1:]) + "\n"


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def write(cls: type | types.FunctionType, into: dict[str, str]) -> None:
    """Put `cls`'s source, and the lines its code needs first, into `into` (name -> source,
    in definition order; a stand-in another one names comes before it)."""
    if cls.__name__ in into:
        return
    try:
        src = _source(cls)
    except (OSError, TypeError, SyntaxError, IndexError) as e:
        raise NotWritable(f"stand-in {cls.__qualname__}: no source ({e})") from None
    if "<locals>" in cls.__qualname__:
        raise NotWritable(f"stand-in {cls.__qualname__} is defined inside a function")
    into[cls.__name__] = ""  # a cycle between stand-ins ends here
    scope = vars(sys.modules[cls.__module__])
    needs: list[str] = []
    # dont_inherit: this module's `from __future__ import annotations` would hide the names
    # validate.py (which evaluates annotations) needs
    for name in sorted(_names(compile(src, f"<{cls.__name__}>", "exec", dont_inherit=True)) - {cls.__name__}):
        if name not in scope or name.startswith("__") or (hasattr(builtins, name) and scope[name] is getattr(builtins, name)):
            continue  # an attribute name, a local, a module dunder or a builtin
        value = scope[name]
        if isinstance(value, types.ModuleType):
            needs.append(f"import {value.__name__}" + (f" as {name}" if value.__name__ != name else ""))
        elif value is None or isinstance(value, (bool, int, float, str)):
            needs.append(f"{name} = {value!r}")
        elif getattr(typing, name, None) is value:
            needs.append(f"from typing import {name}")
        elif isinstance(value, (type, types.FunctionType)) and is_standin(value):
            write(value, into)
        elif isinstance(value, type) and issubclass(value, Exception) and value.__module__.startswith("sentinel"):
            needs.append(f"class {name}(Exception):\n    pass")
        else:
            raise NotWritable(f"stand-in {cls.__qualname__} names {name} ({type(value).__name__}), which has no "
                              "source form in a bundle")
    into[cls.__name__] = "\n".join([*needs, "", src.rstrip()]).strip() + "\n"


__all__ = ["NotWritable", "STANDIN", "is_standin", "write"]
