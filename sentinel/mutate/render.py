"""A mutate report for people: scores (target, boundary, operator), then survivors first,
each with its diff; as a terminal view, markdown (a code block per diff) and JUnit XML."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from ..inert import markup as escape, md_code, md_fence, md_text, plain, xml
from ..report import MutateCount, MutateSummary, Report


def pct(c: MutateCount) -> str:
    return "n/a" if c.score is None else f"{100 * c.score:.1f}%"


def _rows(table: dict[str, MutateCount]) -> list[list[str]]:
    return [[name, str(c.mutants), str(c.killed), str(c.survived), str(c.equivalent), str(c.error), pct(c)]
            for name, c in table.items()]


HEAD = ["", "mutants", "killed", "survived", "equivalent", "error", "score"]


def _summary(s: MutateSummary) -> list[tuple[str, list[list[str]]]]:
    return [("target", _rows({s.target: s.totals})), ("boundary", _rows(s.by_boundary)),
            ("operator", _rows(s.by_operator))]


def console(report: Report, out: Console, limit: int = 40) -> None:
    s = report.mutate
    survivors = [m for m in s.mutants if m.verdict == "survived"]
    out.print(f"[bold]sentinel mutate[/] {escape(s.target)} @ {escape(str(s.commit))[:12]}: "
              f"{s.totals.mutants} mutants of {len(s.functions)} functions, hunt {s.budget_s:g} s per survivor of "
              f"the catalog, seed {s.seed}")
    for i, m in enumerate(survivors[:limit]):
        out.print(f"\n[bold yellow]survived[/] {escape(m.id)}  {escape(m.position)}  "
                  f"(scenarios {m.scenarios}, hunt examples {m.examples})")
        out.print(Syntax(plain(m.diff), "diff", theme="ansi_dark", background_color="default"))
    if len(survivors) > limit:
        out.print(f"... and {len(survivors) - limit} more survivors (the JSON report lists all)")
    for m in (m for m in s.mutants if m.verdict == "error"):
        out.print(f"[magenta]error[/] {escape(m.id)}: {escape(m.reason[:160])}", highlight=False)
    for title, rows in _summary(s):
        t = Table(*[title if not h else h for h in HEAD], title=None, show_edge=False)
        for r in rows:
            t.add_row(*map(escape, r))
        out.print(t)
    for line in s.stale_equivalents:
        out.print(f"[yellow]equivalence claim not honoured:[/] {escape(line)}")
    out.print(f"[bold]score {pct(s.totals)}[/] = killed {s.totals.killed} / (mutants {s.totals.mutants} - equivalent "
              f"{s.totals.equivalent} - error {s.totals.error}); {s.mutants_per_min_per_core:g} mutants/min/core, "
              f"{s.cached} from the cache, {s.duration_s:.0f} s")


def _md_table(title: str, rows: list[list[str]]) -> list[str]:
    return [f"| {title} | " + " | ".join(HEAD[1:]) + " |", "|" + "---|" * len(HEAD),
            *("| " + " | ".join(md_code(r[0]) if i == 0 else r[i] for i in range(len(r))) + " |" for r in rows), ""]


def markdown(report: Report, limit: int = 60) -> str:
    s = report.mutate
    lines = [f"## Mutation score: {md_text(s.target)} — {pct(s.totals)}", "",
             f"{s.totals.mutants} mutants of {len(s.functions)} mapped functions at `{s.commit}`; killed "
             f"{s.totals.killed}, survived {s.totals.survived}, equivalent {s.totals.equivalent}, error "
             f"{s.totals.error}. Score = killed / (mutants − equivalent − error). Hunt {s.budget_s:g} s per mutant "
             f"the catalog leaves alive (seed {s.seed}).", ""]
    for title, rows in _summary(s):
        lines += _md_table(title, rows)
    survivors = [m for m in s.mutants if m.verdict == "survived"]
    if survivors:
        lines += [f"### Survivors ({len(survivors)})", ""]
        for m in survivors[:limit]:
            lines += [f"**{md_text(m.function)}** · {md_code(m.operator)} · {md_code(m.key)} · {md_text(m.position)} — "
                      f"scenarios {m.scenarios}, hunt examples {md_text(dict(m.examples))}", "", *md_fence(m.diff, "diff"), ""]
        if len(survivors) > limit:
            lines += [f"... and {len(survivors) - limit} more (see the JSON report).", ""]
    eq = [m for m in s.mutants if m.verdict == "equivalent"]
    if eq:
        lines += ["### Equivalent", "", *(f"- {md_code(m.id)}: {md_text(m.reason)}" for m in eq), ""]
    if s.stale_equivalents:
        lines += ["### Equivalence claims not honoured", "", *(f"- {md_text(x)}" for x in s.stale_equivalents), ""]
    return "\n".join(lines) + "\n"


def junit(report: Report) -> str:
    """One test case per mutant: a survivor fails, an error errs, an equivalent is skipped."""
    s = report.mutate
    suite = ET.Element("testsuite", name=f"sentinel-mutate-{s.target}", tests=str(s.totals.mutants),
                       failures=str(s.totals.survived), errors=str(s.totals.error), skipped=str(s.totals.equivalent),
                       time=f"{s.duration_s:.3f}")
    for m in s.mutants:
        case = ET.SubElement(suite, "testcase", classname=m.function, name=f"{m.operator}@{m.key} {m.position}",
                             time=f"{m.duration_s:.3f}")
        if m.verdict == "survived":
            ET.SubElement(case, "failure", message=f"survived (hunt examples {m.examples})").text = xml(m.diff)
        elif m.verdict == "error":
            ET.SubElement(case, "error", message=xml(m.reason[:500]))
        elif m.verdict == "equivalent":
            ET.SubElement(case, "skipped", message=xml(f"equivalent: {m.reason}"))
        else:
            ET.SubElement(case, "system-out").text = xml(f"killed by {m.killed_by}")
    root = ET.Element("testsuites")
    root.append(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
