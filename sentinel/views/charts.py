"""The reports' charts, drawn by matplotlib (the `plot` extra) and nothing else: the compare
timeline (base -> head per scenario), the hunt's progress (examples and findings against the
hunt's search seconds, one line per property) and the history timeline (verdicts at each
evaluated commit, flips marked, skipped commits shown).

Every chart has axis titles with units and a legend; a verdict is carried by the marker's
shape and its word as well as its colour (views/palette.py). Text from the report is passed
as plain text (no mathtext, control characters shown as escapes); matplotlib's SVG writer
escapes it. `svg` returns the figure as inline SVG with its text as <text> elements, so a
page shows it without fetching anything and a test can read its labels from the DOM.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from .. import inert
from .palette import COMPARE_ORDER, SERIES, colour, label, marker

PLOT_HINT = "pip install 'rl-sentinel[plot]'"
RC = {"svg.fonttype": "none", "text.parse_math": False, "font.size": 9, "axes.titlesize": 10,
      "axes.spines.top": False, "axes.spines.right": False, "svg.hashsalt": "rl-sentinel"}
DASHES = ("-", "--", ":", "-.")


@dataclass
class Chart:
    """A drawn chart (`svg`) or why there is none (`note`)."""

    name: str
    svg: Markup | None = None
    note: str = ""


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # a file or a string, never a window
    import matplotlib.pyplot as plt
    return plt


def _t(text: Any, n: int = 60) -> str:
    """Report text for a label: one line, control characters as escapes, at most n characters."""
    s = inert.plain(text, lines=False)
    return s if len(s) <= n else s[: n - 1] + "…"


def svg(fig, name: str) -> Markup:
    """The figure as an inline <svg> element (its XML prologue dropped); ids salted by `name`
    so two charts in one page never share one."""
    import matplotlib
    plt = _pyplot()
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": name}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r'\bid="', f'id="{name}-', text)
    text = re.sub(r'(url\(#|xlink:href="#)', rf"\g<1>{name}-", text)
    return Markup(text.replace("<svg ", f'<svg class="chart {name}" role="img" ', 1))


def _draw(name: str, draw, *args) -> Chart:
    if not available():
        return Chart(name, note=f"Chart not drawn: matplotlib is not installed ({PLOT_HINT}); the table has the numbers.")
    import matplotlib
    with matplotlib.rc_context(RC):
        out = draw(*args)
        if isinstance(out, str):
            return Chart(name, note=out)
        return Chart(name, svg=svg(out, name))


def _verdict_handles(plt, verdicts: list[str]) -> list:
    return [plt.Line2D([], [], marker=marker(v), color=colour(v), linestyle="", markersize=8, label=label(v))
            for v in dict.fromkeys(verdicts)]


# --- compare ----------------------------------------------------------------------------

def compare(report, loc) -> Chart:
    """Each scenario's verdict on the base and on the head, joined, the compare verdict after."""
    return _draw("compare-timeline", _compare, report, loc)


def _compare(report, loc):
    plt = _pyplot()
    rows = sorted(report.comparisons, key=lambda c: COMPARE_ORDER[c.verdict])
    fig, ax = plt.subplots(figsize=(8.5, 1.4 + 0.38 * len(rows)))
    for y, c in enumerate(rows):
        ax.plot([0, 1], [y, y], color="#8c959f", linewidth=1.5, zorder=1)
        for x, v in ((0, c.base), (1, c.head)):
            ax.scatter([x], [y], marker=marker(v), s=90, color=colour(v), zorder=2, edgecolors="white")
        ax.text(1.12, y, label(c.verdict), color=colour(c.verdict), va="center", fontweight="bold")
    ax.set_yticks(range(len(rows)), [_t(c.id, 40) for c in rows])
    ax.set_xticks([0, 1], [f"base\n{_t(loc.describe('base'), 40)}", f"head\n{_t(loc.describe('head'), 40)}"])
    ax.set_xlim(-0.25, 1.6)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the worst first, at the top
    ax.set_xlabel("revision (base → head); right: the compare verdict")
    ax.set_ylabel("scenario")
    ax.set_title("Compare: each scenario's verdict, base → head", loc="left")
    verdicts = [v for c in rows for v in (c.base, c.head)]
    ax.legend(handles=_verdict_handles(plt, verdicts), title="scenario verdict", loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


# --- hunt -------------------------------------------------------------------------------

def hunt(h) -> Chart:
    """Examples and findings of each property against the hunt's search seconds."""
    if not any(p.progress for p in h.properties):  # said with or without matplotlib
        return Chart("hunt-progress", note="No progress over time in this report (hunt reports record it from "
                     "schema 1.1 on); the table has each property's totals.")
    return _draw("hunt-progress", _hunt, h)


def _hunt(h):
    props = [p for p in h.properties if p.progress]
    plt = _pyplot()
    fig, (top, low) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.6), gridspec_kw={"height_ratios": [3, 1.3]})
    found = {f.property for f in h.findings}
    for i, p in enumerate(sorted(props, key=lambda p: (p.property not in found, p.property))):
        ts = [s.s for s in p.progress]
        style = {"color": SERIES[i % len(SERIES)], "linestyle": DASHES[(i // len(SERIES)) % len(DASHES)],
                 "linewidth": 2.0 if p.property in found else 1.2}
        top.plot(ts, [s.examples for s in p.progress], label=_t(p.property, 48), **style)
        low.step(ts, [s.findings for s in p.progress], where="post", **style)
    bad = colour("violated")
    firsts = [f for f in h.findings if f.hunt_elapsed_s is not None]
    if firsts:
        top.scatter([f.hunt_elapsed_s for f in firsts], [f.examples_to_first for f in firsts], marker=marker("violated"),
                    s=110, color=bad, edgecolors="white", zorder=3, label=f"{label('violated')}: first finding")
    top.set_ylabel("examples (count)")
    low.set_ylabel("findings (count)")
    low.set_xlabel("hunt search time (s)")
    low.yaxis.get_major_locator().set_params(integer=True)
    top.set_ylim(bottom=0)
    low.set_ylim(bottom=0)
    top.set_title(f"Hunt progress: {h.examples} examples in {h.search_s:.3g} s, {len(h.findings)} finding(s)", loc="left")
    top.legend(title="property", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
               fontsize=7 if len(props) > 12 else 8, ncol=1 if len(props) <= 24 else 2)
    return fig


# --- history ----------------------------------------------------------------------------

def history(view) -> Chart:
    return _draw("history-timeline", history_figure, view)


def history_figure(view):
    """Scenarios down, the range's commits across (oldest left): a marker per evaluated verdict,
    a triangle where a flip was bisected to, and a bottom row with the commits not evaluated
    (skipped: no loss-path change; between: not sampled)."""
    plt = _pyplot()
    h = view.history
    commits = list(h.commits)
    if not commits:
        return "No commit in this range."
    names = view.scenario_order()
    x = {c.id: i for i, c in enumerate(commits)}
    fig, ax = plt.subplots(figsize=(min(20.0, 6.5 + 0.16 * len(commits)), 1.9 + 0.42 * (len(names) + 1)))
    seen: list[str] = []
    evaluated = [c for c in commits if c.role in ("sample", "probe")]
    for y, name in enumerate(names):
        for v in dict.fromkeys(c.verdicts.get(name) for c in evaluated):
            if v is None:
                continue
            xs = [x[c.id] for c in evaluated if c.verdicts.get(name) == v]
            ax.scatter(xs, [y] * len(xs), marker=marker(v), s=60, color=colour(v), edgecolors="white", zorder=2)
            seen.append(v)
    flips = [f for f in h.flips if f.commit in x and f.scenario in names]
    for f in flips:
        up = f.change == "fixed"
        ax.scatter([x[f.commit]], [names.index(f.scenario)], marker="^" if up else "v", s=260, facecolors="none",
                   edgecolors=colour(f.change), linewidths=2, zorder=3)
        left = x[f.commit] > len(commits) / 2  # on the right half the label reads leftwards: not into the legend
        ax.annotate(f"{label(f.change)}: {_t(f.subject, 40)}", (x[f.commit], names.index(f.scenario)),
                    xytext=(-12 if left else 12, 10), textcoords="offset points", ha="right" if left else "left",
                    fontsize=8, color=colour(f.change))
    rest = len(names)
    for role, m, text in (("skipped", "|", "skipped: no loss-path change"), ("between", ".", "between samples: not evaluated")):
        xs = [x[c.id] for c in commits if c.role == role]
        if xs:
            ax.scatter(xs, [rest] * len(xs), marker=m, s=50, color="#8c959f", label=text)
    ticks = [x[c.id] for c in evaluated]
    step = max(1, len(ticks) // 40)  # at most ~40 labels
    ax.set_xticks(ticks[::step], [f"{c.date[:10]}\n{c.id[:7]}" for c in evaluated][::step], rotation=90, fontsize=7)
    ax.set_yticks(range(rest + 1), [_t(n, 40) for n in names] + ["(commits not evaluated)"])
    ax.set_ylim(rest + 0.6, -0.6)
    ax.set_xlim(-0.8, len(commits) - 0.2)
    ax.set_xlabel("commit (committer date, short sha), oldest left; every commit of the range is a column")
    ax.set_ylabel("scenario")
    ax.set_title(f"History of {_t(h.target, 30)} {_t(h.since, 12)}..{_t(h.until, 12)}: {len(evaluated)} evaluated "
                 f"of {len(commits)} commits, {len(h.flips)} flip(s)", loc="left")
    handles = _verdict_handles(plt, seen)
    handles += [plt.Line2D([], [], marker="^" if ch == "fixed" else "v", markerfacecolor="none", markersize=11,
                           markeredgecolor=colour(ch), markeredgewidth=2, linestyle="", label=f"{label(ch)} here (flip)")
                for ch in ("fixed", "regressed")]
    handles += [hd for hd in ax.get_legend_handles_labels()[0]]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    ax.grid(axis="x", color="#eaeef2", linewidth=0.6)
    fig.tight_layout()
    return fig
