"""Scenario results as HTML: verdict badges, per-token heatmaps of observed and expected
values (masked cells hatched, offending cells outlined), a panel per scenario, the compare
timeline (base -> head) and the hunt's progress. Every string from the report passes
inert.html; paths are shown as views.locations allows."""

from __future__ import annotations

import json
import math
from typing import Any

from ... import inert
from ...report import HuntSummary, InvariantResult, Report, ScenarioResult
from ..grids import (Grid, cell_pair, fmt, invariant_grid, is_scalar, number, output_name, value_grids,
                     value_labels)
from ..locations import Locations
from ..palette import COMPARE_ORDER, SCENARIO_ORDER, colour, label

e = inert.html  # every string from the report goes through it


def badge(verdict: str, text: str | None = None) -> str:
    """A verdict as a badge: its colour, its symbol and its word (never the colour alone)."""
    return f'<span class="badge" style="background:{colour(verdict)}">{e(label(text or verdict))}</span>'


def _float(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _colour(v: float | None, scale: float) -> tuple[str, str]:
    """(background, text colour) on a diverging scale: blue below 0, red above, white at 0;
    yellow for a non-finite value."""
    if v is None or not math.isfinite(v):
        return "#fff3b0", "#1f2328"
    t = max(-1.0, min(1.0, v / scale)) if scale > 0 else 0.0
    a = abs(t)
    r, g, b = (214, 96, 77) if t > 0 else (67, 147, 195)
    mix = lambda c: int(round(255 + (c - 255) * a))  # noqa: E731
    return f"rgb({mix(r)},{mix(g)},{mix(b)})", ("#ffffff" if a > 0.6 else "#1f2328")


def _scale(*grids: list[list[Any]] | None) -> float:
    vals = [abs(f) for g in grids if g for row in g for v in row if (f := _float(v)) is not None and math.isfinite(f)]
    return max(vals, default=0.0) or 1.0


def _heatmap(g: Grid, values: list[list[Any]], title: str, scale: float, which: str) -> str:
    """One heatmap table: rows are sequences, columns tokens (or rows, for a row tensor)."""
    rows, cols = g.window(rows=48, cols=96)
    head = "".join("<th>…</th>" if j is None else f"<th>{'r' if g.row_vector else 't'}{j}</th>" for j in cols)
    body = []
    for i in rows:
        if i is None:
            body.append(f'<tr><th>…</th>{"<td class=gap></td>" * len(cols)}</tr>')
            continue
        cells = []
        for j in cols:
            row = values[i] if i < len(values) else []
            if j is None or j >= len(row):
                cells.append('<td class="gap">…</td>' if j is None else '<td class="gap"></td>')
                continue
            v = row[j]
            bg, fg = _colour(_float(v), scale)
            cls = [c for c, on in (("masked", g.masked(i, j)), ("bad", (i, j) in g.bad)) if on]
            info = f"row {i}, {'token ' + str(j) if not g.row_vector else 'row ' + str(j)}: {which} {fmt(v)}"
            if (i, j) in g.bad and g.expected is not None and which == "observed":
                info += f", {g.expected_as} {fmt(g.expected_at(i, j))}"
            if g.masked(i, j):
                info += f" (masked: {g.mask_name} 0)"
            text = number(v) if (i, j) not in g.bad or g.expected is None else cell_pair(v, g.expected_at(i, j))[0 if which == "observed" else 1]
            cells.append(f'<td class="{" ".join(cls)}" style="background:{bg};color:{fg}" data-o="{e(info)}">{e(text)}</td>')
        body.append(f"<tr><th>{'' if g.row_vector else i}</th>{''.join(cells)}</tr>")
    return (f'<div class="grid-wrap"><div class="grid-title">{title}</div>'
            f'<table class="heatmap" data-output="{e(g.name)}" data-which="{e(which)}"><tr><th>{"" if g.row_vector else "row"}</th>{head}</tr>'
            f'{"".join(body)}</table></div>')


def legend(g: Grid | None = None) -> str:
    lo, _ = _colour(-1.0, 1.0)
    hi, _ = _colour(1.0, 1.0)
    return ('<div class="legend">rows: sequences, columns: tokens'
            f'<span class="sw" style="background:{lo}"></span>negative'
            f'<span class="sw" style="background:{hi}"></span>positive'
            '<span class="sw" style="outline:3px solid #1f2328;outline-offset:-1px"></span>offending'
            '<span class="sw" style="background:repeating-linear-gradient(45deg,#e6e8eb,#e6e8eb 3px,#d4d7db 3px,#d4d7db 6px)"></span>'
            f'masked{" (" + e(g.mask_name) + " 0)" if g is not None and g.mask_name else ""}</div>')


def _grids(g: Grid) -> str:
    scale = _scale(g.observed, g.expected)
    parts = [_heatmap(g, g.observed, f"{e(g.observed_as)} <code>{e(g.name)}</code>", scale, "observed")]
    if g.expected is not None:
        parts.append(_heatmap(g, g.expected, f"{e(g.expected_as)} <code>{e(g.name)}</code>", scale, "expected"))
    return f'<div class="grids">{"".join(parts)}</div>'


def _invariant(r: ScenarioResult, inv: InvariantResult, loc: Locations, shown: set) -> str:
    name = output_name(inv)
    cfg = json.dumps(next(iter(inv.config.values()), {}))
    out = [f'<div class="inv">{badge(inv.verdict)} <span class="family">{e(inv.family)}</span> '
           f'{"<code>" + e(name) + "</code> " if name else ""}<span class="muted mono">{e(cfg)}</span>']
    if inv.message:
        out.append(f"<div>{e(loc.scrub(inv.message))}</div>")
    if inv.verdict == "violated":
        g = invariant_grid(r, inv)
        if g is not None and g.key() not in shown:
            shown.add(g.key())
            out.append(_grids(g))
        elif g is not None:
            out.append('<div class="muted small">(the heatmap above)</div>')
        elif is_scalar(inv.observed):
            diff = f", difference <code>{e(fmt(inv.difference))}</code>" if is_scalar(inv.difference) and inv.difference is not None else ""
            ob, ex = value_labels(inv)
            out.append(f"<div>{e(ob)} <code>{e(fmt(inv.observed))}</code>, {e(ex)} <code>{e(fmt(inv.expected))}</code>{diff}</div>")
        else:
            ob, ex = value_labels(inv)
            out.append(f"<div>{e(ob)} <code>{e(fmt(inv.observed)[:2000])}</code><br>{e(ex)} "
                       f"<code>{e(fmt(inv.expected)[:2000])}</code></div>")
    if inv.exception_info:
        out.append(f'<div style="color:#8250df">{e(inv.exception_info.type)}: {e(loc.scrub(inv.exception_info.message))}</div>')
    return "".join(out) + "</div>"


def _function(r: ScenarioResult, loc: Locations) -> str:
    parts = []
    for f in (r.function, *r.function.also):
        text, url = loc.source(r.target, f.file, f.line)
        where = ""
        if url:
            where = f' (<a href="{e(url)}">{e(text)}</a>)'
        elif text:
            where = f" (<code>{e(text)}</code>)"
        parts.append(f"<code>{e(f.module)}.{e(f.qualname)}</code>{where}")
    return '<div class="small">called ' + "; also ".join(parts) + "</div>"


def panel(report: Report, rs: list[ScenarioResult], loc: Locations, open_: bool) -> str:
    r0 = rs[0]
    worst = min((r.verdict for r in rs), key=SCENARIO_ORDER.__getitem__)
    many = len(report.targets) > 1
    search = " ".join([r0.id, r0.title, r0.boundary, *(r.verdict for r in rs)]).lower()
    c = next((c for c in report.comparisons if c.id == r0.id), None)
    badges = (badge(c.verdict) + " " + " → ".join(f"{e(r.target)} {badge(r.verdict)}" for r in rs) if c else
              " ".join((e(r.target) + " " if many else "") + badge(r.verdict) for r in rs))
    head = (f'<summary><h3>{badges} '
            f'<code>{e(r0.id)}</code> <span class="muted">{e(r0.title)}</span></h3></summary>')
    facts = [f"boundary <code>{e(r0.boundary)}</code>"]
    if (f := loc.relative(r0.file)) is not None:
        facts.append(f"<code>{e(f)}</code>")
    for p in r0.provenance:
        p = loc.scrub(p)
        facts.append(f'<a href="{e(p)}">{e(p)}</a>' if p.startswith(("https://", "http://")) else e(p))
    body = [f'<div class="small muted">{" · ".join(facts)}</div>']
    for r in rs:
        if many:
            body.append(f"<h4>on {e(r.target)} {badge(r.verdict)}</h4>")
        if r.function:
            body.append(_function(r, loc))
        if r.reason and r.verdict in ("unsupported", "excluded", "error"):
            body.append(f"<div>{e(loc.scrub(r.reason))}</div>")
        if r.exception_info:
            x = r.exception_info
            body.append(f'<div style="color:#8250df"><b>{e(x.type)}</b>: {e(loc.scrub(x.message))}</div>')
            if x.traceback:
                body.append(f"<details><summary>traceback</summary><pre>{e(loc.scrub(x.traceback))}</pre></details>")
        shown: set = set()
        bad = [i for i in r.invariants if i.verdict != "held"]
        body += [_invariant(r, i, loc, shown) for i in bad]
        held = [i for i in r.invariants if i.verdict == "held"]
        if held:
            body.append('<div class="small muted">held: ' + ", ".join(e(i.family) + (f" <code>{e(n)}</code>" if (n := output_name(i)) else "")
                                                                   for i in held) + "</div>")
        obs = [g for g in value_grids(r) if g.key() not in shown]
        if obs:
            inner = "".join(_grids(g) for g in obs)
            body.append(f'<details{" open" if not bad else ""}><summary class="small">outputs per token ({len(obs)})</summary>'
                        f"{legend(obs[0])}{inner}</details>")
    trigger = json.dumps({"config": r0.config, "inputs": r0.inputs}, indent=None)
    inputs = "".join(_grids(g) for g in value_grids(r0, "inputs"))
    body.append(f'<details><summary class="small">trigger (config and canonical inputs)</summary>{inputs}'
                f'<pre>{e(trigger[:20000])}</pre></details>')
    return (f'<details class="panel" data-verdict="{e(worst)}" data-search="{e(search)}" style="--c:{colour(worst)}"'
            f'{" open" if open_ else ""}>{head}{"".join(body)}</details>')


def compare_timeline(report: Report, loc: Locations) -> str:
    """A timeline per scenario: base verdict -> head verdict, the compare verdict after."""
    rows = sorted(report.comparisons, key=lambda c: COMPARE_ORDER[c.verdict])
    label = {k: loc.describe(k) for k in ("base", "head")}
    w, h = 760, 26
    svg = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h * len(rows) + 34}" role="img">',
           f'<text x="300" y="14" text-anchor="middle">base: {e(label["base"][:60])}</text>',
           f'<text x="520" y="14" text-anchor="middle">head: {e(label["head"][:60])}</text>']
    for n, c in enumerate(rows):
        y = 34 + n * h
        svg += [f'<text x="0" y="{y + 4}">{e(c.id[:40])}</text>',
                f'<line x1="300" y1="{y}" x2="520" y2="{y}" stroke="#8c959f" stroke-width="2"/>',
                f'<circle cx="300" cy="{y}" r="7" fill="{colour(c.base)}"><title>base: {e(c.base)}</title></circle>',
                f'<circle cx="520" cy="{y}" r="7" fill="{colour(c.head)}"><title>head: {e(c.head)}</title></circle>',
                f'<text x="312" y="{y - 6}" class="muted">{e(c.base)}</text>',
                f'<text x="532" y="{y + 4}">{e(c.head)}</text>',
                f'<text x="640" y="{y + 4}" style="fill:{colour(c.verdict)};font-weight:700">{e(c.verdict)}</text>']
    return "<h2>Compare: base → head</h2>" + "".join(svg) + "</svg>"


def hunt_chart(h: HuntSummary, loc: Locations) -> str:
    """Examples against search seconds, one line per property (its own rounds, at its mean rate),
    first findings marked; the table beside it gives the numbers."""
    red = colour("violated")
    props = [p for p in h.properties if p.examples or p.duration_s]
    found = {f.property: f for f in h.findings}
    W, H, L, B, R = 760, 300, 52, 34, 36
    tmax = max([p.duration_s for p in props] + [0.1])
    nmax = max([p.examples for p in props] + [f.examples_to_first for f in h.findings] + [1])
    x = lambda t: L + (W - L - R) * t / tmax  # noqa: E731
    y = lambda n: H - B - (H - B - 12) * n / nmax  # noqa: E731
    svg = [f'<svg class="hunt-progress" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img">',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#8c959f"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{L}" y2="8" stroke="#8c959f"/>',
           f'<text x="{(W + L) / 2}" y="{H - 6}" text-anchor="middle">search seconds of the property</text>',
           f'<text x="12" y="{(H - B) / 2}" transform="rotate(-90 12 {(H - B) / 2})" text-anchor="middle">examples</text>']
    for k in range(5):
        t, n = tmax * k / 4, nmax * k / 4
        svg += [f'<text x="{x(t):.1f}" y="{H - B + 14}" text-anchor="middle">{t:.3g}</text>',
                f'<text x="{L - 6}" y="{y(n) + 4:.1f}" text-anchor="end">{n:.0f}</text>',
                f'<line x1="{L}" y1="{y(n):.1f}" x2="{W - R}" y2="{y(n):.1f}" stroke="#eaeef2"/>']
    for p in props:
        line = red if p.property in found else "#8c959f"
        svg.append(f'<polyline points="{x(0):.1f},{y(0):.1f} {x(p.duration_s):.1f},{y(p.examples):.1f}" fill="none" '
                   f'stroke="{line}" stroke-width="{2 if p.property in found else 1}" opacity="0.8">'
                   f'<title>{e(p.property)}: {p.examples} examples in {p.duration_s:.3g} s ({e(p.status)})</title></polyline>')
    for f in h.findings:
        p = next((q for q in props if q.property == f.property), None)
        t = min(f.time_to_first_s, p.duration_s) if p else f.time_to_first_s
        svg.append(f'<circle class="finding" cx="{x(t):.1f}" cy="{y(f.examples_to_first):.1f}" r="6" fill="{red}">'
                   f'<title>first finding: {e(f.property)} after {f.examples_to_first} examples '
                   f'({f.time_to_first_s:.3g} s of hunt search)</title></circle>'
                   f'<text x="{x(t) + (9 if x(t) < W - 220 else -9):.1f}" y="{y(f.examples_to_first) - 6:.1f}" '
                   f'text-anchor="{"start" if x(t) < W - 220 else "end"}" style="fill:{red}">{e(f.property)}</text>')
    svg.append("</svg>")
    rows = "".join(
        f"<tr><td><code>{e(p.property)}</code></td><td>{badge(p.status)}</td><td>{p.examples}</td><td>{p.rejected}</td>"
        f"<td>{p.duration_s:.3g}</td><td>{p.rounds}</td>"
        f"<td>{(str(found[p.property].examples_to_first) + ' ex, ' + format(found[p.property].time_to_first_s, '.3g') + ' s') if p.property in found else ''}</td></tr>"
        for p in sorted(h.properties, key=lambda p: (p.property not in found, p.property)))
    files = "".join(f"<li><code>{e(f.property)}</code>: {e(f.message)}"
                    + (f" — <code>{e(loc.relative(f.file) or '')}</code>" if f.file and loc.relative(f.file) else "")
                    + "</li>" for f in h.findings)
    summary = (f"{h.examples} examples in {h.search_s:.3g} s ({h.examples_per_s:.3g}/s), "
               f"{len(h.findings)} finding(s), {len(h.properties)} properties, seed {e(h.seed)}")
    return (f'<h2>Hunt</h2><div class="small">{summary}</div>{"<ul>" + files + "</ul>" if files else ""}'
            f'<div class="small muted">Each line: one property, from no examples to its total over its own search '
            f'time (its mean rate); a dot: the first finding.</div>{"".join(svg)}'
            f'<details><summary class="small">properties ({len(h.properties)})</summary><table class="list">'
            f"<tr><th>property</th><th>status</th><th>examples</th><th>rejected</th><th>seconds</th><th>rounds</th>"
            f"<th>first finding</th></tr>{rows}</table></details>")


