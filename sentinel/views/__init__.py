"""The view layer: every report kind in every format, from one place.

- `model`: the view of a report, one class per kind (run, gate, compare, bisect, matrix,
  hunt, history, mutate), built from a report file or a live command's report;
- `registry`: the formats by name (text, markdown, junit, json, html, and any registered);
- one package or module per format, each dispatching on the view's kind: `terminal`,
  `markdown`, `junit`, `jsonfile`, `html` (jinja2 templates, autoescaped), `github`;
- `charts`: every chart (compare, hunt progress, history timeline), drawn by matplotlib;
  `plot` writes the history chart to a file (`sentinel history --plot`);
- `palette`: verdict colours and symbols; `locations`: paths and links as reports show
  them; `grids`: per-token values; `plain`: a failure as plain text lines.

The core never imports this package; commands call `show` and `render`.
"""

from __future__ import annotations

from typing import Any

from .model import KINDS, AnyView, build, load
from .registry import Format, get, names, register

__all__ = ["KINDS", "AnyView", "Format", "build", "get", "load", "names", "register", "render", "show"]


def render(view: AnyView, fmt: str, **options: Any) -> str:
    """The view as text in format `fmt`."""
    return get(fmt).render(view, **options)


def show(view: AnyView, console, fmt: str = "text", **options: Any) -> None:
    """The view on a Rich console: in colour where the format can, else as its text."""
    f = get(fmt)
    if f.show is not None:
        f.show(view, console, **options)
    else:
        console.file.write(f.render(view, **options))
