"""Where a gradient check's input reaches the trainer's call: an argument that carries the
drawn input as it is (in one of `runtime.LAYOUTS`), or an argument the adapter built from it
with one of its composition functions (`spying.composes`: slime's loss_function takes logits
the adapter packs from the log-probs). validate.py then rebuilds that argument with the same
function, written out, from a leaf that is the drawn tensor, and differentiates by the leaf.

The argument is rebuilt only where it is proven to be the function's output: the argument as
validate.py writes it equals the function run on its inputs as validate.py writes them;
anything else refuses, as before."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import runtime, standins
from .codegen import NotSource, Writer


def carries(value: Any, want: np.ndarray) -> str | None:
    """The layout in which `value` (a tensor that requires grad, or a list of them) is the
    drawn input `want`, else None."""
    leaves = value if isinstance(value, list) else [value]
    if not leaves or not all(getattr(t, "requires_grad", False) for t in leaves):
        return None
    for layout in runtime.LAYOUTS:
        try:
            got = runtime.canonical(value, layout, want.shape)
        except (ValueError, TypeError, IndexError):
            continue
        if runtime.same_values(got, want):
            return layout
    return None


def _run(src: str) -> Any:
    """A written value evaluated as validate.py would (tensors, numbers, lists, dicts)."""
    import torch
    return eval(src, {"torch": torch, "np": np, "nan": math.nan, "inf": math.inf})  # noqa: S307 - our own source


def _equal(a: Any, b: Any) -> bool:
    import torch
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and runtime.same_values(
            runtime.as_array(a), runtime.as_array(b), atol=0.0, rtol=0.0)
    return False


def rebuilt(call: dict[str, Any], args: dict[str, Any], want: np.ndarray,
            composed: list[tuple[Callable, dict[str, Any], Any]], writer: Writer) -> dict[str, Any] | str:
    """{"call": `call` with the built argument replaced by the function's call on `BUILT`,
    "wrt_path", "layout"} where an argument of the call is a composition function's result
    on an input that carries the drawn input; else why not (a sentence, or "" when no argument
    was built that way)."""
    why = []
    for name, value in args.items():
        for fn, given, result in composed:
            if result is not value or name not in call.get("args", {}):
                continue
            leaf = next(((k, lay) for k, v in given.items() if (lay := carries(v, want)) is not None), None)
            if leaf is None:
                why.append(f"{fn.__name__} built {name}, but from no input that carries the drawn one")
                continue
            try:
                writer.begin()
                inputs = {k: writer.source(v) for k, v in given.items()}
                standins.write(fn, writer.standins)
                proven = _equal(_run(call["args"][name]), fn(**{k: _run(v) for k, v in inputs.items()}))
            except (NotSource, standins.NotWritable) as e:
                why.append(f"{fn.__name__} built {name}, but cannot be written out: {e}")
                continue
            except Exception as e:  # noqa: BLE001 - the written inputs do not run: no proof
                why.append(f"{fn.__name__} built {name}, but does not run on its written inputs ({type(e).__name__}: {e})")
                continue
            if not proven:
                why.append(f"{name} is not {fn.__name__}'s output on its recorded inputs")
                continue
            return {"call": {**call, "args": {**call["args"], name: f"{fn.__name__}(**BUILT[{name!r}])"},
                             "built": {**call.get("built", {}), name: inputs}},
                    "wrt_path": f"BUILT[{name!r}][{leaf[0]!r}]", "layout": leaf[1]}
    return "; ".join(why)


__all__ = ["carries", "rebuilt"]
