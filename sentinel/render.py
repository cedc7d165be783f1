"""Reports for people and machines: a Rich terminal view with per-token grids, a markdown
section for a pull request, and JUnit XML for CI. Every string from a scenario or a report
is passed through sentinel/inert.py for its output first."""

from __future__ import annotations

import json
import shlex
from typing import Any, Iterable
from xml.etree import ElementTree as ET

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from . import inert
from .inert import md_code, md_text, terminal
from .present import (COMPARE_ORDER, Grid, Locations, cell_pair, headline, invariant_grid, is_scalar, number, offending,
                      ordered, output_name, value_labels, verdict_word)
from .report import FunctionInfo, InvariantResult, Report, ScenarioResult

STYLE = {"holds": "green", "held": "green", "violated": "bold red", "error": "bold magenta", "skipped": "yellow",
         "unsupported": "yellow", "excluded": "cyan", "fixed": "green", "regressed": "bold red", "still-violated": "red",
         "holds-both": "green", "inconclusive": "magenta"}


def fmt(x: Any) -> str:
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, str):
        return x
    return json.dumps(x)


def _rich_grid(g: Grid, title: str = "") -> Table:
    """Per-token grid: rows are sequences, columns tokens; offending positions in red, with
    the expected value (broadcast to the grid, present.fitted) beneath."""
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
    head = Text.assemble((f"{inv.verdict:9}", STYLE.get(inv.verdict, "")), " ", (terminal(inv.family), "bold"), " ",
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


def console_report(report: Report, console: Console, verbose: bool = False) -> None:
    table = Table(title=f"RL-Sentinel · {len(report.results)} scenario(s)", title_justify="left")
    table.add_column("scenario", no_wrap=True)  # an id is copied into commands: never folded mid-word
    for col in ("target", "boundary", "verdict", "why"):
        table.add_column(col, overflow="fold")
    for r in report.results:
        table.add_row(Text(terminal(r.id)), Text(terminal(r.target)), Text(terminal(r.boundary)),
                      Text(r.verdict, STYLE[r.verdict]), Text(terminal(r.reason.split("; ")[0][:100])))
    console.print(table)
    unloadable = {k: t for k, t in report.targets.items() if t.load_error is not None}
    for key, t in unloadable.items():  # one panel per target that did not load, not one per scenario
        n = sum(r.target == key for r in report.results)
        body = [Text(terminal(f"{t.load_error.type}: {t.load_error.message}", lines=True), style="magenta"),
                Text(f"{n} scenario(s) could not run", style="dim")]
        if verbose and t.load_error.traceback:
            body.append(Text(terminal(t.load_error.traceback, lines=True), style="dim"))
        console.print(Panel(Group(*body), title=Text(terminal(f"target {key} could not be loaded")), border_style=STYLE["error"],
                            title_align="left"))
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
                                border_style=STYLE[r.verdict], title_align="left"))
    if report.comparisons:
        ct = Table(title="compare", title_justify="left")
        for col in ("scenario", "base", "head", "verdict"):
            ct.add_column(col)
        for c in report.comparisons:
            ct.add_row(Text(terminal(c.id)), Text(c.base, STYLE[c.base]), Text(c.head, STYLE[c.head]), Text(c.verdict, STYLE[c.verdict]))
        console.print(ct)
    s = report.statistics
    word = verdict_word(report)
    console.print(Text.assemble(
        (word, {"PASS": "bold green", "FAIL": "bold red"}.get(word, "bold yellow")),
        f"  {s.holds} hold · {s.violated} violated · {s.errors} error · {s.unsupported} unsupported"
        + (f" · {s.excluded} excluded" if s.excluded else "") +
        f"  ({s.invariants_held} invariants held, {s.invariants_violated} violated) in {report.duration_s:.2f} s"))
    if word == "NOTHING RAN":
        console.print(Text("nothing was checked: every scenario is unsupported or excluded on its target (exit 5)",
                           style="bold yellow"))


# --- markdown ----------------------------------------------------------------------------
# A pull-request comment or job summary: the verdict in one line, violations and errors first
# with their per-token grids as tables, holds collapsed, the target described once, source
# locations linked to the exact commit, no local paths, and a size cap.

MARKDOWN_LIMIT = 60_000  # bytes; GitHub PR comments take 65,536 characters, job summaries 1 MiB
MASKED = "·"
TRIGGER_LIMIT = 4_000  # characters of trigger JSON shown in a scenario section


def _cell(text: str) -> str:
    """A grid cell built here from numbers and bold marks: a `|` would end it."""
    return text.replace("|", "\\|").replace("\n", " ")


def _md_targets(report: Report, loc: Locations) -> list[str]:
    def one(key: str) -> str:
        text = md_text(loc.scrub(loc.describe(key)))
        t = report.targets[key]
        url = loc.commit_url(key)
        if url and t.commit and (short := md_text(t.commit[:10])) in text:
            text = text.replace(short, inert.md_link(t.commit[:10], url, code=True), 1)
        return text

    env = report.environment
    facts = md_text(f"{env.device or 'cpu'}, torch {env.torch}, rl-sentinel {env.tool_version}, {report.duration_s:.2f} s")
    if len(report.targets) == 1:
        return [f"**Target**: {one(next(iter(report.targets)))} · {facts}"]
    return [f"**Targets** ({facts}):", ""] + [f"- **{md_text(key)}**: {one(key)}" for key in report.targets]


def _md_grid(g: Grid) -> list[str]:
    """The grid as a markdown table: rows are sequences, columns tokens; an offending cell in
    bold with the expected value, a masked cell as `·`; a large grid shows the rows and
    columns around its offending cells (… for the others)."""
    rows, cols = g.window()
    head = "| " + ("" if g.row_vector else "row") + " | " + " | ".join(
        "…" if j is None else (f"r{j}" if g.row_vector else f"t{j}") for j in cols) + " |"
    lines = [head, "|" + "---:|" * (len(cols) + 1)]
    for i in rows:
        if i is None:
            lines.append("| … |" + " |" * len(cols))
            continue
        cells = []
        for j in cols:
            row = g.observed[i]
            if j is None or j >= len(row):
                cells.append("…" if j is None else "")
            elif (i, j) in g.bad:
                a, b = cell_pair(row[j], g.expected_at(i, j))
                cells.append(f"**{a}**" + (f" ≠ {b}" if g.expected is not None else "") + (" (masked)" if g.masked(i, j) else ""))
            else:
                cells.append(MASKED if g.masked(i, j) else number(row[j]))
        lines.append(f"| {'' if g.row_vector else i} | " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def _legend(g: Grid) -> str:
    bits = ["**bold**: offending" + (f" ≠ {md_text(g.expected_as)}" if g.expected is not None else "")]
    if any(g.masked(i, j) for i, row in enumerate(g.observed) for j in range(len(row))):
        bits.append(f"`{MASKED}`: masked, {md_text(g.mask_name)} 0")
    return "; ".join(bits)


def _md_invariant(r: ScenarioResult, inv: InvariantResult, loc: Locations, shown: set) -> list[str]:
    name = output_name(inv)
    what = f"**{inv.verdict}** {md_code(inv.family)}" + (f" {md_text(name)}" if name else "")
    g = invariant_grid(r, inv) if inv.verdict == "violated" else None
    ob, ex = (md_text(x) for x in value_labels(inv))
    if g is not None:
        line = f"{what}: {md_text(loc.scrub(inv.message))}"
        if g.key() in shown:
            return [line + " (the grid above)", ""]
        shown.add(g.key())
        return [line, "", f"{md_text(g.name)} per token ({_legend(g)}):", ""] + _md_grid(g) + [""]
    if inv.verdict == "violated" and is_scalar(inv.observed) and is_scalar(inv.expected):
        facts = [f"{ob} {md_code(fmt(inv.observed))}", f"{ex} {md_code(fmt(inv.expected))}"]
        if is_scalar(inv.difference) and inv.difference is not None:
            facts.append(f"difference {md_code(fmt(inv.difference))}")
        if offending(inv):
            facts.append(f"at {md_text(inv.positions[:8])}")
        return [f"{what}: " + ", ".join(facts), ""]
    out = [f"{what}: {md_text(loc.scrub(inv.message))}" if inv.message else what]
    if inv.verdict == "violated":
        out[0] += f"; {ob} {md_code(fmt(inv.observed)[:300])}, {ex} {md_code(fmt(inv.expected)[:300])}"
    if inv.exception_info:
        x = inv.exception_info
        out[0] += f" ({md_text(x.type)}: {md_text(loc.scrub(x.message)[:500])})"
    return out + [""]


def _md_scenario(report: Report, rs: list[ScenarioResult], loc: Locations) -> list[str]:
    r0 = rs[0]
    c = next((c for c in report.comparisons if c.id == r0.id), None)
    verdict = f"{c.verdict} (base {c.base}, head {c.head})" if c else ", ".join(dict.fromkeys(r.verdict for r in rs))
    out = [f"### {md_code(r0.id)} {verdict}: {md_text(r0.title)}", ""]
    facts = [f"boundary {md_code(r0.boundary)}"]
    if (f := loc.relative(r0.file)) is not None:
        facts.append(md_code(f))
    if r0.provenance:
        facts.append("provenance: " + ", ".join(md_text(loc.scrub(p)) for p in r0.provenance))
    out += [" · ".join(facts), ""]
    many = len(report.targets) > 1
    for r in rs:
        if many:
            out += [f"#### on **{md_text(r.target)}**: {r.verdict}", ""]
        if r.function:
            out += [_md_function(r, loc), ""]
        if r.exception_info:
            e = r.exception_info
            out += [f"> **{md_text(e.type)}**: {md_text(loc.scrub(e.message)[:1000])}", ""]
            if e.traceback:
                tb = "\n".join(loc.scrub(e.traceback).splitlines()[-30:])
                out += ["<details><summary>traceback</summary>", "", *inert.md_fence(tb), "", "</details>", ""]
        shown: set = set()
        for inv in r.invariants:
            if inv.verdict != "held":
                out += _md_invariant(r, inv, loc, shown)
        held = sum(i.verdict == "held" for i in r.invariants)
        if held and r.verdict != "holds":
            out += [f"{held} other invariant(s) held.", ""]
    if not (r0.config or r0.inputs):
        return out
    trigger = json.dumps({"config": r0.config, "inputs": r0.inputs})
    if len(trigger) > TRIGGER_LIMIT:
        return out + [f"The trigger ({len(trigger) // 1000} KB of config and inputs) is in the JSON report.", ""]
    return out + ["<details><summary>trigger (config and canonical inputs)</summary>", "", *inert.md_fence(trigger, "json"),
                  "", "</details>", ""]


def _md_function(r: ScenarioResult, loc: Locations) -> str:
    def one(f: FunctionInfo) -> str:
        text, url = loc.source(r.target, f.file, f.line)
        where = f" ({inert.md_link(text, url)})" if url else (f" ({md_code(text)})" if text else "")
        return md_code(f"{f.module}.{f.qualname}") + where
    f = r.function
    return "called " + "; also ".join(one(x) for x in (f, *f.also))


def _md_compare(report: Report) -> list[str]:
    rows = sorted(report.comparisons, key=lambda c: COMPARE_ORDER[c.verdict])
    line = lambda c: f"| {md_code(c.id)} | {c.base} | {c.head} | **{c.verdict}** |"  # noqa: E731
    head = ["| scenario | base | head | compare |", "|---|---|---|---|"]
    moved = [c for c in rows if c.verdict != "holds-both"]
    same = [c for c in rows if c.verdict == "holds-both"]
    out = (head + [line(c) for c in moved] + [""]) if moved else []
    if same:
        out += [f"<details><summary>{len(same)} hold on both</summary>", "", *head, *[line(c) for c in same], "",
                "</details>", ""]
    return out


def _md_rest(report: Report, groups: list[list[ScenarioResult]], verdict: str, loc: Locations) -> list[str]:
    rows = [r for rs in groups for r in rs if r.verdict == verdict]
    if not rows:
        return []
    many = len(report.targets) > 1
    label = {"holds": "hold", "unsupported": "unsupported", "excluded": "excluded by a precondition"}[verdict]
    head = "| scenario |" + (" target |" if many else "") + " boundary | " + (
        "invariants held |" if verdict == "holds" else "why |")
    out = [f"<details><summary>{len(rows)} {label}</summary>", "", head, "|---" * head.count(" |") + "|"]
    for r in rows:
        last = str(len(r.invariants)) if verdict == "holds" else md_text(loc.scrub(r.reason)[:200])
        out.append(f"| {md_code(r.id)} |" + (f" {md_text(r.target)} |" if many else "") + f" {md_text(r.boundary)} | {last} |")
    return out + ["", "</details>", ""]


def markdown(report: Report, source: str | None = None, limit: int = MARKDOWN_LIMIT) -> str:
    """The report as a pull-request section, at most `limit` bytes: cut at a section, with a
    pointer to the full report (`source`, the JSON file) when it does not fit."""
    loc = Locations(report)
    failing, rest = ordered(report)
    head = [f"## RL-Sentinel {headline(report, md_code)}", "", *_md_targets(report, loc), ""]
    sections = [_md_compare(report)] if report.comparisons else []
    sections += [_md_scenario(report, rs, loc) for rs in failing]
    # in a compare report the compare table already lists what holds on both sides
    sections += [_md_rest(report, rest, v, loc) for v in ("unsupported", "excluded", "holds") if not (v == "holds" and report.comparisons)]
    sections = [s for s in sections if s]
    tail = ["Reproduce:", "", *inert.md_fence(shlex.join(loc.command(report.command)), "bash")] if report.command else []
    budget = limit - len("\n".join(head + tail).encode()) - 400
    body: list[str] = []
    for i, sec in enumerate(sections):
        size = len("\n".join(sec).encode()) + 1
        if size > budget:
            where = md_code(f"sentinel report {loc.scrub(source, elide='')}") if source else "the JSON report"
            body += [f"**Cut to {limit // 1000} KB**: {len(sections) - i} more section(s) are in the full report ({where}).", ""]
            break
        body += sec
        budget -= size
    return "\n".join(head + body + tail).rstrip("\n") + "\n"


# --- JUnit -------------------------------------------------------------------------------

def junit(report: Report) -> str:
    x = inert.xml  # XML 1.0 has no control characters: a title with ESC must not make the file unreadable
    suite = ET.Element("testsuite", name="rl-sentinel", tests=str(len(report.results)),
                       failures=str(report.statistics.violated), errors=str(report.statistics.errors),
                       skipped=str(report.statistics.unsupported + report.statistics.excluded), time=f"{report.duration_s:.3f}")
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=x(f"{r.target}.{r.boundary}"), name=x(r.id),
                             file=x(r.file), time=f"{r.duration_s:.3f}")
        text = x("\n".join(_failure_lines(r)))
        if r.verdict == "violated":
            ET.SubElement(case, "failure", message=x(r.reason[:500])).text = text
        elif r.verdict == "error":
            ET.SubElement(case, "error", message=x(r.reason[:500]), type=x(r.exception_info.type if r.exception_info else "error")).text = (
                x(r.exception_info.traceback) if r.exception_info else text)
        elif r.verdict in ("unsupported", "excluded"):
            ET.SubElement(case, "skipped", message=x(r.reason[:500]))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _failure_lines(r: ScenarioResult) -> Iterable[str]:
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
