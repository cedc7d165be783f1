"""The view layer (sentinel/views): every report kind renders in every format through
`sentinel report FILE`, a compare leads with its verdicts, a history shows its flips,
markdown with many violations opens with a summary table, and a format defined here is
registered and used by `sentinel report --format`."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from report_fakes import (bisect_log, compare_report, gate_report, history_report, hunt_report, matrix_report,
                          mutate_report, report, violated)
from sentinel import verdicts, views
from sentinel.cli import app
from sentinel.report import dump
from sentinel.views import palette

# each kind's file, and a string each format must show of it
KINDS = {
    "run": (lambda: report([violated(), violated("opsm-two")]), "opsm-two"),
    "gate": (gate_report, "opsm-masked"),
    "compare": (compare_report, "regressed"),
    "bisect": (bisect_log, "b" * 10),
    "matrix": (matrix_report, "slime@abc"),
    "hunt": (hunt_report, "opsm_mask.sequence_uniform"),
    "history": (history_report, "opsm-masked"),
    "mutate": (mutate_report, "drop-mask"),
}


def cli(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def write(tmp_path: Path, kind: str) -> Path:
    data = KINDS[kind][0]()
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(data) if isinstance(data, dict) else dump(data))
    return path


def test_the_fakes_cover_every_kind():
    assert set(KINDS) == set(views.KINDS)
    for kind in KINDS:
        data = KINDS[kind][0]()
        assert views.build(data).kind == kind


@pytest.mark.parametrize("fmt", ["text", "markdown", "junit", "json", "html"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_renders_in_every_format(tmp_path, kind, fmt):
    path = write(tmp_path, kind)
    out = tmp_path / f"out.{fmt}"
    r = cli("report", str(path), "--format", fmt, "-o", str(out))
    assert r.exit_code in (0, 1, 3), r.output
    text = out.read_text()
    assert KINDS[kind][1] in text, text[:2000]
    if fmt == "junit":
        assert ET.fromstring(text.encode()).iter("testcase")
    elif fmt == "json":
        assert json.loads(text)
    elif fmt == "html":
        assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    if fmt == "text":  # printed to the terminal too, not only to a file
        assert KINDS[kind][1] in cli("report", str(path)).stdout


def test_the_exit_code_is_the_kinds_own(tmp_path):
    codes = {kind: cli("report", str(write(tmp_path, kind)), "-f", "json", "-o", str(tmp_path / "x")).exit_code
             for kind in KINDS}
    assert codes == {"run": 1, "gate": 1, "compare": 1, "bisect": 0, "matrix": 1, "hunt": 1, "history": 0, "mutate": 1}
    path = tmp_path / "bisect-left.json"
    path.write_text(json.dumps(bisect_log(found=False)))
    assert cli("report", str(path)).exit_code == 3


def test_a_compare_leads_with_its_verdicts(tmp_path):
    text = cli("report", str(write(tmp_path, "compare"))).stdout
    first = text.strip().splitlines()[0]
    assert first.startswith("compare ") and "regressed kl-k2" in first and "fixed opsm-masked" in first
    # the compare verdicts come before any count of holds and violations, and close it too
    assert text.index("regressed") < text.index("RL-Sentinel ·") and "hold ·" not in text.split("RL-Sentinel ·")[0]
    assert "regressed kl-k2" in text.strip().splitlines()[-2] + text.strip().splitlines()[-1]
    md = cli("report", str(write(tmp_path, "compare")), "-f", "markdown").stdout
    assert md.startswith("## RL-Sentinel compare FAIL: `kl-k2` regressed")


def test_a_history_report_shows_its_flips(tmp_path):
    path = write(tmp_path, "history")
    text = cli("report", str(path)).stdout
    assert "PASS: " not in text and "hold" not in text.splitlines()[0]
    assert re.search(r"fixed │ opsm-masked +│ 3333333333", text), text  # the flips table
    assert "fix opsm (#42)" in text and "before" in text and "after" in text  # the evidence of the flip
    assert "not loading" in text  # the grey commit is in the legend
    md = cli("report", str(path), "-f", "markdown").stdout
    assert "| fixed | `opsm-masked` |" in md and "#42" in md
    html = cli("report", str(path), "-f", "html").stdout
    assert '<tr data-change="fixed">' in html and "✔ fixed here" in html and "2026-01-03" in html
    xml = cli("report", str(path), "-f", "junit").stdout
    assert "fixed at 3333333333" in xml


def _violations(n: int):
    return report([violated(f"opsm-{i}") for i in range(n)])


def test_markdown_with_more_than_five_violations_opens_with_a_summary_table():
    md = views.render(views.build(_violations(6)), "markdown")
    table = md.index("| scenario | boundary | family | first offending position |")
    first_section = md.index("<details><summary><code>opsm-0</code> violated")
    assert table < first_section
    rows = [line for line in md.splitlines() if line.startswith("| `opsm-")]
    assert len(rows) == 6 and rows[0] == "| `opsm-0` | opsm_mask | `equals` opsm_mask | `[0, 1]` |"
    assert "### `opsm-" not in md  # every scenario's details collapsed
    assert md.count("<details><summary><code>opsm-") == 6 and md.count("</details>") >= 6


def test_five_violations_keep_their_sections_open():
    md = views.render(views.build(_violations(5)), "markdown")
    assert "first offending position" not in md and md.count("### `opsm-") == 5


def test_a_format_defined_here_is_registered_and_used(tmp_path):
    def toy(view, **_: object) -> str:
        return f"TOY {view.kind} exit {view.exit_code()}\n"

    assert "toy" not in views.names()
    r = cli("report", str(write(tmp_path, "history")), "--format", "toy")
    assert r.exit_code == 2 and "unknown format 'toy'" in r.output
    views.register(views.Format("toy", "one line per report", toy))
    try:
        assert "toy" in views.names()
        for kind in KINDS:
            r = cli("report", str(write(tmp_path, kind)), "--format", "toy")
            assert r.stdout.startswith(f"TOY {kind} exit "), r.output
    finally:
        views.registry._registered.pop("toy")


def test_every_verdict_word_has_a_symbol_and_a_colour():
    """The palette never leaves a verdict to colour alone, nor falls back to the neutral tone."""
    words = set()
    for alias in (verdicts.InvariantVerdict, verdicts.ScenarioVerdict, verdicts.CompareVerdict):
        words |= set(alias.__args__)
    for w in words:
        t = palette.tone(w)
        assert t is not palette.NEUTRAL and t.symbol.strip() and t.colour.startswith("#"), w
        assert palette.label(w) == f"{t.symbol} {w}"
    # the good and the bad verdict differ in symbol, not only in colour
    assert palette.symbol("holds") != palette.symbol("violated") != palette.symbol("error")


def test_mutate_html_shows_survivors_first_with_their_diffs_as_code(tmp_path):
    html = cli("report", str(write(tmp_path, "mutate")), "-f", "html").stdout
    survivors, killed = html.index("Survivors (1)"), html.index("Killed (1)")
    assert survivors < killed and html.index("f#drop-mask@k1") < killed < html.index("f#sum-mean@k2")
    assert '<pre class="diff"><code><span class="del">-    x = a * mask</span>' in html
    assert '<span class="add">+    x = a</span>' in html and "hunt examples kl 100" in html
    assert "kl-k1" in html[killed:]  # what killed it


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "junit"])
def test_a_survivor_says_where_its_hunt_went_past_the_probe(tmp_path, fmt):
    out = cli("report", str(write(tmp_path, "mutate")), "-f", fmt).stdout
    assert "kl 100, gae 8" in out and "hunted past the probe on kl only" in out, out


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_mutate_says_which_equivalence_claims_it_read(tmp_path, fmt):
    """A run from a folder without equivalent.yaml scores with no claims: every view says so."""
    none = tmp_path / "none.json"
    none.write_text(dump(mutate_report()))
    assert "equivalence claims: none read" in cli("report", str(none), "-f", fmt).stdout
    rep = mutate_report()
    rep.mutate.equivalent_file, rep.mutate.equivalent_claims = "claims/equivalent.yaml", 7
    read = tmp_path / "read.json"
    read.write_text(dump(rep))
    shown = " ".join(cli("report", str(read), "-f", fmt).stdout.split())
    assert "equivalence claims: claims/equivalent.yaml (7 in the file, 0 honoured, 0 stale for this target)" in shown


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_mutate_says_the_floor_a_survivor_was_hunted_to(tmp_path, fmt):
    """--survivor-examples beside the budget; a report without one (before 1.5, or 0) shows the budget alone."""
    assert "a survivor's at least" not in cli("report", str(write(tmp_path, "mutate")), "-f", fmt).stdout
    rep = mutate_report()
    rep.mutate.survivor_examples = 100
    floor = tmp_path / "floor.json"
    floor.write_text(dump(rep))
    shown = html.unescape(" ".join(cli("report", str(floor), "-f", fmt).stdout.split()))
    assert "2 s per mutant the catalog leaves alive, a survivor's at least 100 examples on each boundary it hunts" in shown
