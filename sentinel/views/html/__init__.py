"""The HTML format: one self-contained page (`sentinel report FILE --format html -o r.html`).

No network: CSS, JS and SVG are inline, nothing is fetched. Scenario results (run, gate,
compare, matrix, hunt) have the verdict and the target, the compare timeline, the hunt's
progress, the matrix, and a panel per scenario, violations and errors first, with per-token
heatmaps; holds and unsupported scenarios collapsed. A history, a mutate report and a
bisect log have their own sections (html/kinds.py). Every string from a report passes
inert.html.
"""

from __future__ import annotations

from ... import inert
from ..locations import Locations
from ..model import headline, ordered
from ..registry import Format, by_kind
from . import kinds
from .scenarios import badge, compare_timeline, hunt_chart, legend, panel
from .style import CSS, HEAD_JS, JS

e = inert.html


def document(title: str, parts: list[str]) -> str:
    """The whole HTML document around `parts` (HTML already escaped)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{e(title)}</title>"
            f"<script>{HEAD_JS}</script><style>{CSS}</style></head>\n<body>"
            f"<h1>RL-Sentinel report</h1>{''.join(parts)}<script>{JS}</script></body></html>\n")


def _verdict_line(word: str, tone: str, line: str) -> str:
    return f'<div class="verdict-line">{badge(tone, word)} {e(line)}</div>'


def scenarios(view) -> str:
    """Run, gate, compare, matrix and hunt reports: the scenario results, with what the kind adds."""
    report = view.report
    loc = Locations(report)
    s = report.statistics
    word, line = headline(report).split(": ", 1)
    if view.kind == "hunt":
        word, line = view.headline().split(": ", 1)
    env = report.environment
    targets = "".join(f"<li><b>{e(k)}</b>: {e(loc.describe(k))}"
                      + (f' (<a href="{e(u)}">commit</a>)' if (u := loc.commit_url(k)) else "") + "</li>"
                      for k in report.targets)
    failing, rest = ordered(report)
    tone = "unsupported" if report.nothing_ran() else "holds" if report.success else "violated"
    parts = [_verdict_line(word.removeprefix("compare ").removeprefix("hunt "), tone, line),
             f'<div class="small muted">{s.holds} hold · {s.violated} violated · {s.errors} error · {s.unsupported} unsupported '
             + (f"· {s.excluded} excluded " if s.excluded else "") +
             f"({s.invariants_held} invariants held, {s.invariants_violated} violated) · {e(env.device or 'cpu')}, torch {e(env.torch)}, "
             f"rl-sentinel {e(env.tool_version)} · {report.duration_s:.2f} s · {e(report.created_at)}</div>",
             f'<ul class="small">{targets}</ul>']
    if report.command:
        parts.append(f"<pre>{e(' '.join(loc.command(report.command)))}</pre>")
    if report.comparisons:
        parts.append(compare_timeline(report, loc))
    if report.hunt is not None:
        parts.append(hunt_chart(report.hunt, loc))
    if view.kind == "matrix":
        parts.append(kinds.matrix(view))
    parts.append('<div class="toolbar"><input id="filter" type="search" placeholder="filter scenarios (id, title, boundary, verdict)"></div>')
    if failing:
        parts.append(f"<h2>Violations and errors ({len(failing)})</h2>{legend()}")
        parts += [panel(report, rs, loc, open_=True) for rs in failing]
    if rest:
        parts.append(f"<h2>Hold and unsupported ({len(rest)})</h2>")
        parts += [panel(report, rs, loc, open_=False) for rs in rest]
    return document(f"RL-Sentinel {word}: {line}", parts)


def _own(section):
    """A report kind with its own section under the verdict line."""
    def page(view) -> str:
        head = view.headline()
        code = view.exit_code()
        word = {0: "PASS", 1: "FAIL"}.get(code, "TARGET ERROR")
        tone = {0: "holds", 1: "violated"}.get(code, "error")
        return document(f"RL-Sentinel {head}", [_verdict_line(word, tone, head), section(view)])
    return page


_KIND = by_kind({"run": scenarios, "gate": scenarios, "compare": scenarios, "matrix": scenarios, "hunt": scenarios,
                 "history": _own(kinds.history), "mutate": _own(kinds.mutate), "bisect": _own(kinds.bisect)}, "html")


def render(view, **_: object) -> str:
    return _KIND(view)(view)


def page(report) -> str:
    """The page of a report (any kind)."""
    from ..model import build
    return render(build(report))


FORMAT = Format("html", "one self-contained HTML page", render, suffix=".html")
