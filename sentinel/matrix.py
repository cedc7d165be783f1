"""Conformance matrix: which invariants hold in which framework and version.

Columns are target@version, rows are (scenario, invariant); a cell is the invariant's
verdict, or why the cell could not run (`unsupported`, `not installed`, `error`).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from . import targets, verdicts
from .report import Report
from .runner import TargetSpec
from .spec import Scenario



@dataclass
class Column:
    key: str
    spec: TargetSpec | None  # None: cannot run here
    why: str = ""


def parse_target(entry: str) -> TargetSpec:
    """`name`, `name=REPO` or `name=REPO@REV`."""
    name, _, loc = entry.partition("=")
    repo, _, rev = loc.partition("@") if loc else ("", "", "")
    label = name + (f"@{rev}" if rev else ("@repo" if repo else ""))
    return TargetSpec(name, repo or None, rev or None, label=label)


def default_columns(names: list[str] | None = None) -> list[Column]:
    """reference, each installed package, and each checkout named by its env variable."""
    cols = []
    for name in names or targets.names():
        info = targets.get(name)
        package, env = info.package, info.repo_env
        if name == "reference":
            cols.append(Column("reference", TargetSpec("reference")))
            continue
        if package:
            if importlib.util.find_spec(package) is not None:
                cols.append(Column(f"{name}@installed", TargetSpec(name, label=f"{name}@installed")))
            else:
                cols.append(Column(f"{name}@installed", None, f"not installed ({info.install or 'pip install ' + package})"))
        if env:
            if os.environ.get(env):
                cols.append(Column(f"{name}@HEAD", TargetSpec(name, os.environ[env], None, label=f"{name}@HEAD")))
            elif info.needs_repo:
                cols.append(Column(f"{name}@HEAD", None, f"no checkout (set {env})"))
    return cols


def shared(scenarios: list[Scenario], columns: list[Column]) -> list[Scenario]:
    """Scenarios that apply to more than one of the columns' targets."""
    names = {c.spec.name if c.spec else c.key.split("@")[0] for c in columns}
    return [s for s in scenarios if sum(s.applies_to(n) for n in names) > 1]


def table(report: Report, scenarios: list[Scenario], columns: list[Column]) -> dict[str, Any]:
    """Rows (scenario, invariant) x columns -> verdict or reason."""
    by = {(r.target, r.id): r for r in report.results}
    rows = []
    for sc in scenarios:
        for i, inv in enumerate(sc.invariants):
            cells = {}
            for c in columns:
                if c.spec is None:
                    cells[c.key] = c.why
                    continue
                r = by.get((c.key, sc.id))
                if r is None:
                    cells[c.key] = "not run"
                else:
                    cells[c.key] = verdicts.matrix_cell(r.verdict, r.invariants[i].verdict if i < len(r.invariants) else None)
            rows.append({"scenario": sc.id, "invariant": inv.family, "cells": cells})
    return {"columns": [c.key for c in columns], "rows": rows}
