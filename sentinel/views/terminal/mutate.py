"""A mutate report on the terminal: survivors first, each with its diff, then the scores
(target, boundary, operator) and the score in one line."""

from __future__ import annotations

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from ...inert import markup as escape, plain
from ..model import MUTATE_HEAD as HEAD, pct
from ..palette import label, style


def mutate(view, out: Console, verbose: bool = False, limit: int = 40) -> None:
    s = view.mutate
    survivors = [m for m in s.mutants if m.verdict == "survived"]
    out.print(f"[bold]sentinel mutate[/] {escape(s.target)} @ {escape(str(s.commit))[:12]}: "
              f"{s.totals.mutants} mutants of {len(s.functions)} functions, hunt {s.budget_s:g} s per survivor of "
              f"the catalog, seed {s.seed}")
    for i, m in enumerate(survivors[:limit]):
        out.print(f"\n[{style('survived')}]{label('survived')}[/] {escape(m.id)}  {escape(m.position)}  "
                  f"(scenarios {m.scenarios}, hunt examples {m.examples})")
        out.print(Syntax(plain(m.diff), "diff", theme="ansi_dark", background_color="default"))
    if len(survivors) > limit:
        out.print(f"... and {len(survivors) - limit} more survivors (the JSON report lists all)")
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


