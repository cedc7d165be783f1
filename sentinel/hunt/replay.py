"""A search's condition as Hypothesis replays it, on both sides of a hunt (torch-free: the
differential driver in the CLI process uses it as much as a round in the worker)."""

from __future__ import annotations

from typing import Any, Callable

from .. import strategies as S


def fingerprint(ex: S.Example) -> str:
    return repr((ex.config, {n: a.tobytes() for n, a in ex.inputs.items()},
                 {n: {k: a.tobytes() for k, a in v.items()} for n, v in ex.variants.items()}, ex.params))


def replayable(condition: Callable[[list[S.Example]], bool], best: dict[str, Any]) -> Callable[[list[S.Example]], bool]:
    """A search's condition as Hypothesis needs it: a batch it once held for holds again, with
    `best` (the search's violation) restored to that batch's. Hypothesis replays the batch it
    shrank to and raises FlakyFailure where the answer changed, and a search's answer for a
    batch depends on the clock (its shrinking budget, spent sooner on a loaded machine) and on
    which violation is its best by then."""
    held: dict[tuple[str, ...], dict[str, Any]] = {}

    def cond(batch: list[S.Example]) -> bool:
        key = tuple(fingerprint(e) for e in batch)
        if key in held:
            best.clear()
            best.update(held[key])
            return True
        if condition(batch):
            held[key] = dict(best)
            return True
        return False
    return cond
