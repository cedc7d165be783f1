"""A failing scenario as plain text lines: the body of a JUnit failure and of a pytest failure."""

from __future__ import annotations

import json
from typing import Iterable

from ..report import ScenarioResult
from .grids import fmt, value_labels


def failure_lines(r: ScenarioResult) -> Iterable[str]:
    """Each invariant that did not hold: its config and message, observed and expected values,
    the difference and the offending positions."""
    for i in r.invariants:
        if i.verdict != "held":
            yield f"{i.verdict}: {json.dumps(i.config)}: {i.message}"
            ob, ex = value_labels(i)
            yield f"  {ob + ':':11s} {fmt(i.observed)}"
            yield f"  {ex + ':':11s} {fmt(i.expected)}"
            if i.difference is not None:
                yield f"  difference: {fmt(i.difference)}"
            if any(i.positions):
                yield f"  positions:  {i.positions}"
