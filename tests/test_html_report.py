"""`sentinel report FILE --format html`: one self-contained page, checked as text and in a real
headless browser (Chromium: `apt-get install chromium`; the browser tests skip without it)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_fakes import checkout, compare_report, hunt_report, report, violated

from sentinel.catalog import catalog_path
from render_helpers import page, report_command
from sentinel.report import FunctionInfo, Target

REPO = Path(__file__).resolve().parents[1]
SENTINEL = Path(sys.executable).with_name("sentinel")
SEED = catalog_path() / "seeds" / "opsm-mixed-advantage.yaml"
BROWSER = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no chromium, chromium-browser or google-chrome on PATH "
                                                           "(Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def plant_page(tmp_path_factory) -> Path:
    """The OPSM plant run rendered by the CLI: `sentinel run SEED --plant ...`, then `report --format html`."""
    d = tmp_path_factory.mktemp("html")
    run = subprocess.run([str(SENTINEL), "run", str(SEED), "--plant", "opsm-token-level", "-o", str(d / "plant.json")],
                         cwd=d, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    out = d / "report.html"
    done = report_command(d / "plant.json", "--format", "html", "-o", str(out))
    assert done.exit_code == 1, done.stderr  # written, and the report's own exit code (a violation)
    return out


def browser(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp / 'profile'}",
                           *args], capture_output=True, text=True, timeout=120)


def test_the_plant_page_is_self_contained_with_the_heatmap(plant_page):
    text = plant_page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # nothing is fetched: no external script, stylesheet, image or font
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc=|<link\b|@import|url\(", text)
    assert '<table class="heatmap" data-output="opsm_mask" data-which="observed">' in text
    assert '<table class="heatmap" data-output="opsm_mask" data-which="expected">' in text
    assert re.search(r'<td class="bad"[^>]*data-o="row 0, token 1: observed 1.0, expected 0.0">1</td>', text)
    assert "<h2>Violations and errors (1)</h2>" in text
    assert str(REPO) not in text and str(plant_page.parent) not in text


@needs_browser
def test_the_plant_page_loads_in_chromium_without_errors(plant_page, tmp_path):
    dom = browser("--dump-dom", plant_page.as_uri(), tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout).group()
    assert 'data-ok="1"' in body, "the page's script did not run to its end"
    assert "data-error" not in dom.stdout.split("<body")[0], "window.onerror caught a script error"
    assert 'class="heatmap" data-output="opsm_mask"' in dom.stdout
    assert 'title="row 0, token 1: observed 1.0, expected 0.0"' in dom.stdout  # set by the page's script


@needs_browser
def test_a_screenshot_shows_the_page(plant_page, tmp_path):
    shot = tmp_path / "shot.png"
    p = browser(f"--screenshot={shot}", "--window-size=1200,900", plant_page.as_uri(), tmp=tmp_path)
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank 1200x900 page is ~5 KB


def test_masked_cells_are_greyed_and_offending_cells_outlined():
    text = page(report([violated()]))
    observed = re.search(r'<table class="heatmap" data-output="opsm_mask" data-which="observed">.*?</table>', text).group()
    cells = re.findall(r'<td class="([^"]*)"[^>]*data-o="(row \d, token \d[^"]*)"', observed)
    classes = {info.split(":")[0]: cls for cls, info in cells}
    assert classes["row 0, token 2"] == "masked"
    assert classes["row 0, token 1"] == "bad" and classes["row 1, token 1"] == "bad"
    assert classes["row 1, token 2"] == ""
    assert "(masked: loss_mask 0)" in text


def test_every_string_is_escaped_and_no_local_path_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repo, sha = checkout(tmp_path)
    fn = FunctionInfo(module="slime.utils.ppo_utils", qualname="compute_opsm_mask", file="slime/utils/ppo_utils.py", line=1)
    bad = violated(title="<script>alert(1)</script>", file=str(repo / "scenarios" / "x.yaml"), function=fn)
    text = page(report([bad], {"slime": Target(name="slime", repo=str(repo), commit=sha)},
                       command=["sentinel", "run", "--repo", str(repo)]))
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert str(tmp_path) not in text
    assert f'href="https://github.com/THUDM/slime/blob/{sha}/slime/utils/ppo_utils.py#L1"' in text


def chart_texts(text: str, name: str) -> list[str]:
    """The text elements of the chart `name` (matplotlib's SVG keeps its text as <text>)."""
    svg = re.search(rf'<svg class="chart {name}".*?</svg>', text, re.S).group()
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


def test_compare_timeline():
    pytest.importorskip("matplotlib", reason="pip install 'rl-sentinel[plot]'")
    text = page(compare_report())
    words = chart_texts(text, "compare-timeline")
    assert words.index("kl-k2") < words.index("opsm-masked") < words.index("kl-k1")  # regressed first, at the top
    assert {"✘ regressed", "✔ fixed", "✔ holds-both"} <= set(words)  # symbol and word, not colour alone
    assert "scenario" in words and any(w.startswith("revision (base → head)") for w in words)  # axis titles
    assert {"✔ holds", "✘ violated"} <= set(words)  # the legend
    assert text.index("<h2>Compare") < text.index("<h2>Violations")


def test_hunt_progress_over_time():
    pytest.importorskip("matplotlib", reason="pip install 'rl-sentinel[plot]'")
    text = page(hunt_report(progress=True))
    words = chart_texts(text, "hunt-progress")
    assert {"examples (count)", "findings (count)", "hunt search time (s)"} <= set(words)  # axis titles with units
    assert {"opsm_mask.sequence_uniform", "kl.finite", "✘ violated: first finding"} <= set(words)  # one line each
    svg = re.search(r'<svg class="chart hunt-progress".*?</svg>', text, re.S).group()
    # each property's line goes through its recorded samples (not a straight line from the origin)
    assert len(re.findall(r'<g id="hunt-progress-line2d_\d+">', svg)) >= 4


def test_a_hunt_report_without_progress_says_so_instead_of_drawing():
    text = page(hunt_report())
    assert '<svg class="chart hunt-progress"' not in text
    assert "No progress over time in this report" in text and "<td>300</td>" in text  # the table still has the numbers


def test_without_matplotlib_the_page_has_a_note_where_the_chart_would_be():
    """matplotlib is an extra: in a process where it cannot be imported, every kind still renders."""
    script = """
import sys
sys.modules["matplotlib"] = None  # import matplotlib raises ImportError, as where it is not installed
sys.path.insert(0, "tests")
from report_fakes import compare_report, history_report, hunt_report
from render_helpers import page, report_command
for make in (compare_report, history_report, lambda: hunt_report(progress=True)):
    print(page(make()))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "<svg" not in done.stdout and done.stdout.count("Chart not drawn: matplotlib is not installed") == 3
    assert '<tr data-compare="regressed">' in done.stdout and '<tr data-change="fixed">' in done.stdout  # the tables
