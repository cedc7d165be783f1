"""The markdown format: a pull-request comment or job summary, one view per report kind.

- `scenarios`: run, gate, compare (its verdicts first), matrix;
- `hunt`, `history`, `mutate`, `bisect`: those reports' own sections.
"""

from __future__ import annotations

from ..registry import Format, by_kind
from .bisect import bisect
from .history import history
from .hunt import hunt
from .mutate import mutate
from .scenarios import MARKDOWN_LIMIT, matrix, run

__all__ = ["MARKDOWN_LIMIT", "render"]

_KIND = by_kind({"run": run, "gate": run, "compare": run, "matrix": matrix, "bisect": bisect, "hunt": hunt,
                 "history": history, "mutate": mutate}, "markdown")


def render(view, **options: object) -> str:
    return _KIND(view)(view, **options)


FORMAT = Format("markdown", "a pull-request section (GitHub markdown)", render, suffix=".md")
