"""The terminal format: Rich tables, panels and timelines, one view per report kind.

- `scenarios`: run, gate, compare (its verdicts first), matrix, bisect;
- `hunt`, `history`, `mutate`: those reports' own views.
"""

from __future__ import annotations

import io

from rich.console import Console

from ..registry import Format, by_kind
from .history import timeline
from .hunt import hunt
from .mutate import mutate
from .scenarios import bisect, compare, matrix, run

_KIND = by_kind({"run": run, "gate": run, "compare": compare, "matrix": matrix, "bisect": bisect, "hunt": hunt,
                 "history": timeline, "mutate": mutate}, "text")


def show(view, console: Console, verbose: bool = False, **_: object) -> None:
    _KIND(view)(view, console, verbose)


def render(view, width: int = 120, **options: object) -> str:
    """The terminal view as plain text (no colour codes), `width` columns wide."""
    buf = io.StringIO()
    show(view, Console(file=buf, width=width, color_system=None, highlight=False), **options)
    return buf.getvalue()


FORMAT = Format("text", "the terminal view: tables, per-token grids, timelines", render, show=show)
