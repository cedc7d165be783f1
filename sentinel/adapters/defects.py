"""Adapter defects: an error that is the adapter's fault, not the target's, named by its line.

At an old commit an adapter may call a trainer function with a keyword that version lacks (a
`TypeError` raised in the adapter's own frame: the callee never started), or return outputs
its boundary's contract forbids (`ContractError`). Neither says anything about the trainer:
reported as a target `error`, or as a difference between two commits, it would blame the
target for the adapter's bug. `defect` recognises them; the worker then reports the error as
type ``AdapterDefect`` (`sentinel.errors.ADAPTER_DEFECT`) with the adapter's file and line, which a compare, a history and a
differential hunt never count as the target's (sentinel/hunt/driver/differential.py).
"""

from __future__ import annotations

import inspect
import sys
import traceback
from pathlib import Path
from typing import Any

from sentinel.errors import ADAPTER_DEFECT, ContractError

_FRAMEWORK = Path(__file__).resolve().parent  # sentinel/adapters/: the glue every adapter shares


def _folders(adapter: Any) -> list[Path]:
    """The adapter's own code: the package of each class in its MRO outside sentinel's core, and
    the framework."""
    out = [_FRAMEWORK]
    for klass in type(adapter).__mro__:
        mod = sys.modules.get(klass.__module__)
        file = getattr(mod, "__file__", None)
        if file and klass.__module__.split(".")[0] != "sentinel":
            out.append(Path(file).resolve().parent)
    return out


def _short(file: str) -> str:
    """`adapters/<target>/x.py` or `sentinel/adapters/x.py`: the last three parts of the path."""
    return "/".join(Path(file).parts[-3:])


def defect(adapter: Any, boundary: str, exc: BaseException) -> str | None:
    """Where the adapter went wrong (``file:line in function``), when `exc` is an adapter defect
    on `boundary`; None when it is the target's own error (or not an error of either kind)."""
    if isinstance(exc, ContractError):
        impl = type(adapter)._implemented.get(boundary)
        method = getattr(type(adapter), impl.method, None) if impl else None
        try:
            file, line = inspect.getsourcefile(method), inspect.getsourcelines(method)[1]
        except (TypeError, OSError):
            return f"{type(adapter).__name__}.{impl.method if impl else boundary}"
        return f"{_short(file)}:{line} in {impl.method}"
    if isinstance(exc, TypeError) and exc.__traceback__ is not None:
        last = traceback.extract_tb(exc.__traceback__)[-1]  # where it was raised
        here = Path(last.filename).resolve()
        if any(here.is_relative_to(folder) for folder in _folders(adapter)):
            return f"{_short(last.filename)}:{last.lineno} in {last.name}"
    return None


def as_error(adapter: Any, boundary: str, exc: BaseException) -> dict[str, str] | None:
    """The worker's error record of an adapter defect (None: not one)."""
    where = defect(adapter, boundary, exc)
    if where is None:
        return None
    return {"type": ADAPTER_DEFECT, "message": f"adapter defect at {where}: {type(exc).__name__}: {exc}"}
