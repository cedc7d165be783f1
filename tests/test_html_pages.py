"""The HTML pages of a run, a compare, a hunt and a history report, loaded in headless Chromium
and read from the DOM (not the pixels): each chart's axis titles and legend entries, the
verdicts as symbol and word, the history's flips and skipped commits. A probe script added to
a copy of each page collects what the browser laid out (text and boxes) into the DOM, which
`chromium --dump-dom` hands back; tests skip where no Chromium is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_fakes import compare_report, history_report, holds, hunt_report, report, violated

from sentinel.report import HistoryCommit, dump

BROWSER = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
pytestmark = [pytest.mark.skipif(BROWSER is None, reason="no chromium, chromium-browser or google-chrome on PATH "
                                                         "(Debian: apt-get install chromium)"),
              pytest.mark.filterwarnings("ignore")]

# Runs after the page's own script; writes what the browser laid out into <pre id="dom-probe">.
PROBE = """<script>
(function () {
  function box(e) { var r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; }
  var out = {ok: document.body.dataset.ok || null, error: document.documentElement.dataset.error || null, charts: {},
             badges: [], notes: [], flips: [], commits: []};
  document.querySelectorAll('svg.chart').forEach(function (svg) {
    out.charts[svg.classList[1]] = {box: box(svg), texts: Array.from(svg.querySelectorAll('text')).map(function (t) {
      return Object.assign({text: t.textContent}, box(t)); })};
  });
  document.querySelectorAll('.badge').forEach(function (b) {
    out.badges.push({verdict: b.dataset.verdict, text: b.textContent, background: getComputedStyle(b).backgroundColor});
  });
  document.querySelectorAll('.note').forEach(function (n) { out.notes.push(n.textContent); });
  document.querySelectorAll('table.flips tr[data-change]').forEach(function (tr) {
    out.flips.push({change: tr.dataset.change, cells: Array.from(tr.cells).map(function (c) { return c.textContent; })});
  });
  document.querySelectorAll('table.commits tr[data-role]').forEach(function (tr) {
    out.commits.push({role: tr.dataset.role, cells: Array.from(tr.cells).map(function (c) { return c.textContent; })});
  });
  var pre = document.createElement('pre'); pre.id = 'dom-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def history_with_a_skipped_commit():
    rep = history_report()
    skipped = HistoryCommit(id="9" * 40, date="2026-01-02T12:00:00Z", subject="docs only", touches_loss_path=False,
                            role="skipped")
    rep.history.commits.insert(2, skipped)
    rep.history.cost.skipped_no_loss_path = 1
    # the flip at the newest commit, as a fix at the end of a range is: its label beside the legend
    flip = rep.history.flips[0]
    flip.commit, flip.date = rep.history.commits[-1].id, rep.history.commits[-1].date
    return rep


REPORTS = {
    "run": lambda: report([violated(), holds("kl-k1")], command=["sentinel", "run", "scenarios"]),
    "compare": compare_report,
    "hunt": lambda: hunt_report(progress=True),
    "history": history_with_a_skipped_commit,
}


@pytest.fixture(scope="module")
def dom(tmp_path_factory):
    """kind -> what the probe read from the page `sentinel report FILE -f html` wrote."""
    pytest.importorskip("matplotlib", reason="pip install 'rl-sentinel[plot]'")
    from typer.testing import CliRunner

    from sentinel.cli import app
    d = tmp_path_factory.mktemp("pages")
    out = {}
    for kind, make in REPORTS.items():
        (d / f"{kind}.json").write_text(dump(make()))
        r = CliRunner().invoke(app, ["report", str(d / f"{kind}.json"), "-f", "html", "-o", str(d / f"{kind}.html")])
        assert r.exit_code in (0, 1), r.output
        page = (d / f"{kind}.html").read_text(encoding="utf-8")
        probed = d / f"{kind}-probe.html"
        probed.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        p = subprocess.run([BROWSER, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={d / 'profile'}",
                            "--window-size=1280,2000", "--dump-dom", probed.as_uri()],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        found = re.search(r'<pre id="dom-probe">(.*?)</pre>', p.stdout, re.S)
        assert found, "the probe did not run: " + p.stdout[-2000:]
        import html
        out[kind] = json.loads(html.unescape(found.group(1)))
    return out


def texts(chart: dict) -> set[str]:
    return {t["text"] for t in chart["texts"]}


def overlapping(chart: dict, among: set[str]) -> list[tuple[str, str]]:
    """Pairs of laid-out labels (of `among`) whose boxes overlap by more than a third of the smaller."""
    boxes = [t for t in chart["texts"] if t["text"] in among and t["w"] > 0 and t["h"] > 0]
    bad = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            w = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            h = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if w > 0 and h > 0 and w * h > min(a["w"] * a["h"], b["w"] * b["h"]) / 3:
                bad.append((a["text"], b["text"]))
    return bad


@pytest.mark.parametrize("kind", list(REPORTS))
def test_each_page_loads_without_a_script_error(dom, kind):
    assert dom[kind]["ok"] == "1" and dom[kind]["error"] is None


@pytest.mark.parametrize("kind", list(REPORTS))
def test_every_badge_shows_its_symbol_and_word(dom, kind):
    """A verdict is never carried by its colour alone: each badge's text is a symbol and a word."""
    symbols = {"holds": "✔", "fixed": "✔", "holds-both": "✔", "violated": "✘", "regressed": "✘", "error": "!",
               "not-loaded": "░", "unsupported": "·"}
    assert dom[kind]["badges"]
    for b in dom[kind]["badges"]:
        if b["verdict"] in symbols:
            assert b["text"].startswith(symbols[b["verdict"]] + " ") and len(b["text"]) > 2, b


def test_the_compare_chart_has_axis_titles_a_legend_and_verdict_words(dom):
    chart = dom["compare"]["charts"]["compare-timeline"]
    words = texts(chart)
    assert "scenario" in words and any(w.startswith("revision (base → head)") for w in words)
    assert {"scenario verdict", "✔ holds", "✘ violated"} <= words  # the legend: its title and entries
    assert {"✘ regressed", "✔ fixed", "✔ holds-both"} <= words
    assert chart["box"]["w"] > 300 and chart["box"]["h"] > 100
    assert overlapping(chart, words) == []


def test_the_hunt_chart_shows_progress_over_time_per_property(dom):
    chart = dom["hunt"]["charts"]["hunt-progress"]
    words = texts(chart)
    assert {"examples (count)", "findings (count)", "hunt search time (s)"} <= words  # axis titles, with units
    assert {"property", "opsm_mask.sequence_uniform", "kl.finite", "✘ violated: first finding"} <= words  # legend
    assert overlapping(chart, words) == []


def test_the_history_page_marks_flips_and_shows_skipped_commits(dom):
    page = dom["history"]
    chart = page["charts"]["history-timeline"]
    words = texts(chart)
    assert "scenario" in words and any(w.startswith("commit (committer date") for w in words)  # axis titles
    assert {"2026-01-05", "5555555"} <= words  # a date and its commit on the axis
    assert "✔ fixed: fix opsm (#42)" in words  # the flip, marked where it was bisected to, with its subject
    assert {"✔ fixed here (flip)", "✘ regressed here (flip)", "skipped: no loss-path change"} <= words  # legend
    assert overlapping(chart, words) == []
    flip, = page["flips"]
    assert flip["change"] == "fixed" and flip["cells"][0] == "✔ fixed" and "fix opsm (#42)" in flip["cells"]
    skipped = [c for c in page["commits"] if c["role"] == "skipped"]
    assert len(skipped) == 1 and skipped[0]["cells"][2] == "skipped: no loss-path change" and "docs only" in skipped[0]["cells"]
    assert [c["cells"][0] for c in page["commits"]] == sorted(c["cells"][0] for c in page["commits"])  # oldest first


def test_a_run_page_without_charts_has_its_heatmap_and_verdicts(dom):
    run = dom["run"]
    assert run["charts"] == {} and run["notes"] == []
    assert {"✘ violated", "✔ holds"} <= {b["text"] for b in run["badges"]}


def test_the_overlap_check_sees_an_overlap():
    chart = {"texts": [{"text": "a", "x": 0, "y": 0, "w": 10, "h": 10}, {"text": "b", "x": 5, "y": 2, "w": 10, "h": 10},
                       {"text": "c", "x": 30, "y": 0, "w": 10, "h": 10}]}
    assert overlapping(chart, {"a", "b", "c"}) == [("a", "b")]
