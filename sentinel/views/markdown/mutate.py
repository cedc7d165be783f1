"""A mutate report in markdown: the scores (target, boundary, operator), then survivors by
reach (a missing check, unknown, reach work), each with its diff in a code block, equivalents
and stale equivalence claims."""

from __future__ import annotations

from ...inert import md_code, md_fence, md_text
from ..locations import Locations
from ..model import MUTATE_HEAD as HEAD, pct
from .scenarios import reproduce


def _md_table(title: str, rows: list[list[str]]) -> list[str]:
    return [f"| {title} | " + " | ".join(HEAD[1:]) + " |", "|" + "---|" * len(HEAD),
            *("| " + " | ".join(md_code(r[0]) if i == 0 else r[i] for i in range(len(r))) + " |" for r in rows), ""]


def mutate(view, limit: int = 60, **_: object) -> str:
    s, hunt = view.mutate, view.hunt_line()
    lines = [f"## Mutation score: {md_text(s.target)} — {pct(s.totals)}", "",
             f"{s.totals.mutants} mutants of {len(s.functions)} mapped functions at `{s.commit}`; killed "
             f"{s.totals.killed}, survived {s.totals.survived}, equivalent {s.totals.equivalent}, error "
             f"{s.totals.error}. Score = killed / (mutants − equivalent − error). "
             f"{md_text(hunt[:1].upper() + hunt[1:])}.", ""]
    for title, rows in view.tables():
        lines += _md_table(title, rows)
    if view.reach_line():
        lines += [md_text(view.reach_line()) + ".", ""]
    lines += [md_text(view.claims_line()) + ".", ""]
    if s.totals.survived:
        lines += [f"### Survivors ({s.totals.survived})", ""]
    shown = 0
    for title, group in view.survivor_groups():
        lines += [f"#### {md_text(title)} ({len(group)})", ""]
        for m in group[:max(0, limit - shown)]:
            lines += [f"**{md_text(m.function)}** · {md_code(m.operator)} · {md_code(m.key)} · {md_text(m.position)} — "
                      f"scenarios {m.scenarios}, {md_text(view.hunt_examples(m))}", "", *md_fence(m.diff, "diff"), ""]
        if len(group) > limit - shown:
            lines += [f"... and {len(group) - max(0, limit - shown)} more of these (see the JSON report).", ""]
        shown += len(group)
    eq = [m for m in s.mutants if m.verdict == "equivalent"]
    if eq:
        lines += ["### Equivalent", "", *(f"- {md_code(m.id)}: {md_text(m.reason)}" for m in eq), ""]
    if s.stale_equivalents:
        lines += ["### Equivalence claims not honoured", "", *(f"- {md_text(x)}" for x in s.stale_equivalents), ""]
    return "\n".join(lines + reproduce(view.report, Locations(view.report))).rstrip("\n") + "\n"


