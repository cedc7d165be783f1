"""HTML sections of the reports that are not scenario results: a history's timeline (dates,
commit subjects, flips marked, skipped commits counted), a mutation score with its
survivors' diffs, a bisect log, a conformance matrix. Every string passes inert.html."""

from __future__ import annotations

from ... import inert
from ...links import github_url
from ..palette import colour, symbol
from .scenarios import badge

e = inert.html


def _cell(verdict: str, text: str | None = None) -> str:
    """A table cell in the verdict's colour, with its symbol, the word in its title."""
    return (f'<td class="cell" style="background:{colour(verdict)};color:#fff" title="{e(text or verdict)}">'
            f"{e(symbol(verdict))}</td>")


def history(view) -> str:
    h = view.history
    base = github_url(h.repo)
    cols = view.evaluated()
    flip_at = {(f.scenario, f.commit): f.change for f in h.flips if f.commit}
    head = "".join(f'<th class="commit" title="{e(c.subject)}"><div>{e(c.date[:10])}</div><code>{e(c.id[:7])}</code></th>'
                   for c in cols)
    rows = []
    for name in view.scenario_order():
        cells = []
        for c in cols:
            change = flip_at.get((name, c.id))
            v = c.verdicts.get(name)
            if change:
                cells.append(f'<td class="cell flip" style="background:{colour(change)};color:#fff" '
                             f'title="{e(change)} here: {e(c.subject)}">{"F" if change == "fixed" else "R"}</td>')
            elif v:
                cells.append(_cell(v, f"{v} at {c.id[:10]} ({c.date[:10]}): {c.subject}"))
            else:
                cells.append('<td class="cell"></td>')
        rows.append(f"<tr><th><code>{e(name)}</code></th>{''.join(cells)}</tr>")
    legend = " ".join(badge(v) for v in ("holds", "violated", "error", "unsupported", "not-loaded"))
    flips = "".join(
        f"<tr><td>{badge(f.change)}</td><td><code>{e(f.scenario)}</code></td>"
        f"<td>{_commit(f.commit, base) if f.commit else 'one of ' + ', '.join(e(c[:10]) for c in f.candidates)}</td>"
        f"<td>{'#' + str(f.pr) if f.pr else ''}</td><td>{e(f.date[:10])}</td><td>{e(f.subject)}</td></tr>" for f in h.flips)
    skipped = h.cost.skipped_no_loss_path
    return (f"<h2>History: {e(h.target)} <code>{e(h.since)}</code>..<code>{e(h.until)}</code></h2>"
            f'<div class="small">{e(view.summary_line())}</div>'
            + (f'<h3>Flips ({len(h.flips)})</h3><table class="list flips"><tr><th>change</th><th>scenario</th><th>commit</th>'
               f"<th>PR</th><th>date</th><th>subject</th></tr>{flips}</table>" if h.flips else
               "<p>No scenario changed its verdict in this range.</p>")
            + f'<h3>Timeline</h3><div class="legend">{legend} · F fixed here · R regressed here · {skipped} commit(s) '
            f'skipped (no loss-path change), not shown</div><div class="grid-wrap"><table class="timeline-grid">'
            f"<tr><th>oldest → newest</th>{head}</tr>{''.join(rows)}</table></div>")


def _commit(sha: str, base: str | None) -> str:
    return f'<a href="{e(base)}/commit/{e(sha)}"><code>{e(sha[:10])}</code></a>' if base else f"<code>{e(sha[:10])}</code>"


def mutate(view) -> str:
    s = view.mutate
    tables = []
    for title, rows in view.tables():
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
        tables.append(f'<table class="list"><tr><th>{e(title)}</th><th>mutants</th><th>killed</th><th>survived</th>'
                      f"<th>equivalent</th><th>error</th><th>score</th></tr>{body}</table>")
    survivors = "".join(
        f'<details class="panel" style="--c:{colour("survived")}" open><summary>{badge("survived")} <code>{e(m.id)}</code> '
        f'<span class="muted">{e(m.position)}</span></summary><pre>{e(m.diff)}</pre></details>'
        for m in s.mutants if m.verdict == "survived")
    return (f"<h2>Mutants of {e(s.target)} at <code>{e(s.commit)}</code></h2>{''.join(tables)}"
            + (f"<h2>Survivors</h2>{survivors}" if survivors else ""))


def bisect(view) -> str:
    b = view.log
    rows = "".join(f"<tr><td><code>{e(p.commit[:10])}</code></td><td>{badge(p.verdict)}</td><td>{e(p.subject)}</td></tr>"
                   for p in b.probes)
    first = (f"<p><code>{e(b.first.commit)}</code>: {e(b.first.subject)}</p>" if b.first else
             "<p>Candidates: " + ", ".join(f"<code>{e(c[:10])}</code>" for c in b.candidates) + "</p>")
    return (f"{first}<p class=\"small\">{e(b.target)}: tried {b.tried} revisions of {b.commits_in_range} in range, "
            f'{b.duration_s:.1f} s</p><table class="list"><tr><th>commit</th><th>verdict</th><th>subject</th></tr>{rows}</table>')


def matrix(view) -> str:
    t = view.table
    head = "".join(f"<th>{e(c)}</th>" for c in t["columns"])
    rows = "".join(
        f"<tr><td><code>{e(r['scenario'])}</code></td><td>{e(r['invariant'])}</td>"
        + "".join(f"<td>{badge(v) if symbol(v) != '•' else e(v)}</td>" for v in r["cells"].values()) + "</tr>"
        for r in t["rows"])
    return f'<h2>Conformance matrix</h2><table class="list"><tr><th>scenario</th><th>invariant</th>{head}</tr>{rows}</table>'


