"""Reading a target function's local variables as it returns.

Some trainers build a per-token tensor inside one long function and hand on only its
reduction (TRL's ``GRPOTrainer._compute_loss`` builds ``per_token_loss`` and returns the
aggregated loss; OpenRLHF's ``PolicyLoss.forward`` keeps its IS weight ``vllm_is`` to
itself). `locals_on_return` records the named locals of every call of one function, as
they are at its ``return``: the very tensors the target computed (autograd graph included),
nothing recomputed here.

    with locals_on_return(GRPOTrainer._compute_loss, ("per_token_loss", "coef_1")) as seen:
        loss = trainer._compute_loss(model, inputs)
    per_token_loss = seen[-1]["per_token_loss"]

It installs a `sys.setprofile` hook for the duration (the previous one is put back and called
too), which reads the frames of that function's code object as they return. A profile hook,
not a trace hook: `sys.settrace` would replace coverage.py's tracer, and `hunt --coverage` then
saw none of the function's lines (OpenRLHF's PolicyLoss.forward measured 0 of 14 branches).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def locals_on_return(fn: Callable, names: tuple[str, ...], *also: Callable) -> Iterator[list[dict[str, Any]]]:
    """Yield a list that gets, for each call of `fn` (or of a function in `also`, called inside
    it: one hook reads them all) that returns (or raises) while the block runs, a dict of those
    of `names` that were bound at that moment."""
    codes = {c for f in (fn, *also) if (c := getattr(inspect.unwrap(f), "__code__", None)) is not None}
    seen: list[dict[str, Any]] = []
    if not codes:
        yield seen
        return

    before = sys.getprofile()
    # a profiler written in C (cProfile's) is no Python callable: it is paused for the block (its
    # counts miss the call) and put back with its own enable()
    chained = before if callable(before) else None

    def profiler(frame, event, arg):
        if chained is not None:
            chained(frame, event, arg)
        if event == "return" and frame.f_code in codes:
            values = frame.f_locals
            seen.append({n: values[n] for n in names if n in values})

    sys.setprofile(profiler)
    try:
        yield seen
    finally:
        if before is None or chained is not None:
            sys.setprofile(before)
        else:
            before.enable()
