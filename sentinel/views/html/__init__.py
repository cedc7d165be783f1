"""The HTML format: one self-contained page (`sentinel report FILE --format html -o r.html`).

The page is rendered from jinja2 templates (templates/, package data) with autoescape on:
every value from a report is escaped where it is printed, and its control characters are
shown as escapes first (`_printed`, inert.plain). The only markup not escaped is what this
package makes: the charts' SVG (views/charts.py, matplotlib) and the macros' own tags.

No network: style, script and charts are inline, nothing is fetched. Scenario results (run,
gate, compare, matrix, hunt) have the verdict and the target, the compare chart, the hunt's
progress chart, the matrix, and a panel per scenario, violations and errors first, with
per-token heatmaps; holds and unsupported scenarios collapsed (html/scenarios.py). A history,
a mutate report and a bisect log have their own pages (html/kinds.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup

from ... import inert
from ..locations import Locations
from ..registry import Format, by_kind
from ..palette import TONES, colour, label, symbol
from . import kinds, scenarios


def _printed(value: Any) -> Any:
    """Every value a template prints: a string with its control characters as escapes (then
    autoescaped); markup this package made passes as it is."""
    return value if isinstance(value, Markup) or not isinstance(value, str) else inert.plain(value)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("sentinel.views.html", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, finalize=_printed, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(colour=colour, label=label, symbol=symbol, heat=scenarios.HEAT, heatmaps=scenarios.heatmaps,
                       is_verdict=TONES.__contains__)
    return env


def _page(template: str, context: dict[str, Any]) -> str:
    return environment().get_template(template).render(**context)


def _scenarios(view) -> str:
    return _page("scenarios.html.j2", scenarios.context(view))


def _own(template: str, section):
    """A report kind with its own page under the verdict line."""
    def page(view) -> str:
        head = view.headline()
        code = view.exit_code()
        report = view.report  # None for a bisect log
        return _page(template, {"title": f"RL-Sentinel {head}", "word": {0: "PASS", 1: "FAIL"}.get(code, "TARGET ERROR"),
                                "tone": {0: "holds", 1: "violated"}.get(code, "error"), "line": head,
                                "reproduce": Locations(report).reproduce(report.command) if report else "",
                                **section(view)})
    return page


_KIND = by_kind({"run": _scenarios, "gate": _scenarios, "compare": _scenarios, "matrix": _scenarios, "hunt": _scenarios,
                 "history": _own("history.html.j2", kinds.history), "mutate": _own("mutate.html.j2", kinds.mutate),
                 "bisect": _own("bisect.html.j2", kinds.bisect)}, "html")


def render(view, **_: object) -> str:
    return _KIND(view)(view)


def page(report) -> str:
    """The page of a report (any kind)."""
    from ..model import build
    return render(build(report))


FORMAT = Format("html", "one self-contained HTML page", render, suffix=".html")
