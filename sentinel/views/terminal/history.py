"""A history on the terminal: one line per scenario, one cell per evaluated commit (oldest
left), each cell its verdict's symbol in its colour (sentinel/views/palette.py), blank where
that commit was not evaluated for that scenario (a bisect probes one scenario). A flip is
its letter at the commit that made it: F fixed, R regressed. Then the flips, each with the
invariants that decided it on both sides."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...inert import terminal
from ..grids import short
from ..palette import style, symbol
from .scenarios import invariant_detail

CELLS = ("holds", "violated", "error", "unsupported", "not-loaded")
FLIP = {"fixed": ("F", "bold green reverse"), "regressed": ("R", "bold red reverse")}


def timeline(view, console: Console, verbose: bool = False) -> None:
    h = view.history
    cols = view.evaluated()
    names = view.scenario_order()
    name_w = min(40, max((len(n) for n in names), default=8))
    room = max(10, (console.width or 120) - name_w - 2)
    hidden = max(0, len(cols) - room)
    cols = cols[hidden:]
    flip_at = {(f.scenario, f.commit): f.change for f in h.flips if f.commit}
    console.print(Text.assemble(("history ", "bold"), (terminal(h.target), "bold cyan"), terminal(f"  {h.since} .. {h.until}")))
    console.print(Text(view.summary_line(), style="dim"))
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
                v = c.verdicts[name]
                line.append(symbol(v), style(v))
            else:
                line.append(" ")
        console.print(line, overflow="crop", no_wrap=True)
    if cols:
        axis = Text(" " * (name_w + 2), no_wrap=True)
        axis.append(f"{cols[0].id[:9]} → {cols[-1].id[:9]}", style="dim")
        console.print(axis, overflow="crop")
    legend = Text("legend: ")
    for v in CELLS:
        legend.append(symbol(v), style(v))
        legend.append(f" {'not loading' if v == 'not-loaded' else v}  ")
    legend.append_text(Text.assemble(("F", FLIP["fixed"][1]), " fixed here  ", ("R", FLIP["regressed"][1]), " regressed here"))
    console.print(legend)
    if h.flips:
        t = Table(title="flips", title_justify="left")
        for c in ("change", "scenario", "commit", "PR", "date", "subject"):
            t.add_column(c, overflow="fold")
        for f in h.flips:
            where = f.commit[:10] if f.commit else "one of " + " ".join(x[:10] for x in f.candidates)
            t.add_row(Text(f"{symbol(f.change)} {f.change}", style(f.change)), Text(terminal(f.scenario)), Text(terminal(where)),
                      f"#{f.pr}" if f.pr else "", Text(terminal(f.date[:10])), Text(terminal(f.subject)))
        console.print(t)
        for f in h.flips:
            console.print(Text.assemble(("\n" + terminal(f.scenario), "bold"), " ", (f.change, style(f.change)),
                                        terminal(f" at {f.commit[:10] if f.commit else '?'}"), (terminal(f"  {f.subject}"), "dim")))
            for side, r in (("before", f.before), ("after", f.after)):
                console.print(Text.assemble(f"  {side} ", (terminal(r.target.split("@")[-1][:10]), "cyan"), " ",
                                            (f"{symbol(r.verdict)} {r.verdict}", style(r.verdict))))
                for inv in view.focus(r, f):
                    console.print(invariant_detail(inv, r), highlight=False)
                    if inv.verdict == "held" and inv.observed is not None:
                        console.print(Text(terminal(f"  observed {short(inv.observed)}")), highlight=False)
    if h.hunt:
        console.print(Text(terminal(f"hunt: {h.hunt}"), style="dim"))
