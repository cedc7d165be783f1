"""Reports for people and machines: a Rich terminal view with per-token grids, a markdown
section for a pull request, and JUnit XML for CI."""

from __future__ import annotations

import json
import shlex
from typing import Any, Iterable
from xml.etree import ElementTree as ET

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .report import InvariantResult, Report, ScenarioResult

STYLE = {"holds": "green", "held": "green", "violated": "bold red", "error": "bold magenta", "skipped": "yellow",
         "unsupported": "yellow", "fixed": "green", "regressed": "bold red", "still-violated": "red",
         "holds-both": "green", "inconclusive": "magenta"}


def fmt(x: Any) -> str:
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, str):
        return x
    return json.dumps(x)


def _grid(values: Any, positions: list[list[int]], expected: Any = None, title: str = "") -> Table | Text | None:
    """Per-token grid: rows are sequences, columns tokens; offending positions in red, with
    the expected value beneath."""
    if not isinstance(values, list) or not values or not isinstance(values[0], list):
        return None
    bad = {tuple(p[:2]) for p in positions if len(p) >= 2}
    width = max(len(r) for r in values)
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None)
    t.add_column("row", style="dim", justify="right")
    for j in range(width):
        t.add_column(f"t{j}", justify="right")
    for i, row in enumerate(values):
        cells = []
        for j, v in enumerate(row):
            cell = Text(fmt(v))
            if (i, j) in bad:
                cell.stylize("bold white on red")
                if isinstance(expected, list) and i < len(expected) and isinstance(expected[i], list):
                    cell.append(f"\n≠{fmt(expected[i][j])}", style="dim")
            cells.append(cell)
        t.add_row(str(i), *cells)
    return t


def invariant_detail(inv: InvariantResult) -> Group:
    head = Text.assemble((f"{inv.verdict:9}", STYLE[inv.verdict]), " ", (inv.family, "bold"), " ",
                         (json.dumps(next(iter(inv.config.values()), {})), "dim"))
    parts: list[Any] = [head]
    if inv.message:
        parts.append(Text("  " + inv.message))
    if inv.verdict == "violated":
        grid = _grid(inv.observed, inv.positions, inv.expected)
        if grid is not None:
            parts += [Text("  observed per token (red: offending, ≠ expected):", style="dim"), grid]
        else:
            parts.append(Text(f"  observed {fmt(inv.observed)}  expected {fmt(inv.expected)}"))
        if any(inv.positions):
            parts.append(Text(f"  offending positions {inv.positions[:16]}", style="dim"))
    if inv.exception_info:
        parts.append(Text("  " + inv.exception_info.message, style="magenta"))
    return Group(*parts)


def console_report(report: Report, console: Console, verbose: bool = False) -> None:
    table = Table(title=f"RL-Sentinel · {len(report.results)} scenario(s)", title_justify="left")
    for col in ("scenario", "target", "boundary", "verdict", "why"):
        table.add_column(col, overflow="fold")
    for r in report.results:
        table.add_row(Text(r.id), Text(r.target), Text(r.boundary), Text(r.verdict, STYLE[r.verdict]),
                      Text(r.reason.split("; ")[0][:100]))  # Text: report fields are never markup
    console.print(table)
    for r in report.results:
        if r.verdict in ("violated", "error") or verbose:
            body: list[Any] = [Text(f"{r.file}  ·  {r.title}", style="dim")]
            if r.function:
                body.append(Text(f"called {r.function.text()}", style="dim"))
            body += [invariant_detail(i) for i in r.invariants]
            if r.exception_info:
                body.append(Text(f"{r.exception_info.type}: {r.exception_info.message}", style="magenta"))
                if verbose and r.exception_info.traceback:
                    body.append(Text(r.exception_info.traceback, style="dim"))
            console.print(Panel(Group(*body), title=Text(f"{r.id} on {r.target}: {r.verdict}"),
                                border_style=STYLE[r.verdict], title_align="left"))
    if report.comparisons:
        ct = Table(title="compare", title_justify="left")
        for col in ("scenario", "base", "head", "verdict"):
            ct.add_column(col)
        for c in report.comparisons:
            ct.add_row(Text(c.id), Text(c.base, STYLE[c.base]), Text(c.head, STYLE[c.head]), Text(c.verdict, STYLE[c.verdict]))
        console.print(ct)
    s = report.statistics
    console.print(Text.assemble(
        ("PASS" if report.success else "FAIL", "bold green" if report.success else "bold red"),
        f"  {s.holds} hold · {s.violated} violated · {s.errors} error · {s.unsupported} unsupported"
        f"  ({s.invariants_held} invariants held, {s.invariants_violated} violated) in {report.duration_s:.2f} s"))


# --- markdown ----------------------------------------------------------------------------

def _md_value(x: Any) -> str:
    return "`" + fmt(x) + "`"


def _target_line(report: Report, key: str) -> str:
    t = report.targets.get(key)
    if t is None:
        return key
    bits = [t.name]
    if t.commit:
        bits.append(f"`{t.commit[:10]}`" + (f" ({t.subject})" if t.subject else ""))
    if t.version:
        bits.append(f"version {t.version}")
    if t.plant:
        bits.append(f"planted bug `{t.plant}`")
    return " ".join(bits)


def markdown(report: Report) -> str:
    out = ["## RL-Sentinel report", ""]
    s = report.statistics
    if report.comparisons:
        counts = {}
        for c in report.comparisons:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
        out.append("**" + ", ".join(f"{n} {v}" for v, n in counts.items()) + "** between base and head.")
        out.append("")
    out.append(f"**{'PASS' if report.success else 'FAIL'}**: {s.holds} hold, {s.violated} violated, "
               f"{s.errors} error, {s.unsupported} unsupported ({report.environment.device or 'cpu'}, "
               f"torch {report.environment.torch}, rl-sentinel {report.environment.tool_version}).")
    out.append("")
    if report.comparisons:
        out += ["| scenario | base | head | verdict |", "|---|---|---|---|"]
        out += [f"| {c.id} | {c.base} | {c.head} | **{c.verdict}** |" for c in report.comparisons]
        out.append("")
    out += ["| scenario | target | verdict |", "|---|---|---|"]
    out += [f"| {r.id} | {_target_line(report, r.target)} | **{r.verdict}** |" for r in report.results]
    by_id: dict[str, list[ScenarioResult]] = {}
    for r in report.results:
        by_id.setdefault(r.id, []).append(r)
    for sid, rs in by_id.items():
        if all(r.verdict in ("holds", "unsupported") for r in rs) and not report.comparisons:
            continue
        r0 = rs[0]
        out += ["", f"### `{sid}`: {r0.title}", ""]
        if r0.provenance:
            out.append("Provenance: " + ", ".join(r0.provenance))
            out.append("")
        out += ["Trigger (canonical inputs):", "", "```json", json.dumps({"config": r0.config, "inputs": r0.inputs}), "```", ""]
        for r in rs:
            out.append(f"**{_target_line(report, r.target)}**: {r.verdict}" + (f" ({r.reason})" if r.reason else ""))
            if r.function:
                out.append(f"  called {r.function.text('`')}")
            out.append("")
            rows = [i for i in r.invariants if i.verdict != "held"] or r.invariants
            if rows:
                out += ["| invariant | verdict | observed | expected | positions |", "|---|---|---|---|---|"]
                for i in rows:
                    cfg = json.dumps(i.config).replace("|", "\\|")
                    out.append(f"| `{cfg}` | {i.verdict} | {_md_value(i.observed)} | {_md_value(i.expected)} | "
                               f"{_md_value(i.positions) if i.positions else ''} |")
                out.append("")
    if report.command:
        out += ["Reproduce:", "", "```bash", shlex.join(report.command), "```", ""]
    return "\n".join(out) + "\n"


# --- JUnit -------------------------------------------------------------------------------

def junit(report: Report) -> str:
    suite = ET.Element("testsuite", name="rl-sentinel", tests=str(len(report.results)),
                       failures=str(report.statistics.violated), errors=str(report.statistics.errors),
                       skipped=str(report.statistics.unsupported), time=f"{report.duration_s:.3f}")
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"{r.target}.{r.boundary}", name=r.id,
                             file=r.file, time=f"{r.duration_s:.3f}")
        text = "\n".join(_failure_lines(r))
        if r.verdict == "violated":
            ET.SubElement(case, "failure", message=r.reason[:500]).text = text
        elif r.verdict == "error":
            ET.SubElement(case, "error", message=r.reason[:500], type=r.exception_info.type if r.exception_info else "error").text = (
                r.exception_info.traceback if r.exception_info else text)
        elif r.verdict == "unsupported":
            ET.SubElement(case, "skipped", message=r.reason[:500])
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _failure_lines(r: ScenarioResult) -> Iterable[str]:
    for i in r.invariants:
        if i.verdict != "held":
            yield f"{i.verdict}: {json.dumps(i.config)}: {i.message}"
            yield f"  observed:   {fmt(i.observed)}"
            yield f"  expected:   {fmt(i.expected)}"
            if i.difference is not None:
                yield f"  difference: {fmt(i.difference)}"
            if any(i.positions):
                yield f"  positions:  {i.positions}"
