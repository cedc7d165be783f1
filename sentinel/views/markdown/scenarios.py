"""Scenario results in markdown (run, gate, compare, matrix): a pull-request comment or job
summary. The verdict in one line (a compare's verdicts first), violations and errors first
with their per-token grids as tables, holds collapsed, the target described once, source
locations linked to the exact commit, no local paths, and a size cap. More than
SUMMARY_OVER violations open with a summary table, each scenario's details collapsed."""

from __future__ import annotations

import json

from ... import inert
from ...inert import md_code, md_text
from ...report import FunctionInfo, InvariantResult, Report, ScenarioResult
from ..grids import Grid, cell_pair, fmt, invariant_grid, is_scalar, number, offending, output_name, value_labels
from ..locations import Locations
from ..model import headline, ordered
from ..palette import COMPARE_ORDER

MARKDOWN_LIMIT = 60_000  # bytes; GitHub PR comments take 65,536 characters, job summaries 1 MiB
MASKED = "·"
SUMMARY_OVER = 5  # violations: more open with a summary table, details collapsed
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


def _md_scenario(report: Report, rs: list[ScenarioResult], loc: Locations, collapsed: bool = False) -> list[str]:
    """A scenario's section: a heading, or, when `collapsed`, a <details> whose summary line
    says what the heading would."""
    r0 = rs[0]
    c = next((c for c in report.comparisons if c.id == r0.id), None)
    verdict = f"{c.verdict} (base {c.base}, head {c.head})" if c else ", ".join(dict.fromkeys(r.verdict for r in rs))
    if collapsed:
        e = inert.html
        return ([f"<details><summary><code>{e(r0.id)}</code> {e(verdict)}: {e(r0.title)}</summary>", ""]
                + _md_scenario_body(report, rs, loc) + ["</details>", ""])
    return [f"### {md_code(r0.id)} {verdict}: {md_text(r0.title)}", ""] + _md_scenario_body(report, rs, loc)


def _md_scenario_body(report: Report, rs: list[ScenarioResult], loc: Locations) -> list[str]:
    r0 = rs[0]
    out: list[str] = []
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


def _md_summary(violations: list[ScenarioResult], loc: Locations, many: bool) -> list[str]:
    """One row per violated scenario (on each target): boundary, the first violated invariant's
    family and output, and its first offending position."""
    head = "| scenario |" + (" target |" if many else "") + " boundary | family | first offending position |"
    out = [f"**{len(violations)} violations**:", "", head, "|---" * head.count(" |") + "|"]
    for r in violations:
        inv = next((i for i in r.invariants if i.verdict == "violated"), None)
        family = (md_code(inv.family) + (f" {md_text(n)}" if (n := output_name(inv)) else "")) if inv else ""
        first = md_code(next((p for p in inv.positions if p), "")) if inv and any(inv.positions) else ""
        out.append(f"| {md_code(r.id)} |" + (f" {md_text(r.target)} |" if many else "")
                   + f" {md_text(r.boundary)} | {family} | {first} |")
    return out + [""]


def reproduce(report: Report, loc: Locations) -> list[str]:
    """The command that made the report, to run again from the folder it ran in (Locations.reproduce)."""
    if not report.command:
        return []
    return ["Reproduce (from the folder the command ran in):", "", *inert.md_fence(loc.reproduce(report.command), "bash")]


def run(view, source: str | None = None, limit: int = MARKDOWN_LIMIT, **_: object) -> str:
    """The report as a pull-request section, at most `limit` bytes: cut at a section, with a
    pointer to the full report (`source`, the JSON file) when it does not fit."""
    report = view.report
    source = source or view.source
    loc = Locations(report)
    failing, rest = ordered(report)
    head = [f"## RL-Sentinel {headline(report, md_code)}", "", *_md_targets(report, loc), ""]
    violations = [r for rs in failing for r in rs if r.verdict == "violated"]
    collapsed = len(violations) > SUMMARY_OVER
    sections = [_md_compare(report)] if report.comparisons else []
    if collapsed:
        sections.append(_md_summary(violations, loc, len(report.targets) > 1))
    sections += [_md_scenario(report, rs, loc, collapsed) for rs in failing]
    # in a compare report the compare table already lists what holds on both sides
    sections += [_md_rest(report, rest, v, loc) for v in ("unsupported", "excluded", "holds") if not (v == "holds" and report.comparisons)]
    sections = [s for s in sections if s]
    tail = reproduce(report, loc)
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


def matrix(view, **_: object) -> str:
    """The conformance table: invariants down, target@version across, each cell its verdict
    or why the column could not run."""
    table = view.table
    cols = table["columns"]
    out = [f"## RL-Sentinel matrix: {len({r['scenario'] for r in table['rows']})} scenarios on {len(cols)} targets", "",
           "| scenario | invariant | " + " | ".join(md_text(c) for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r in table["rows"]:
        cells = [md_text(r["cells"][c]) for c in cols]
        out.append(f"| {md_code(r['scenario'])} | {md_code(r['invariant'])} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
