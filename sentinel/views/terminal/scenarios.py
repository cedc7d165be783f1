"""The terminal view of scenario results (run, gate, compare, matrix) and of a bisect: a
Rich table, a panel per violation or error with per-token grids, the verdict in one line.
A compare leads with its compare verdicts. Every string from a report passes inert.terminal."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ...inert import terminal
from ...report import InvariantResult, ScenarioResult
from ..grids import Grid, fmt, invariant_grid, value_labels
from ..model import verdict_word
from ..palette import label, style


def _rich_grid(g: Grid, title: str = "") -> Table:
    """Per-token grid: rows are sequences, columns tokens; offending positions in red, with
    the expected value (broadcast to the grid, grids.fitted) beneath."""
    width = max(len(r) for r in g.observed)
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None)
    t.add_column("row", style="dim", justify="right")
    for j in range(width):
        t.add_column(f"t{j}", justify="right")
    for i, row in enumerate(g.observed):
        cells = []
        for j, v in enumerate(row):
            cell = Text(terminal(fmt(v)))
            if (i, j) in g.bad:
                cell.stylize("bold white on red")
                if g.expected is not None:
                    cell.append(f"\n≠{terminal(fmt(g.expected_at(i, j)))}", style="dim")
            cells.append(cell)
        t.add_row(str(i), *cells)
    return t


def invariant_detail(inv: InvariantResult, r: ScenarioResult | None = None) -> Group:
    """An invariant's verdict, message and, when violated, its values (a grid for a token
    tensor, with the mask of `r`, the scenario result, when given)."""
    head = Text.assemble((f"{inv.verdict:9}", style(inv.verdict)), " ", (terminal(inv.family), "bold"), " ",
                         (terminal(json.dumps(next(iter(inv.config.values()), {}))), "dim"))
    parts: list[Any] = [head]
    if inv.message:
        parts.append(Text("  " + terminal(inv.message, lines=True)))
    if inv.verdict == "violated":
        g = invariant_grid(r, inv)
        ob, ex = value_labels(inv)
        if g is not None and not g.row_vector:
            parts += [Text(f"  {terminal(ob)} per token (red: offending, ≠ {terminal(ex)}):", style="dim"), _rich_grid(g)]
        else:
            parts.append(Text(terminal(f"  {ob} {fmt(inv.observed)}  {ex} {fmt(inv.expected)}")))
        if any(inv.positions):
            parts.append(Text(f"  offending positions {inv.positions[:16]}", style="dim"))
    if inv.exception_info:
        parts.append(Text("  " + terminal(inv.exception_info.message, lines=True), style="magenta"))
    return Group(*parts)


def _verdict(v: str) -> Text:
    """A verdict as its symbol and word, in its colour: never the colour alone."""
    return Text(label(v), style(v))


def _scenarios(report, console: Console) -> None:
    table = Table(title=f"RL-Sentinel · {len(report.results)} scenario(s)", title_justify="left")
    table.add_column("scenario", no_wrap=True)  # an id is copied into commands: never folded mid-word
    for col in ("target", "boundary", "verdict", "why"):
        table.add_column(col, overflow="fold")
    for r in report.results:
        table.add_row(Text(terminal(r.id)), Text(terminal(r.target)), Text(terminal(r.boundary)),
                      _verdict(r.verdict), Text(terminal(r.reason.split("; ")[0][:100])))
    console.print(table)


def _panels(report, console: Console, verbose: bool) -> None:
    unloadable = {k: t for k, t in report.targets.items() if t.load_error is not None}
    for key, t in unloadable.items():  # one panel per target that did not load, not one per scenario
        n = sum(r.target == key for r in report.results)
        body = [Text(terminal(f"{t.load_error.type}: {t.load_error.message}", lines=True), style="magenta"),
                Text(f"{n} scenario(s) could not run", style="dim")]
        if verbose and t.load_error.traceback:
            body.append(Text(terminal(t.load_error.traceback, lines=True), style="dim"))
        console.print(Panel(Group(*body), title=Text(terminal(f"target {key} could not be loaded")),
                            border_style=style("error"), title_align="left"))
    for r in report.results:
        if r.target in unloadable and r.verdict == "error" and not r.invariants:
            continue
        if r.verdict in ("violated", "error") or verbose:
            body: list[Any] = [Text(terminal(f"{r.file}  ·  {r.title}"), style="dim")]
            if r.function:
                body.append(Text(terminal(f"called {r.function.text()}"), style="dim"))
            body += [invariant_detail(i, r) for i in r.invariants]
            if r.exception_info:
                body.append(Text(terminal(f"{r.exception_info.type}: {r.exception_info.message}", lines=True), style="magenta"))
                if verbose and r.exception_info.traceback:
                    body.append(Text(terminal(r.exception_info.traceback, lines=True), style="dim"))
            console.print(Panel(Group(*body), title=Text(terminal(f"{r.id} on {r.target}: {r.verdict}")),
                                border_style=style(r.verdict), title_align="left"))


def _counts(report) -> str:
    s = report.statistics
    return (f"{s.holds} hold · {s.violated} violated · {s.errors} error · {s.unsupported} unsupported"
            + (f" · {s.excluded} excluded" if s.excluded else "") +
            f"  ({s.invariants_held} invariants held, {s.invariants_violated} violated) in {report.duration_s:.2f} s")


def _word(word: str) -> Text:
    return Text(label(word), style(word))


def run(view, console: Console, verbose: bool = False) -> None:
    report = view.report
    _scenarios(report, console)
    _panels(report, console, verbose)
    word = verdict_word(report)
    console.print(Text.assemble(_word(word), f"  {_counts(report)}"))
    if word == "NOTHING RAN":
        console.print(Text("nothing was checked: every scenario is unsupported or excluded on its target (exit 5)",
                           style="bold yellow"))


def _compare_line(view) -> Text:
    """The compare verdicts in one line, worst first: what a compare is read for."""
    report = view.report
    word = "NOTHING RAN" if report.nothing_ran() else "PASS" if report.success else "FAIL"
    line = Text.assemble(("compare ", "bold"), _word(word), ": ")
    groups: dict[str, list[str]] = {}
    for c in view.comparisons():
        groups.setdefault(c.verdict, []).append(c.id)
    for n, (v, ids) in enumerate(groups.items()):
        if n:
            line.append(" · ")
        line.append_text(_verdict(v))
        line.append(" " + terminal(", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")))
    return line


def compare(view, console: Console, verbose: bool = False) -> None:
    """The compare verdicts first (a line, then the table), then each side's scenarios."""
    report = view.report
    console.print(_compare_line(view))
    ct = Table(title="compare", title_justify="left")
    for col in ("scenario", "base", "head", "verdict"):
        ct.add_column(col)
    for c in view.comparisons():
        ct.add_row(Text(terminal(c.id)), _verdict(c.base), _verdict(c.head), _verdict(c.verdict))
    console.print(ct)
    _scenarios(report, console)
    _panels(report, console, verbose)
    console.print(Text.assemble(_compare_line(view), f"  (base: {view.side_counts('base')}; head: "
                                f"{view.side_counts('head')}) in {report.duration_s:.2f} s"))


def matrix(view, console: Console, verbose: bool = False) -> None:
    """Invariants down, target@version across; a cell is a verdict or why it could not run."""
    table = view.table
    scenarios = len({r["scenario"] for r in table["rows"]})
    t = Table(title=f"conformance matrix · {scenarios} scenarios", title_justify="left")
    t.add_column("scenario", overflow="fold")
    t.add_column("invariant")
    for c in table["columns"]:
        t.add_column(Text(terminal(c)), overflow="fold")
    for r in table["rows"]:
        t.add_row(Text(terminal(r["scenario"])), Text(terminal(r["invariant"])),
                  *[Text(terminal(label(v) if style(v) else v), style(v) or "dim") for v in r["cells"].values()])
    console.print(t)
    if verbose:
        run(view, console, verbose)


def bisect(view, console: Console, verbose: bool = False) -> None:
    b = view.log
    for p in b.probes if verbose else []:
        console.print(Text(terminal(f"  tried {p.commit[:10]} {p.verdict:<10} {p.subject[:60]}")), highlight=False)
    if b.first:
        console.print(Text.assemble((terminal(b.first.commit), "bold"), terminal(f" is the first commit where {b.scenario} is "),
                                    (terminal(b.bad_verdict), "bold"), terminal(f" (was {b.good_verdict})")))
        console.print(Text("  " + terminal(b.first.subject)))
    else:
        console.print(Text.assemble((f"skipped commits leave {len(b.candidates)} candidates:", "yellow"),
                                    " " + " ".join(terminal(c[:10]) for c in b.candidates)))
    console.print(f"tried {b.tried} revisions of {b.commits_in_range} in range, {b.duration_s:.1f} s", highlight=False)
