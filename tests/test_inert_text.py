"""Text from a scenario is inert everywhere (sentinel/inert.py): an id, a title, provenance, a
message or an exception carrying ANSI escapes, control characters, raw HTML or markdown links
and images renders as text in the terminal, markdown, JUnit and HTML, never as what it says.

The markdown is rendered to HTML by a real CommonMark parser (markdown-it, raw HTML allowed as
GitHub allows it): no `<img>`, no `javascript:` link and no image may come out of it."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from markdown_it import MarkdownIt
from report_fakes import compare_report, errored, report, violated
from rich.console import Console

from sentinel import inert
from sentinel.catalog import catalog_path
from render_helpers import page
from render_helpers import console_report, junit, markdown, report_command
from sentinel.report import Comparison, Target

SENTINEL = Path(sys.executable).with_name("sentinel")
CONTROL = ["\x1b[31m", "\x1b", "\x07", "\r", "\b", "\u202e"]
HTML = "<img src=x onerror=alert(1)>"
LINK = "[x](javascript:alert(1))"
IMAGE = "![x](http://evil/p.png)"
HOSTILE = "".join(CONTROL) + f"red {HTML} {LINK} {IMAGE} `code` | cell"


def hostile_report():
    """Every field a renderer shows from a scenario, a target or the report file, hostile."""
    v = violated(HOSTILE, target=HOSTILE, title=HOSTILE, file=f"scenarios/{HOSTILE}.yaml")
    v.provenance, v.reason = [HOSTILE, "javascript:alert(1)"], HOSTILE
    v.invariants[0].message = HOSTILE
    e = errored("raises" + HOSTILE, HOSTILE, target=HOSTILE)
    unsupported = violated("skipped" + HOSTILE, target=HOSTILE).model_copy(update={"verdict": "unsupported",
                                                                                "reason": HOSTILE, "invariants": []})
    return report([v, e, unsupported], {HOSTILE: Target(name=HOSTILE, subject=HOSTILE, commit="a" * 40)},
                  command=["sentinel", "run", HOSTILE])


def assert_inert_markdown(md: str) -> None:
    """What the markdown renders to has no image, no raw HTML element and no link but ours;
    no control character is in its source; prose (a title) carries the escaped forms. (Inside
    a code span or fence the raw forms stay: a code span shows them as text.)"""
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "<img" not in rendered, rendered  # neither raw HTML passed through nor a markdown image
    assert all(h.startswith("https://github.com/") for h in re.findall(r'href="([^"]*)"', rendered)), rendered
    assert not any(raw in md for raw in CONTROL)
    for line in md.splitlines():
        if line.startswith("### "):  # `id` verdict: title
            title = line.split(": ", 1)[1]
            assert not any(raw in title for raw in (HTML, LINK, IMAGE)), title
            if "onerror" in title:
                assert "&lt;img src=x onerror=alert(1)&gt;" in title and "!\\[x\\](http://evil/p.png)" in title


def test_every_format_shows_hostile_text_as_text():
    rep = hostile_report()
    buf = io.StringIO()
    console_report(rep, Console(file=buf, width=200, color_system=None), verbose=True)
    text = buf.getvalue()
    assert "red" in text and "\\x1b[31m" in text  # shown, as its escape
    for raw in CONTROL:
        assert raw not in text, repr(raw)

    assert_inert_markdown(markdown(rep))
    assert "\\x1b\\[31m" in markdown(rep)  # the escape, its bracket escaped too

    doc = page(rep)
    for raw in (HTML, "\x1b", "\x07", "\r", "\b", "\u202e"):
        assert raw not in doc, repr(raw)
    assert 'href="javascript' not in doc and "&lt;img src=x onerror=alert(1)&gt;" in doc

    xml = junit(rep)
    ET.fromstring(xml.split("\n", 1)[1])  # well-formed: XML 1.0 has no ESC or BEL
    for raw in CONTROL:
        assert raw not in xml, repr(raw)


def test_a_compare_report_with_hostile_ids_is_inert():
    rep = compare_report()
    rep.comparisons.append(Comparison(id=HOSTILE, verdict="regressed", base="holds", head="violated"))
    rep.results.append(violated(HOSTILE, target="head"))
    assert_inert_markdown(markdown(rep))
    buf = io.StringIO()
    console_report(rep, Console(file=buf, width=200, color_system=None))
    assert not any(raw in buf.getvalue() for raw in CONTROL)
    assert HTML not in page(rep)


@pytest.mark.parametrize("text", ["a`b", "``x``", "`", "a|b", "x\ny"])
def test_a_code_span_holds_its_text_whatever_backticks_it_carries(text):
    rendered = MarkdownIt("commonmark").render(inert.md_code(text))
    assert rendered.count("<code>") == 1 and "\n" not in rendered.split("<code>")[1].split("</code>")[0]


def test_a_fence_is_longer_than_any_run_of_backticks_inside():
    fence = inert.md_fence("```\n<img src=x>\n````")
    assert fence[0] == fence[-1] == "`````"
    rendered = MarkdownIt("commonmark", {"html": True}).render("\n".join(fence))
    assert "<img" not in rendered and rendered.count("<pre>") == 1


def test_a_link_is_only_to_http_and_cannot_be_broken_out_of():
    assert inert.md_link("x", "javascript:alert(1)") == "x"
    link = inert.md_link("x", "https://github.com/a/b/blob/c/a b).py#L1")
    rendered = MarkdownIt("commonmark").render(link)
    assert 'href="https://github.com/a/b/blob/c/a%20b%29.py#L1"' in rendered


def test_the_cli_shows_a_hostile_title_as_text(tmp_path):
    """A scenario file whose title and provenance carry the hostile forms (YAML escapes), run on
    a planted bug so its panel is shown, then rendered by `sentinel report` in every format."""
    seed = (catalog_path() / "seeds" / "opsm-mixed-advantage.yaml").read_text()
    title = r'"\e[31mred\a\r\b\u202e <img src=x onerror=alert(1)> [x](javascript:alert(1)) ![x](http://evil/p.png)"'
    sc = tmp_path / "hostile.yaml"
    sc.write_text(seed.replace("title: OPSM", f"title: {title} # OPSM")
                  .replace("provenance: [https://github.com/THUDM/slime/pull/1917]", f"provenance: [{title}]"))
    out = tmp_path / "r.json"
    run = subprocess.run([str(SENTINEL), "run", str(sc), "--plant", "opsm-token-level", "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "\\x1b[31mred" in run.stdout
    for raw in CONTROL:
        assert raw not in run.stdout + run.stderr, repr(raw)
    for fmt in ("markdown", "html", "junit"):
        done = report_command(out, "-f", fmt)
        assert done.exit_code == 1, done.stderr
        for raw in (HTML, *CONTROL):  # markdown's link syntax means nothing to HTML or XML
            assert raw not in done.stdout, (fmt, raw)
        assert 'href="javascript' not in done.stdout
        if fmt == "markdown":
            assert_inert_markdown(done.stdout)
        if fmt == "junit":
            ET.fromstring(done.stdout.split("\n", 1)[1])


def test_chart_labels_from_a_report_are_text_in_the_svg():
    """Commit subjects, scenario ids and property names become chart labels: matplotlib gets
    them as plain text (no mathtext: `$` is a dollar), its SVG escapes them."""
    pytest.importorskip("matplotlib", reason="pip install 'rl-sentinel[plot]'")
    from report_fakes import history_report, hunt_report
    hist = history_report()
    hist.history.flips[0].subject = HOSTILE + " $x^2$"
    hunt = hunt_report(progress=True)
    hunt.hunt.properties[0].property = HOSTILE + " $\\alpha$"
    for doc in (page(hist), page(hunt)):
        assert "<svg" in doc and HTML not in doc and "&lt;img src=x onerror=alert(1)&gt;" in doc
        assert not any(raw in doc for raw in ("\x1b", "\x07", "\b", "\u202e"))
    assert "$x^2$" in page(hist) and "$\\alpha$" in page(hunt)
