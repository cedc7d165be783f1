"""The output formats: a name -> a renderer that takes any report kind's view.

A format is one module that defines `FORMAT = Format(...)`; adding one is that module and
its line in `BUILTIN`. A format defined elsewhere (a plugin, a test) calls `register`.
Modules are imported when first asked for, so `sentinel --help` pays for none of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import UsageError
from .model import KINDS

BUILTIN = {
    "text": "sentinel.views.terminal",
    "markdown": "sentinel.views.markdown",
    "junit": "sentinel.views.junit",
    "json": "sentinel.views.jsonfile",
    "html": "sentinel.views.html",
    "github": "sentinel.views.github",
}


@dataclass(frozen=True)
class Format:
    """How one format renders a view of any kind (sentinel/views/model.py: KINDS).

    `render(view, **options)` returns the text (options a format does not use are ignored:
    `verbose`, `source`); `show(view, console, **options)`, when given, prints to a Rich
    console instead (a terminal's colours); `suffix` is the usual file ending."""

    name: str
    help: str
    render: Callable[..., str]
    show: Callable[..., None] | None = None
    suffix: str = ".txt"


_registered: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add (or replace) a format; `sentinel report --format NAME` finds it from then on."""
    _registered[fmt.name] = fmt
    return fmt


def names() -> list[str]:
    return list(dict.fromkeys([*BUILTIN, *_registered]))


def get(name: str) -> Format:
    """The format called `name`; UsageError lists the known ones."""
    if name not in _registered and name in BUILTIN:
        _registered[name] = importlib.import_module(BUILTIN[name]).FORMAT
    if name not in _registered:
        raise UsageError(f"unknown format {name!r} (known: {', '.join(names())})")
    return _registered[name]


def by_kind(table: dict[str, Callable[..., Any]], fmt: str) -> Callable[[Any], Callable[..., Any]]:
    """A format's dispatch on the view's kind, with every kind covered (checked once, here)."""
    missing = set(KINDS) - set(table)
    if missing:
        raise TypeError(f"format {fmt} has no renderer for {', '.join(sorted(missing))}")
    return lambda view: table[view.kind]
