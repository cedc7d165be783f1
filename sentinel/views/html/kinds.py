"""What the pages of the reports that are not scenario results show, as values for their
templates: a history (templates/history.html.j2: flips, the timeline chart, every commit of
the range), a mutation score with its survivors' diffs, a bisect log."""

from __future__ import annotations

from typing import Any

from .. import charts
from ...links import github_url

ROLES = {"sample": "evaluated (sample)", "probe": "evaluated (bisect probe)", "skipped": "skipped: no loss-path change",
         "between": "not evaluated (between samples)"}


def history(view) -> dict[str, Any]:
    h = view.history
    commits = list(h.commits)
    return {"h": h, "base": github_url(h.repo), "summary": view.summary_line(), "chart": charts.history(view),
            "commits": commits, "names": view.scenario_order(), "roles": ROLES,
            "evaluated": len(view.evaluated()), "skipped": sum(c.role == "skipped" for c in commits),
            "flip_at": {(f.scenario, f.commit): f.change for f in h.flips if f.commit}}


def mutate(view) -> dict[str, Any]:
    s = view.mutate
    return {"s": s, "tables": view.tables(), "survivors": view.survivor_groups(), "reach": view.reach_line(),
            "claims": view.claims_line(), "hunt": view.hunt_line(),
            "others": {v: [m for m in s.mutants if m.verdict == v] for v in ("equivalent", "error", "killed")}}


def bisect(view) -> dict[str, Any]:
    return {"b": view.log}
