"""JSON: the report (or bisect log) as written, for machines."""

from __future__ import annotations

from ..report import dump
from .model import BisectView
from .registry import Format


def render(view, **_: object) -> str:
    if isinstance(view, BisectView):
        return view.log.model_dump_json(indent=2) + "\n"
    return dump(view.report)


FORMAT = Format("json", "the JSON report, as written", render, suffix=".json")
