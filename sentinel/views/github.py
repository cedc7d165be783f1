"""A report as GitHub Actions workflow commands: `::error file=F,line=L,title=T::MESSAGE`.

Printed in a workflow step, each line becomes an annotation on the pull request's diff at
the scenario file's line: the violated invariant's own line where the file is in the
checkout, the scenario's first line for a target error. A compare report annotates what
got worse or stayed broken at head (a scenario that still fails at base alone is no news).
Reports without scenario results (hunt, history, mutate, a bisect log) have nothing to point
at: they render as no annotation.
"""

from __future__ import annotations

from pathlib import Path

from .. import yamlfile
from ..report import Report, ScenarioResult
from ..spec import SpecError
from .registry import Format

_BAD_AT_HEAD = ("regressed", "still-violated", "inconclusive")


def _escape(text: str, prop: bool = False) -> str:
    """GitHub's escaping of a command's message (and, with `prop`, of a property value)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def _lines(file: str, scenario_id: str) -> tuple[int, dict[tuple, int]] | None:
    """(first line, line of each field path) of scenario `scenario_id` in `file` (relative to
    the working folder, as every report names it), or None where that file is not here."""
    path = Path(file)
    if path.is_absolute() or not path.is_file():
        return None  # the bundled catalog, or a report made elsewhere: no line to point at
    try:
        for start, doc, lines in yamlfile.documents(yamlfile.read(path), file):
            if isinstance(doc, dict) and doc.get("id") == scenario_id:
                return start, lines
    except (SpecError, OSError):
        pass
    return None


def _invariant_line(result: ScenarioResult, index: int, where: tuple[int, dict[tuple, int]] | None) -> int | None:
    """The line of the invariant as written (`- family: {...}`): the report lists invariants in
    the scenario's order, so the index is checked against the family written there, and a
    family written once is found by its name."""
    if where is None:
        return None
    start, lines = where
    family = result.invariants[index].family
    if ("invariants", index, family) in lines:
        return lines[("invariants", index)]
    same = sorted({p[1] for p in lines if len(p) == 3 and p[0] == "invariants" and p[2] == family})
    return lines[("invariants", same[0])] if len(same) == 1 else lines.get(("invariants",), start)


def _commands(result: ScenarioResult, where) -> list[str]:
    file = result.file if where else None
    head = f"file={_escape(file, True)}," if file else ""
    out = []
    if result.verdict == "violated":
        for n, inv in enumerate(result.invariants):
            if inv.verdict != "violated":
                continue
            line = _invariant_line(result, n, where) or (where[0] if where else None)
            title = f"{result.id}: {inv.family} violated on {result.target}"
            props = head + (f"line={line}," if file and line else "") + f"title={_escape(title, True)}"
            out.append(f"::error {props}::{_escape(inv.message or inv.family)}")
    elif result.verdict == "error":
        line = f"line={where[0]}," if where else ""
        title = f"{result.id}: error on {result.target}"
        out.append(f"::error {head}{line}title={_escape(title, True)}::{_escape(result.reason or 'target error')}")
    return out


def github(report: Report) -> str:
    """One `::error` line per violated invariant (and per scenario a target error stopped)."""
    results = report.results
    if report.kind == "compare":
        bad = {c.id for c in report.comparisons if c.verdict in _BAD_AT_HEAD}
        results = [r for r in results if r.target == "head" and r.id in bad]
    lines = []
    for r in results:
        lines += _commands(r, _lines(r.file, r.id))
    return "".join(line + "\n" for line in lines)


def render(view, **_: object) -> str:
    report = getattr(view, "report", None)
    return github(report) if report is not None and report.kind in ("run", "compare") else ""


FORMAT = Format("github", "::error annotations at each violated invariant's scenario line (GitHub Actions)",
                render)
