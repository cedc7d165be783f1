"""A history report for people: a terminal timeline (Rich) and a markdown section.

Timeline: one line per scenario, one cell per evaluated commit (oldest left): green holds,
red violated, magenta error, yellow unsupported, grey where the target does not load, blank
where that commit was not evaluated for that scenario (a bisect probes one scenario). A flip
is its letter at the commit that made it: F fixed, R regressed.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..inert import md_code, md_text, terminal
from ..present import github_url
from ..render import STYLE, fmt, invariant_detail
from ..report import HistoryCommit, HistoryFlip, InvariantResult, Report, ScenarioResult

CELL = {"holds": ("■", "green"), "violated": ("■", "red"), "error": ("■", "magenta"),
        "unsupported": ("·", "yellow"), "not-loaded": ("░", "grey50")}
FLIP = {"fixed": ("F", "bold green reverse"), "regressed": ("R", "bold red reverse")}


def evaluated(report: Report) -> list[HistoryCommit]:
    return [c for c in report.history.commits if c.role in ("sample", "probe")]


def scenario_order(report: Report) -> list[str]:
    """Scenarios that flip first (in the order their first flip happened), then the rest."""
    h = report.history
    flipped = list(dict.fromkeys(f.scenario for f in h.flips))
    return flipped + [s for s in h.scenarios if s not in flipped]


def _range(report: Report) -> str:
    h = report.history
    return f"{h.since} .. {h.until}"


def summary_line(report: Report) -> str:
    h, c = report.history, report.history.cost
    grey = sum(1 for x in evaluated(report) if x.load_error)
    return (f"{c.commits_in_range} commits: {c.samples} sampled (every {h.stride}), {c.probes} probed by bisects, "
            f"{c.skipped_no_loss_path} skipped (no loss-path change), {grey} not loading; {len(h.flips)} flip(s); "
            f"{c.runs} runs vs {c.exhaustive_runs} exhaustive ({c.cached} from cache), {c.duration_s:.1f} s "
            f"on {h.executor} x{h.jobs}")


# --- terminal -----------------------------------------------------------------------------

def timeline(report: Report, console: Console, verbose: bool = False) -> None:
    h = report.history
    cols = evaluated(report)
    names = scenario_order(report)
    name_w = min(40, max((len(n) for n in names), default=8))
    room = max(10, (console.width or 120) - name_w - 2)
    hidden = max(0, len(cols) - room)
    cols = cols[hidden:]
    flip_at = {(f.scenario, f.commit): f.change for f in h.flips if f.commit}
    console.print(Text.assemble(("history ", "bold"), (terminal(h.target), "bold cyan"), terminal(f"  {_range(report)}")))
    console.print(Text(summary_line(report), style="dim"))
    if hidden:
        console.print(Text(f"(the oldest {hidden} evaluated commits are not shown: widen the terminal, or read "
                           f"the markdown or the JSON)", style="dim"))
    for name in names:
        line = Text(terminal(name[:name_w]).ljust(name_w) + "  ", no_wrap=True)
        for c in cols:
            change = flip_at.get((name, c.id))
            if change:
                line.append(*FLIP[change])
            elif name in c.verdicts:
                line.append(*CELL[c.verdicts[name]])
            else:
                line.append(" ")
        console.print(line, overflow="crop", no_wrap=True)
    if cols:
        axis = Text(" " * (name_w + 2), no_wrap=True)
        axis.append(f"{cols[0].id[:9]} → {cols[-1].id[:9]}", style="dim")
        console.print(axis, overflow="crop")
    console.print(Text.assemble(
        "legend: ", ("■", "green"), " holds  ", ("■", "red"), " violated  ", ("■", "magenta"), " error  ",
        ("·", "yellow"), " unsupported  ", ("░", "grey50"), " not loading  ",
        ("F", FLIP["fixed"][1]), " fixed here  ", ("R", FLIP["regressed"][1]), " regressed here"))
    if h.flips:
        t = Table(title="flips", title_justify="left")
        for c in ("change", "scenario", "commit", "PR", "date", "subject"):
            t.add_column(c, overflow="fold")
        for f in h.flips:
            where = f.commit[:10] if f.commit else "one of " + " ".join(x[:10] for x in f.candidates)
            t.add_row(Text(f.change, STYLE.get(f.change, "")), Text(terminal(f.scenario)), Text(terminal(where)),
                      f"#{f.pr}" if f.pr else "", Text(terminal(f.date[:10])), Text(terminal(f.subject)))
        console.print(t)
        for f in h.flips:
            console.print(Text.assemble(("\n" + terminal(f.scenario), "bold"), " ", (f.change, STYLE.get(f.change, "")),
                                        terminal(f" at {f.commit[:10] if f.commit else '?'}"), (terminal(f"  {f.subject}"), "dim")))
            for label, r in (("before", f.before), ("after", f.after)):
                console.print(Text.assemble(f"  {label} ", (terminal(r.target.split("@")[-1][:10]), "cyan"), " ",
                                            (r.verdict, STYLE.get(r.verdict, ""))))
                for inv in _focus(r, f):
                    console.print(invariant_detail(inv, r), highlight=False)
                    if inv.verdict == "held" and inv.observed is not None:
                        console.print(Text(terminal(f"  observed {_short(inv.observed)}")), highlight=False)
    if h.hunt:
        console.print(Text(terminal(f"hunt: {h.hunt}"), style="dim"))


def _focus(r: ScenarioResult, f: HistoryFlip) -> list[InvariantResult]:
    """The invariants that decided the flip: those violated on either side, on this side."""
    other = f.after if r is f.before else f.before
    bad = {i for i, inv in enumerate(r.invariants) if inv.verdict != "held"}
    bad |= {i for i, inv in enumerate(other.invariants) if inv.verdict != "held"}
    return [inv for i, inv in enumerate(r.invariants) if i in bad]


# --- markdown -----------------------------------------------------------------------------

def _commit_link(sha: str | None, base: str | None) -> str:
    if not sha:
        return "?"
    return f"[{md_code(sha[:10])}]({base}/commit/{md_text(sha)})" if base else md_code(sha[:10])


def _pr_link(pr: int | None, base: str | None) -> str:
    if pr is None:
        return ""
    return f"[#{pr}]({base}/pull/{pr})" if base else f"#{pr}"


def flips_table(report: Report, base: str | None = None) -> list[str]:
    lines = ["| change | scenario | commit | PR | date | subject |", "|---|---|---|---|---|---|"]
    for f in report.history.flips:
        where = _commit_link(f.commit, base) if f.commit else "one of " + ", ".join(md_code(c[:10]) for c in f.candidates)
        lines.append(f"| {f.change} | {md_code(f.scenario)} | {where} | {_pr_link(f.pr, base)} | {md_text(f.date[:10])} | "
                     f"{md_text(f.subject)} |")
    return lines


def _md_side(label: str, r: ScenarioResult, f: HistoryFlip) -> list[str]:
    lines = [f"- **{label}** {md_code(r.target.split('@')[-1][:10])}: **{r.verdict}**"]
    for inv in _focus(r, f):
        cfg = json.dumps(next(iter(inv.config.values()), {}))
        text = f"  - {inv.verdict} {md_code(inv.family)} {md_text(cfg)}"
        if inv.message:
            text += f": {md_text(inv.message)}"
        if inv.observed is not None:
            text += f"; observed {md_code(_short(inv.observed))}"
        if inv.expected is not None:
            text += f", expected {md_code(_short(inv.expected))}"
        lines.append(text)
    return lines


def _short(x: Any, limit: int = 160) -> str:
    s = fmt(x)
    return s if len(s) <= limit else s[:limit - 3] + "..."


def markdown(report: Report) -> str:
    h = report.history
    base = github_url(h.repo)
    lines = [f"## RL-Sentinel history: {md_text(h.target)} {md_code(h.since)}..{md_code(h.until)}", "",
             md_text(summary_line(report)), ""]
    if h.flips:
        lines += flips_table(report, base) + [""]
        lines += ["<details><summary>evidence of each flip (both sides)</summary>", ""]
        for f in h.flips:
            lines += [f"#### {md_code(f.scenario)} {f.change} at {_commit_link(f.commit, base)}", ""]
            lines += _md_side("before", f.before, f) + _md_side("after", f.after, f) + [""]
        lines += ["</details>", ""]
    else:
        lines += ["No scenario changed its verdict in this range.", ""]
    lines += ["<details><summary>verdicts per evaluated commit</summary>", "",
              "| commit | PR | date | role | holds | violated | error | unsupported | subject |",
              "|---|---|---|---|---:|---:|---:|---:|---|"]
    for c in evaluated(report):
        if c.load_error:
            counts = f"not loading: {md_text(c.load_error[:120])} | | | |"
        else:
            v = list(c.verdicts.values())
            counts = " | ".join(str(v.count(k)) for k in ("holds", "violated", "error", "unsupported"))
        lines.append(f"| {_commit_link(c.id, base)} | {_pr_link(c.pr, base)} | {md_text(c.date[:10])} | {c.role} | {counts} | "
                     f"{md_text(c.subject)} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)

