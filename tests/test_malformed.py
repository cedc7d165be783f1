"""Hostile and careless input: scenario files, messages, report files.

tests/corpus/malformed/ holds scenario files that are each wrong in their own way (syntax,
keys, types, names, tensors, variants, `expected`). The first line of each says where and how
it must be refused: `# line N, says "WORDS": what is wrong` (and `# env NAME=VALUE` lines set
the environment). `sentinel run FILE` must exit 2, print `FILE:N:` with WORDS,
write no report and run nothing. The whole corpus goes through the CLI in process (Typer's
CliRunner on the same `run` command); a handful also through the real console script."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sentinel import REPORT_SCHEMA_VERSION
from sentinel.cli import app
from sentinel.report import (Environment, ExceptionInfo, Report, ReportError, ScenarioResult, Statistics, Target,
                             dump, load, write_atomic)

CORPUS = sorted((Path(__file__).resolve().parent / "corpus" / "malformed").glob("*.yaml"))
HEADER = re.compile(rb'^# line (\d+), says "(.*)": (.+)$')


def header(path: Path) -> tuple[int, str, str, dict[str, str]]:
    """(line, words, what is wrong, environment) from the file's first lines."""
    first, *rest = path.read_bytes().split(b"\n")
    m = HEADER.match(first)
    assert m, f"{path.name}: first line must be `# line N, says \"WORDS\": what is wrong`"
    env = dict(re.match(rb"^# env (\w+)=(.*)$", x).groups() for x in rest if x.startswith(b"# env "))
    return int(m[1]), m[2].decode(), m[3].decode(), {k.decode(): v.decode() for k, v in env.items()}


def test_the_corpus_holds_sixty_distinct_ways_to_be_wrong():
    assert len(CORPUS) >= 60
    whats = [header(p)[2] for p in CORPUS]
    assert len(set(whats)) == len(whats), "two files describe the same mistake"
    assert len({p.read_bytes().split(b"\n", 1)[1] for p in CORPUS}) == len(CORPUS), "two files are the same"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_a_malformed_file_exits_2_naming_file_and_line(path, tmp_path, monkeypatch):
    line, words, _, env = header(path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)  # an escaped `touch pwned` or a default report would land here
    r = CliRunner().invoke(app, ["run", str(path), "-o", "report.json"])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    assert f"{path}:{line}: " in r.stderr, r.stderr
    assert words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["13-alias-bomb", "11-deep-flow-nesting", "07-not-utf8", "23-markup-key",
                                  "83-expected-escape"])
def test_through_the_console_script(name, tmp_path):
    (path,) = [p for p in CORPUS if p.stem == name]
    line, words, _, _ = header(path)
    p = subprocess.run([sys.executable, "-m", "sentinel", "run", str(path)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"{path}:{line}: " in p.stderr and words in p.stderr, p.stderr
    assert list(tmp_path.iterdir()) == []


# --- memory limits bite before the memory is spent ------------------------------------------

KL_HEAD = """\
id: kl-k1
title: k1
boundary: kl
config: {kl_type: CONFIG}
inputs:
  log_probs:     LOG_PROBS
  ref_log_probs: REF
  loss_mask:     MASK
invariants:
  - close: {output: kl, expected: "EXPECTED"}
"""


def kl_file(config="k1", log_probs="[[-0.5, -1.0, -0.2]]", ref="[[-0.6, -0.8, -0.4]]", mask="[[1, 1, 0]]",
            expected="log_probs - ref_log_probs") -> str:
    return (KL_HEAD.replace("CONFIG", config).replace("LOG_PROBS", log_probs).replace("REF", ref)
            .replace("MASK", mask).replace("EXPECTED", expected))


WIDE = 8_000  # three [1, 8000] tensors: an outer product of two of them is 6.4 * 10**7 values (512 MB)
MEMORY_CASES = {  # name: (file text, words of the refusal, its line)
    "a 20 MB file of 10**7 values": (lambda: kl_file(log_probs="[[" + "0," * 10**7 + "0]]"), "bytes", 1),
    "10**6 numbers in a config value": (lambda: kl_file(config="[" + "1, " * 10**6 + "1]"), "more than 100000", 4),
    "zeros_like with a computed huge shape": (
        lambda: kl_file(expected="zeros_like(log_probs, None, None, True, (3, 10**5, 10**5))"), "positional", 10),
    "zeros_like of a broadcast huge shape": (
        lambda: kl_file(log_probs=f"[[{'0.5, ' * WIDE}0.5]]", ref=f"[[{'0.25, ' * WIDE}0.25]]",
                        mask=f"[[{'1, ' * WIDE}1]]",
                        expected="zeros_like(log_probs.reshape(-1)[:, None].clip(ref_log_probs.reshape(-1)))"),
        "limit is 1000000", 10),
}
MEASURE = """\
import json, re, sys, time
from pathlib import Path
from sentinel.spec import SpecError, load_file

def status(key):  # kB
    return int(re.search(key + r":\\s+(\\d+)", Path("/proc/self/status").read_text())[1])

Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
before = status("VmRSS")
t0 = time.process_time()
try:
    load_file(sys.argv[1])
    refused = None
except SpecError as e:
    refused = str(e)
cpu = time.process_time() - t0
print(json.dumps({"refused": refused, "cpu_s": cpu, "rss_mb": (status("VmHWM") - before) / 1024}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures peak memory with Linux's clear_refs")
@pytest.mark.parametrize("name", MEMORY_CASES)
def test_a_memory_bomb_is_refused_before_the_memory_is_spent(name, tmp_path):
    """Refused with file and line, its peak memory (a fresh interpreter's peak resident set,
    reset after the imports: Linux's clear_refs) under 200 MB; the CPU seconds are printed,
    never asserted."""
    text, words, line = MEMORY_CASES[name]
    path = tmp_path / "bomb.yaml"
    path.write_text(text(), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    print(f"{name} ({path.stat().st_size / 1e6:.1f} MB file): refused in {got['cpu_s']:.2f} s of CPU, "
          f"peak RSS +{got['rss_mb']:.1f} MB")
    assert got["refused"] is not None and f"{path}:{line}: " in got["refused"] and words in got["refused"], got
    assert got["rss_mb"] < 200, got


# --- messages are text, never Rich markup --------------------------------------------------

MARKUP = "[/bogus] '^[a-z0-9]*$' [bold]x[/bold]"


def test_usage_errors_print_user_text_intact(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("id: x\n")
    r = CliRunner().invoke(app, ["run", "s.yaml", "--target", MARKUP])
    assert r.exit_code == 2 and MARKUP in r.stderr, r.stderr


def test_a_report_full_of_markup_renders_intact(tmp_path):
    rep = Report(success=False, created_at="now", duration_s=0.5, environment=Environment(),
                 targets={MARKUP: Target(name=MARKUP, load_error=ExceptionInfo(type="E", message=MARKUP))},
                 results=[ScenarioResult(id=MARKUP, title=MARKUP, boundary=MARKUP, file=MARKUP, target=MARKUP,
                                         verdict="error", reason=MARKUP,
                                         exception_info=ExceptionInfo(type="E", message=MARKUP))],
                 statistics=Statistics(evaluated=1, errors=1))
    write_atomic(tmp_path / "r.json", dump(rep))
    for fmt in ("text", "markdown", "junit"):
        r = CliRunner().invoke(app, ["report", str(tmp_path / "r.json"), "--format", fmt, "-v"])
        assert r.exit_code == 3, r.output  # rendered, then the report's own exit code (an error)
        assert "'^[a-z0-9]*$'" in r.stdout, r.stdout
    assert MARKUP in CliRunner().invoke(app, ["report", str(tmp_path / "r.json")]).stdout


# --- sentinel report: strict, and says what is wrong and where ------------------------------

def good_report() -> str:
    return dump(Report(success=True, created_at="now", duration_s=0.5, environment=Environment(), targets={},
                       results=[], statistics=Statistics()))


def test_a_report_of_the_previous_schema_still_reads(tmp_path):
    """1.1 only added fields (hunt progress): a 1.0 file reads, their defaults fill in."""
    text = good_report().replace(f'"schema_version": "{REPORT_SCHEMA_VERSION}"', '"schema_version": "1.0"')
    assert '"1.0"' in text
    (tmp_path / "r.json").write_text(text, encoding="utf-8")
    assert load(tmp_path / "r.json").schema_version == "1.0"


@pytest.mark.parametrize("mutate, words", [
    (lambda t: t[: len(t) // 2], "truncated at byte"),
    (lambda t: t[:-3], "truncated at byte"),
    (lambda t: t.replace('"success": true', '"success": "yes"'), 'field success: expected bool, got "yes"'),
    (lambda t: t.replace('"success": true', '"success": 1'), "field success: expected bool, got 1"),
    (lambda t: t.replace('"duration_s": 0.5', '"duration_s": "0.5"'), "field duration_s: expected number"),
    (lambda t: t.replace('"kind": "run"', '"kind": "walk"'), "field kind: Input should be"),
    (lambda t: t.replace('"results": []', '"results": [], "extra_field": 1'), "field extra_field: unknown field"),
    (lambda t: t.replace('"success": true,', ""), "field success: missing"),
    (lambda t: t.replace('"success": true', '"success" true'), "invalid JSON at byte"),
    (lambda t: "", "an empty file"),
    (lambda t: "[]", "field (top level): expected object"),
    (lambda t: t.replace(f'"schema_version": "{REPORT_SCHEMA_VERSION}"', '"schema_version": "9.9"'), "field schema_version: '9.9'"),
    (lambda t: t.replace(f'"schema_version": "{REPORT_SCHEMA_VERSION}"', '"schema_version": 1.0'), "field schema_version: 1.0"),
    (lambda t: t.replace(f'"schema_version": "{REPORT_SCHEMA_VERSION}",', ''), "field schema_version: missing"),
])
def test_a_bad_report_exits_2_saying_what_and_where(tmp_path, mutate, words):
    text = mutate(good_report())
    (tmp_path / "r.json").write_text(text, encoding="utf-8")
    with pytest.raises(ReportError, match=re.escape(words)):
        load(tmp_path / "r.json")
    r = CliRunner().invoke(app, ["report", str(tmp_path / "r.json")])
    assert r.exit_code == 2 and words in " ".join(r.stderr.split()), r.stderr
    if words == "truncated at byte":
        assert f"truncated at byte {len(text.encode())}" in r.stderr


def test_a_good_report_loads_strictly(tmp_path):
    (tmp_path / "r.json").write_text(good_report(), encoding="utf-8")
    assert load(tmp_path / "r.json").success is True
    assert json.loads(good_report())["success"] is True
