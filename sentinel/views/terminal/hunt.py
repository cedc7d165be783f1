"""A hunt on the terminal: the properties that found or failed something (every one with
-v), a panel per finding with its minimal trigger and signature (a differential finding with
both sides), known signatures and declared deviations met, and the verdict in one line."""

from __future__ import annotations

import json

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ...inert import markup, terminal
from ..palette import label, style
from .scenarios import invariant_detail


def _excluded_lines(excluded: dict[str, dict[str, dict[str, list]]]) -> list[str]:
    """One line per boundary (and side, where the sides differ): `key=choice|choice, ...`."""
    def text(cfg: dict[str, list]) -> str:
        return ", ".join(f"{k}=" + "|".join(json.dumps(v, separators=(",", ":")) for v in vs) for k, vs in cfg.items())
    lines = []
    for b in sorted({b for cfg in excluded.values() for b in cfg}):
        per = {side: cfg[b] for side, cfg in excluded.items() if cfg.get(b)}
        if len(per) == 2 and len({text(c) for c in per.values()}) == 1:
            lines.append(f"{b}: {text(next(iter(per.values())))} (both sides)")
        else:
            lines += [f"{b}: {text(c)} ({side} only)" for side, c in per.items()]
    return lines


def hunt(view, out: Console, verbose: bool = False) -> None:
    rep = view.report
    h = rep.hunt
    results = {r.id: r for r in rep.results}
    t = Table(title=f"RL-Sentinel hunt · {', '.join(rep.targets)}", title_justify="left")
    for c in ("property", "verdict", "examples", "rejected", "errors", "s / share", "why"):
        t.add_column(c, overflow="fold")
    for p in h.properties:
        if not verbose and p.status in ("holds", "unsupported") and not p.errors:
            continue
        r = results.get(p.property)
        why = ((r.reason if r else p.reason) or "").split("; ")[0][:100]
        if p.errors and p.error_sample and p.status != "error":
            why += f" · target raised on {p.errors} input(s): {p.error_sample.type}: {p.error_sample.message[:80]}"
        if p.preconditions:
            why += " · excluded by precondition: " + ", ".join(f"{k.split(':')[0]} x{n}" for k, n in p.preconditions.items())
        if p.excluded_known:
            why += f" · {sum(p.excluded_known.values())} known-bug example(s) passed over"
        t.add_row(Text(terminal(p.property)), Text(label(p.status), style(p.status) or "yellow"),
                  str(p.examples), str(p.rejected), str(p.errors), f"{p.duration_s:.2f} / {p.share_s:.2f}",
                  Text(terminal(why)))
    if t.row_count:
        out.print(t)
    for f in h.findings:
        if f.classification is not None:
            _diff_panel(f, out)
            continue
        r = results.get(f.property)
        body = [invariant_detail(i, r) for i in (r.invariants if r else []) if i.message == f.message][:1]
        shape = f"{f.rows} row(s) x {f.tokens} token(s)" if f.tokens else f"{f.rows} row(s)"
        title = (f"{f.property}: minimal trigger {shape}, found after {f.examples_to_first} examples / "
                 f"{f.time_to_first_s:.2f} s of its search")
        if f.reproduced is False:
            title += " · [bold magenta]the written scenario did NOT reproduce it[/]"
        sig = Text(terminal(f"signature: {_sig_text(f.signature)}"), style="dim") if f.signature else Text("")
        out.print(Panel(Group(*body, sig, Text(terminal(f"scenario: {f.file or f.scenario_id}"), style="dim")),
                        title=markup(title), title_align="left", border_style=style("violated")))
    for k in h.known:
        if k.excluded:
            out.print(f"[dim]known, passed over {k.excluded}x: {markup(_sig_text(k.signature))} ({markup(k.source)})[/]",
                      highlight=False)
    for dev in h.deviations:
        if not dev.applies:
            out.print(f"[yellow]deviation skipped[/] {markup(dev.name)} ({markup(dev.boundary)}): "
                      f"{markup(dev.skipped)}", highlight=False)
        elif dev.met:
            out.print(f"[yellow]deviation[/] {markup(dev.name)} ({markup(dev.boundary)}): {dev.met} example(s) "
                      f"explained: {markup(dev.reason)} ({markup(dev.link)})", highlight=False)
    for o in h.options:
        if o.options_read_not_varied:
            out.print(f"[yellow]options read, never varied[/] on {markup(o.boundary)}: "
                      f"{markup(', '.join(o.options_read_not_varied))}", highlight=False)
        out.print(f"[dim]{markup(o.boundary)}: {len(o.options_read)} option(s) read, {len(o.options_varied)} varied, "
                  f"{len(o.options_pinned)} pinned[/]", highlight=False)
    if h.coverage:
        out.print(f"[dim]coverage of the catalog's {h.coverage_scenarios} scenario(s) of these boundaries, "
                  "then the hunt:[/]", highlight=False)
    for c in h.coverage:
        out.print(f"[dim]coverage {markup(c.function)}: {c.branches_covered}/{c.branches_total} branches, "
                  f"{len(c.branches_unreachable)} unreachable, {len(c.uncovered)} uncovered[/]", highlight=False)
    if h.differential is not None:
        d = h.differential
        lines = _excluded_lines(d.excluded_config)
        if lines:
            out.print("[dim]config not drawn (a side does not support it):[/]", highlight=False)
            for line in lines:
                out.print(f"[dim]  {markup(line)}[/]", highlight=False)
        out.print(f"[dim]{markup(d.base)} (base) vs {markup(d.head)} (head): {d.compared} examples compared, "
                  f"{d.differing} differed[/]", highlight=False)
    for key, t in rep.targets.items():  # which side (or target) did not load: the reason for exit 3
        if t.load_error is not None:
            side = "" if h.differential is None else "base " if key == h.differential.base else "head "
            out.print(f"[bold magenta]{side}{markup(key)} could not be loaded:[/] {markup(t.load_error.message)}",
                      highlight=False)
    v = h.verdicts
    code = rep.exit_code()
    word = view.word()
    counts = [f"{v[w]} {w}" for w in ("holds", "untested", "stopped", "unsupported", "error") if v.get(w)]
    out.print(f"[{style(word)}]{label(word)}[/]  "
              + " · ".join([f"{len(h.findings)} finding(s)", *counts])
              + f"  ({h.examples} examples in {h.search_s:.1f} s, {h.examples_per_s:.0f}/s; "
              f"worker start {h.startup_s:.1f} s)", highlight=False)
    if not h.examples and not h.findings:
        reasons = sorted({p.reason for p in h.properties if p.reason})[:3]
        out.print("[bold yellow]nothing was tested:[/] no property ran an example"
                  + (": " + markup("; ".join(reasons)) if reasons else "") + " (-v lists every property)",
                  highlight=False)
    elif code == 5:
        out.print("[bold yellow]nothing was decided:[/] every property is untested, stopped or unsupported "
                  "(exit 5; a longer --time or a lower --min-examples lets them finish)", highlight=False)
    if verbose:
        for b, fams in h.invariants_per_boundary.items():
            out.print(f"  {b}: {', '.join(fams)}", highlight=False)


def _diff_panel(f, out) -> None:
    shape = f"{f.rows} row(s) x {f.tokens} token(s)" if f.tokens else f"{f.rows} row(s)"
    tone = style(f.classification) or "yellow"
    lines = [Text(terminal(f.message, lines=True)),
             Text(terminal(f"base {f.base.target}: violates {', '.join(f.base.violates) or 'nothing checked'}")),
             Text(terminal(f"head {f.head.target}: violates {', '.join(f.head.violates) or 'nothing checked'}")),
             Text(terminal(f"config: {f.config}"), style="dim"),
             Text(terminal(f"signature: {_sig_text(f.signature)}"), style="dim") if f.signature else Text(""),
             Text(terminal(f"scenario: {f.file or f.scenario_id}"), style="dim")]
    if f.reproduced is False:
        lines.append(Text("the written scenario did NOT replay the difference", style="bold magenta"))
    title = (f"{label(f.classification)}: {f.property}: minimal trigger {shape}, after {f.examples_to_first} examples / "
             f"{f.time_to_first_s:.2f} s of its search")
    out.print(Panel(Group(*lines), title=markup(title), title_align="left", border_style=tone))


def _sig_text(sig) -> str:
    cfg = ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in sig.config.items())
    return f"{sig.property} · {sig.observable or '-'} · {{{cfg}}} · {'+'.join(sig.position) or 'any position'}"
