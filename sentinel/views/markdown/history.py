"""A history in markdown (for an issue or a pull request): the flips as a table, the
evidence of each (the invariants that decided it, both sides), every evaluated commit's
verdict counts; commits and PRs linked where the repository is on GitHub."""

from __future__ import annotations

import json

from ...inert import md_code, md_text
from ...report import HistoryFlip, ScenarioResult
from ..grids import short
from ...links import github_url
from ..locations import Locations
from .scenarios import reproduce


def _commit_link(sha: str | None, base: str | None) -> str:
    if not sha:
        return "?"
    return f"[{md_code(sha[:10])}]({base}/commit/{md_text(sha)})" if base else md_code(sha[:10])


def _pr_link(pr: int | None, base: str | None) -> str:
    if pr is None:
        return ""
    return f"[#{pr}]({base}/pull/{pr})" if base else f"#{pr}"


def flips_table(view, base: str | None = None) -> list[str]:
    lines = ["| change | scenario | commit | PR | date | subject |", "|---|---|---|---|---|---|"]
    for f in view.history.flips:
        where = _commit_link(f.commit, base) if f.commit else "one of " + ", ".join(md_code(c[:10]) for c in f.candidates)
        lines.append(f"| {f.change} | {md_code(f.scenario)} | {where} | {_pr_link(f.pr, base)} | {md_text(f.date[:10])} | "
                     f"{md_text(f.subject)} |")
    return lines


def _md_side(view, side: str, r: ScenarioResult, f: HistoryFlip) -> list[str]:
    lines = [f"- **{side}** {md_code(r.target.split('@')[-1][:10])}: **{r.verdict}**"]
    for inv in view.focus(r, f):
        cfg = json.dumps(next(iter(inv.config.values()), {}))
        text = f"  - {inv.verdict} {md_code(inv.family)} {md_text(cfg)}"
        if inv.message:
            text += f": {md_text(inv.message)}"
        if inv.observed is not None:
            text += f"; observed {md_code(short(inv.observed))}"
        if inv.expected is not None:
            text += f", expected {md_code(short(inv.expected))}"
        lines.append(text)
    return lines


def history(view, **_: object) -> str:
    """Flips first (a table, then the evidence of each, collapsed), then every evaluated commit."""
    h = view.history
    base = github_url(h.repo)
    lines = [f"## RL-Sentinel history: {md_text(h.target)} {md_code(h.since)}..{md_code(h.until)}", "",
             md_text(view.summary_line()), ""]
    if h.flips:
        lines += flips_table(view, base) + [""]
        lines += ["<details><summary>evidence of each flip (both sides)</summary>", ""]
        for f in h.flips:
            lines += [f"#### {md_code(f.scenario)} {f.change} at {_commit_link(f.commit, base)}", ""]
            lines += _md_side(view, "before", f.before, f) + _md_side(view, "after", f.after, f) + [""]
        lines += ["</details>", ""]
    else:
        lines += ["No scenario changed its verdict in this range.", ""]
    lines += ["<details><summary>verdicts per evaluated commit</summary>", "",
              "| commit | PR | date | role | holds | violated | error | unsupported | subject |",
              "|---|---|---|---|---:|---:|---:|---:|---|"]
    for c in view.evaluated():
        if c.load_error:
            counts = f"not loading: {md_text(c.load_error[:120])} | | | |"
        else:
            v = list(c.verdicts.values())
            counts = " | ".join(str(v.count(k)) for k in ("holds", "violated", "error", "unsupported"))
        lines.append(f"| {_commit_link(c.id, base)} | {_pr_link(c.pr, base)} | {md_text(c.date[:10])} | {c.role} | {counts} | "
                     f"{md_text(c.subject)} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines + reproduce(view.report, Locations(view.report)))

