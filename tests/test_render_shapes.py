"""A valid scenario never crashes a renderer: every form of `expected` the loader accepts
(a scalar, one value per row, a [T] row, [B, 1], [1, T], the full [B, T], an expression of
any shape, with and without `where:`) renders in every format: the terminal, markdown, JUnit
and HTML, from the report in memory and from the report read back from its JSON.

The property test loads each drawn scenario with the real loader, evaluates it with the
runner's own `evaluate` on a drawn worker answer (observed values with NaN and infinities),
and renders the report; the CLI test runs the issue's per-row case on a planted bug.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from report_fakes import report
from rich.console import Console

from render_helpers import page
from render_helpers import console_report, junit, markdown, report_command
from sentinel.report import Report, dump, load
from sentinel.runner import evaluate, plan
from sentinel.spec import load_text
from sentinel.tensors import encode

SENTINEL = Path(sys.executable).with_name("sentinel")

PER_ROW = """
id: per-row-expected
title: the mask is 0 on every valid token of a rejected sequence, row by row
boundary: opsm_mask
config: {opsm_delta: 0.1, eps_clip: 0.2, eps_clip_high: 0.2}
inputs:
  log_probs:     [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
  old_log_probs: [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
  advantages:    [[-0.5, 0.25, -0.25], [-0.5, 0.25, -0.25]]
  loss_mask:     [[1, 1, 1], [1, 1, 0]]
invariants:
  - equals: {output: opsm_mask, expected: [[0.0], [0.0]], where: loss_mask}
"""


def render_all(rep: Report, tmp: Path) -> None:
    """Every format, from the report and from its JSON read back (non-finite values as strings)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "r.json").write_text(dump(rep))
    for r in (rep, load(tmp / "r.json")):
        buf = io.StringIO()
        console_report(r, Console(file=buf, width=100, force_terminal=True), verbose=True)
        assert r.results[0].id in buf.getvalue()
        assert markdown(r).startswith("## RL-Sentinel ")
        ET.fromstring(junit(r).split("\n", 1)[1])  # well-formed XML
        assert page(r).startswith("<!DOCTYPE html>")


def test_a_per_row_expected_value_renders_and_keeps_its_violation(tmp_path):
    """The issue's case: run, gate and report exit 1 (a violation), not 3 (a renderer crash)."""
    sc = tmp_path / "per-row.yaml"
    sc.write_text(PER_ROW)
    out = tmp_path / "r.json"
    run = subprocess.run([str(SENTINEL), "run", str(sc), "--plant", "opsm-token-level", "-o", str(out),
                          "--junit", str(tmp_path / "r.xml")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "≠0" in run.stdout and "Traceback" not in run.stderr  # the expected value broadcast under each offending cell
    gate = subprocess.run([str(SENTINEL), "gate", "--path", str(sc), "--plant", "opsm-token-level", "-o", "-"],
                          capture_output=True, text=True, timeout=300)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    shown = {fmt: report_command(out, "-f", fmt) for fmt in ("text", "markdown", "junit", "html")}
    for fmt, done in shown.items():
        assert done.exit_code == 1 and "Traceback" not in done.stderr, (fmt, done.stderr)
    md = shown["markdown"].stdout
    assert "| 0 | 0 | **1** ≠ 0 | 0 |" in md and "| 1 | 0 | **1** ≠ 0 | · |" in md


# --- the property -------------------------------------------------------------------------

# masked_reduce has a token output (whitened), a row output (row_result) and a scalar (result);
# `input:values` is the input after the call, of the input's shape
OBSERVABLES = {"whitened": "token", "row_result": "row", "result": "scalar", "input:values": "token"}
# expressions of every shape: [B, T], [B], [T], [], [B, 1], [1, T]
EXPRESSIONS = ["values", "values.sum(1)", "values.sum(0)", "values.sum()", "values[:, :1]", "values[:1]",
               "loss_mask.mean(1, keepdims=True)", "np.where(loss_mask > 0, values, 0)", "values * 0 + 1.5"]
VALUES = st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, 1.0]))


def _shape(kind: str, b: int, t: int) -> tuple[int, ...]:
    return {"token": (b, t), "row": (b,), "scalar": ()}[kind]


@st.composite
def cases(draw):
    b, t = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    observable = draw(st.sampled_from(sorted(OBSERVABLES)))
    want = _shape(OBSERVABLES[observable], b, t)
    if draw(st.booleans()):  # a literal whose shape broadcasts to the observable's (the loader's rule)
        n = draw(st.integers(0, len(want)))
        shape = tuple(draw(st.sampled_from([1, d])) for d in want[len(want) - n:])
        expected = np.asarray(draw(st.lists(st.floats(-4, 4, width=16), min_size=int(np.prod(shape)),
                                            max_size=int(np.prod(shape))))).reshape(shape).tolist()
    else:
        expected = draw(st.sampled_from(EXPRESSIONS))
    body = {"output": observable, "expected": expected}
    if draw(st.booleans()):
        body["where"] = "loss_mask"
    family = draw(st.sampled_from(["close", "equals"]))
    values = draw(st.lists(st.lists(st.floats(-2, 2, width=16), min_size=t, max_size=t), min_size=b, max_size=b))
    mask = draw(st.lists(st.lists(st.sampled_from([0, 1]), min_size=t, max_size=t), min_size=b, max_size=b))
    doc = {"id": "drawn", "title": "a drawn expected value", "boundary": "masked_reduce", "config": {"dim": "row"},
           "inputs": {"values": values, "loss_mask": mask}, "invariants": [{family: body}]}
    outputs = {name: np.asarray(draw(st.lists(VALUES, min_size=int(np.prod(s)), max_size=int(np.prod(s))))).reshape(s)
               for name, s in (("whitened", (b, t)), ("row_result", (b,)), ("result", ()))}
    after = np.asarray(draw(st.lists(VALUES, min_size=b * t, max_size=b * t))).reshape(b, t)
    return doc, outputs, after


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_accepted_expected_renders_in_every_format(tmp_path_factory, case):
    doc, outputs, after = case
    sc, = load_text(json.dumps(doc), "drawn.yaml")  # the loader accepts it (JSON is YAML)
    runs = plan(sc)
    answer = {"status": "ok", "duration_s": 0.0, "runs": {r.name: {
        "outputs": {n: encode(a.astype(np.float32)) for n, a in outputs.items()}, "requires_grad": {}, "grads": {},
        "inputs_after": {"values": encode(after.astype(np.float32))}} for r in runs}}
    result = evaluate(sc, runs, answer, "reference")
    render_all(report([result], kind="run"), tmp_path_factory.mktemp("drawn"))
