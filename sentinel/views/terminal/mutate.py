"""A mutate report on the terminal: survivors first (by reach: a missing check, unknown, reach
work), each with its diff, then the scores (target, boundary, operator) and the score in one line."""

from __future__ import annotations

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from ...inert import markup as escape, plain
from ..model import MUTATE_HEAD as HEAD, pct
from ..palette import label, style


def mutate(view, out: Console, verbose: bool = False, limit: int = 40) -> None:
    s = view.mutate
    out.print(f"[bold]sentinel mutate[/] {escape(s.target)} @ {escape(str(s.commit))[:12]}: "
              f"{s.totals.mutants} mutants of {len(s.functions)} functions, {escape(view.hunt_line())}")
    shown = 0
    for title, group in view.survivor_groups():
        out.print(f"\n[bold]survived, {escape(title)} ({len(group)})[/]")
        for m in group[:max(0, limit - shown)]:
            out.print(f"\n[{style('survived')}]{label('survived')}[/] {escape(m.id)}  {escape(m.position)}  "
                      f"(scenarios {m.scenarios}, {escape(view.hunt_examples(m))})")
            out.print(Syntax(plain(m.diff), "diff", theme="ansi_dark", background_color="default"))
        if len(group) > limit - shown:
            out.print(f"... and {len(group) - max(0, limit - shown)} more of these (the JSON report lists all)")
        shown += len(group)
    for m in (m for m in s.mutants if m.verdict == "error"):
        out.print(f"[{style('error')}]{label('error')}[/] {escape(m.id)}: {escape(m.reason[:160])}", highlight=False)
    for title, rows in view.tables():
        t = Table(*[title if not h else h for h in HEAD], title=None, show_edge=False)
        for r in rows:
            t.add_row(*map(escape, r))
        out.print(t)
    for line in s.stale_equivalents:
        out.print(f"[yellow]equivalence claim not honoured:[/] {escape(line)}")
    out.print(f"[bold]score {pct(s.totals)}[/] = killed {s.totals.killed} / (mutants {s.totals.mutants} - equivalent "
              f"{s.totals.equivalent} - error {s.totals.error}); {s.mutants_per_min_per_core:g} mutants/min/core, "
              f"{s.cached} from the cache, {s.duration_s:.0f} s")
    if view.reach_line():
        out.print(escape(view.reach_line()), highlight=False)
    out.print(escape(view.claims_line()), highlight=False)


