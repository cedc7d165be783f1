"""`sentinel report FILE --format html`: one self-contained page, checked as text and in a real
headless browser (Chromium: `apt-get install chromium`; the browser tests skip without it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_fakes import checkout, compare_report, hunt_report, report, violated

from sentinel.catalog import catalog_path
from render_helpers import page
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
    done = subprocess.run([str(SENTINEL), "report", str(d / "plant.json"), "--format", "html", "-o", str(out)], cwd=d,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr  # written, and the report's own exit code (a violation)
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


def test_compare_timeline():
    text = page(compare_report())
    svg = re.search(r'<svg class="timeline".*?</svg>', text, re.S).group()
    assert svg.index("kl-k2") < svg.index("opsm-masked") < svg.index("kl-k1")  # regressed first
    assert "regressed" in svg and "fixed" in svg and "holds-both" in svg
    assert text.index("<h2>Compare") < text.index("<h2>Violations")


def test_hunt_progress_marks_the_first_finding():
    text = page(hunt_report())
    svg = re.search(r'<svg class="hunt-progress".*?</svg>', text, re.S).group()
    assert svg.count("<polyline") == 2
    assert '<circle class="finding"' in svg and "first finding: opsm_mask.sequence_uniform after 18 examples" in svg
