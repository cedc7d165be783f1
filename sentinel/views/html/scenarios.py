"""What the scenario pages (run, gate, compare, matrix, hunt) show, as values for the
templates (templates/scenarios.html.j2, panel.html.j2): heatmaps of observed and expected
values per token (masked cells hatched, offending cells outlined), a panel's facts and
invariants, the compare and hunt charts. The templates escape every value (autoescape);
paths are shown as views.locations allows."""

from __future__ import annotations

import json
import math
from typing import Any

from ...report import Report, ScenarioResult
from .. import charts
from ..grids import Grid, cell_pair, fmt, invariant_grid, is_scalar, number, output_name, value_grids, value_labels
from ..locations import Locations
from ..model import headline, ordered
from ..palette import COMPARE_ORDER, SCENARIO_ORDER

TRIGGER_LIMIT = 20_000  # characters of trigger JSON in a panel


def _float(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


# a diverging scale from the colour-blind-safe pair blue (below 0) and orange (above): not the
# vermillion of a violation; an offending cell is outlined and bold, never only coloured
LOW, HIGH = (0, 114, 178), (230, 159, 0)


def _mix(c: tuple[int, int, int], a: float) -> str:
    return "rgb({},{},{})".format(*(int(round(255 + (x - 255) * a)) for x in c))


HEAT = {"low": _mix(LOW, 1.0), "high": _mix(HIGH, 1.0)}


def cell_colour(v: float | None, scale: float) -> tuple[str, str]:
    """(background, text colour); yellow for a non-finite value."""
    if v is None or not math.isfinite(v):
        return "#fff3b0", "#1f2328"
    t = max(-1.0, min(1.0, v / scale)) if scale > 0 else 0.0
    a = abs(t)
    return _mix(HIGH if t > 0 else LOW, a), ("#ffffff" if a > 0.6 and t < 0 else "#1f2328")


def _scale(*grids: list[list[Any]] | None) -> float:
    vals = [abs(f) for g in grids if g for row in g for v in row if (f := _float(v)) is not None and math.isfinite(f)]
    return max(vals, default=0.0) or 1.0


def _cell(g: Grid, values: list[list[Any]], i: int, j: int | None, scale: float, which: str) -> dict[str, Any]:
    row = values[i] if i < len(values) else []
    if j is None or j >= len(row):
        return {"gap": "…" if j is None else ""}
    v = row[j]
    bg, fg = cell_colour(_float(v), scale)
    bad = (i, j) in g.bad
    info = f"row {i}, {'row ' + str(j) if g.row_vector else 'token ' + str(j)}: {which} {fmt(v)}"
    if bad and g.expected is not None and which == "observed":
        info += f", {g.expected_as} {fmt(g.expected_at(i, j))}"
    if g.masked(i, j):
        info += f" (masked: {g.mask_name} 0)"
    text = number(v) if not bad or g.expected is None else cell_pair(v, g.expected_at(i, j))[0 if which == "observed" else 1]
    cls = " ".join(c for c, on in (("masked", g.masked(i, j)), ("bad", bad)) if on)
    return {"gap": None, "cls": cls, "bg": bg, "fg": fg, "info": info, "text": text}


def heatmaps(g: Grid) -> list[dict[str, Any]]:
    """The grid's observed heatmap and, when it has one, its expected one: rows are sequences,
    columns tokens (or rows, for a row tensor); a large grid shows the window around its
    offending cells, … for the rest."""
    scale = _scale(g.observed, g.expected)
    rows, cols = g.window(rows=48, cols=96)
    columns = ["…" if j is None else f"{'r' if g.row_vector else 't'}{j}" for j in cols]
    out = []
    for which, values, title in (("observed", g.observed, g.observed_as), ("expected", g.expected, g.expected_as)):
        if values is None:
            continue
        body = [{"head": "…", "cells": [{"gap": ""} for _ in cols]} if i is None else
                {"head": "" if g.row_vector else i, "cells": [_cell(g, values, i, j, scale, which) for j in cols]}
                for i in rows]
        out.append({"name": g.name, "which": which, "title": title, "row_vector": g.row_vector, "columns": columns,
                    "rows": body})
    return out


def _details(r: ScenarioResult, shown: set) -> dict[str, Any]:
    """One result's invariants: those not held with their heatmap (once per output), the held
    ones by name, and the outputs no invariant's heatmap showed."""
    bad = []
    for inv in (i for i in r.invariants if i.verdict != "held"):
        d: dict[str, Any] = {"inv": inv, "output": output_name(inv), "grid": None, "above": False, "scalar": False,
                             "observed": None, "config": json.dumps(next(iter(inv.config.values()), {}))}
        if inv.verdict == "violated":
            g = invariant_grid(r, inv)
            ob, ex = value_labels(inv)
            d.update(observed_as=ob, expected_as=ex)
            if g is not None:
                d["above"] = g.key() in shown
                d["grid"] = None if d["above"] else g
                shown.add(g.key())
            else:
                d.update(scalar=is_scalar(inv.observed), observed=fmt(inv.observed)[:2000], expected=fmt(inv.expected)[:2000],
                         difference=fmt(inv.difference) if is_scalar(inv.difference) and inv.difference is not None else "")
        bad.append(d)
    held = [(i, output_name(i)) for i in r.invariants if i.verdict == "held"]
    outputs = [g for g in value_grids(r) if g.key() not in shown]
    return {"result": r, "bad": bad, "held": held, "outputs": outputs}


def panel_facts(report: Report, loc: Locations, rs: list[ScenarioResult]) -> dict[str, Any]:
    r0 = rs[0]
    shown: set = set()
    provenance = []
    for p in r0.provenance:
        p = loc.scrub(p)
        provenance.append((p if p.startswith(("https://", "http://")) else None, p))
    trigger = json.dumps({"config": r0.config, "inputs": r0.inputs})
    return {"worst": min((r.verdict for r in rs), key=SCENARIO_ORDER.__getitem__), "many": len(report.targets) > 1,
            "search": " ".join([r0.id, r0.title, r0.boundary, *(r.verdict for r in rs)]).lower(),
            "comparison": next((c for c in report.comparisons if c.id == r0.id), None),
            "file": loc.relative(r0.file), "provenance": provenance, "results": [_details(r, shown) for r in rs],
            "inputs": value_grids(r0, "inputs"), "trigger": trigger[:TRIGGER_LIMIT]}


def context(view) -> dict[str, Any]:
    """The scenario page's values: the verdict line, the run's facts, the charts, the panels."""
    report = view.report
    loc = Locations(report)
    word, line = (view.headline() if view.kind == "hunt" else headline(report)).split(": ", 1)
    failing, rest = ordered(report)
    h = report.hunt
    first = {f.property: f for f in h.findings} if h else {}
    return {
        "title": f"RL-Sentinel {word}: {line}", "word": word.removeprefix("compare ").removeprefix("hunt "), "line": line,
        "tone": "unsupported" if report.nothing_ran() else "holds" if report.success else "violated",
        "report": report, "s": report.statistics, "env": report.environment, "loc": loc,
        "reproduce": loc.reproduce(report.command),
        "comparisons": sorted(report.comparisons, key=lambda c: COMPARE_ORDER[c.verdict]),
        "compare_chart": charts.compare(report, loc) if report.comparisons else None,
        "hunt": h, "hunt_chart": charts.hunt(h) if h else None, "first": first,
        "properties": sorted(h.properties, key=lambda p: (p.property not in first, p.property)) if h else [],
        "matrix": view.table if view.kind == "matrix" else None,
        "failing": failing, "rest": rest, "panel_facts": lambda rs: panel_facts(report, loc, rs)}
