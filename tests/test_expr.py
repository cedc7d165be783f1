"""The `expected` expression language (sentinel.expr): a scenario file never executes code.

Every escape is refused when the scenario loads (a SpecError naming file, line and the
offending node; `sentinel run` exits 2) and never reaches a run; the forms people write
evaluate to the right numbers; sizes, exponents and time are bounded at run time too."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sentinel import expr
from sentinel.catalog import catalog_path
from sentinel.invariants.base import Missing, RunObservation, evaluate_expected
from sentinel.spec import SpecError, load_paths, load_text

PWN = "sum.__wrapped__.__globals__['__builtins__']['__import__']('os').system('touch pwned') + 2.5"

ESCAPES = [
    PWN,
    "10**10**10",
    "log_probs.__class__",
    "log_probs.__class__.__mro__[-1].__subclasses__()",
    "().__class__.__bases__[0].__subclasses__()",
    "sum.__self__",
    "np.sum.__globals__",
    "exp.__call__(log_probs)",
    "getattr(log_probs, 'sum')",
    "__import__('os').system('touch pwned')",
    "__builtins__",
    "open('/etc/passwd')",
    "eval('1')",
    "exec('1')",
    "type(log_probs)",
    "(lambda: 1)()",
    "[x for x in log_probs]",
    "sum(x for x in log_probs)",
    "{k: 1 for k in log_probs}",
    "f'{log_probs}'",
    "f'{__import__(\"os\").system(\"touch pwned\")}'",
    "(y := log_probs)",
    "np.load('x.npy')",
    "np.ones((10**9,))",
    "np.zeros(10**9)",
    "np.empty((10000, 10000))",
    "np.lib.format",
    "np",
    "np.__dict__",
    "log_probs.tofile('pwned')",
    "log_probs.dump('pwned')",
    "exp(log_probs, out=log_probs)",
    "sum(log_probs, **{'axis': 0})",
    "where(*[loss_mask, 1, 0])",
    "log_probs ** 10**10",
    "2 ** 1000",
    "(10**60) ** 60",
    "1 << 100000",
    "log_probs @ log_probs",
    "'a' * 10**9",
    "b'x'",
    "1j",
    "log_probs if 1 in log_probs else 0",
    "{1, 2}",
    "{'a': 1}",
    "exp(10**400)",
    "(" * 300 + "1" + ")" * 300,
    "-" * 3000 + "1",
    "1 + " * 2000 + "1",
    "log_prob - ref_log_probs",
]

# Calls that could write into an observed array or alias it (numpy's `out`, `copy`, `where`,
# `dtype`/`shape` parameters, reached by position or by keyword, as function, np.NAME or method),
# in-place methods, and calls whose result size the inputs' shapes do not bound.
WRITES = [
    "clip(log_probs, 5, 5, log_probs)",
    "np.clip(log_probs, 5, 5, log_probs)",
    "log_probs.clip(5, 5, log_probs)",
    "log_probs.clip(5, 5, out=log_probs)",
    "exp(log_probs, log_probs)",
    "np.exp(log_probs, log_probs)",
    "np.exp(log_probs, out=log_probs)",
    "minimum(log_probs, 0, log_probs)",
    "np.power(log_probs, 2, log_probs)",
    "logical_not(loss_mask, loss_mask)",
    "log_probs.sum(1, None, log_probs[:, 0])",
    "sum(log_probs, 1, None, log_probs[:, 0])",
    "np.sum(log_probs, 1, None, log_probs[:, 0])",
    "log_probs.sum(axis=1, out=log_probs[:, 0])",
    "log_probs.max(1, log_probs[:, 0])",
    "np.amax(log_probs, 1, log_probs[:, 0])",
    "log_probs.cumsum(1, None, log_probs)",
    "np.cumsum(log_probs, 1, None, log_probs)",
    "log_probs.mean(1, None, log_probs[:, 0])",
    "log_probs.round(0, log_probs)",
    "round(log_probs, 0, log_probs)",
    "log_probs.any(1, loss_mask[:, 0])",
    "concatenate((log_probs, log_probs), 0, log_probs)",
    "np.concatenate((log_probs, log_probs), 0, log_probs)",
    "stack((log_probs, log_probs), 0, log_probs)",
    "nan_to_num(log_probs, False)",
    "np.nan_to_num(log_probs, 0)",
    "nan_to_num(log_probs, copy=False)",
    "exp(log_probs, where=loss_mask > 0)",
    "sum(log_probs, where=loss_mask > 0)",
    "log_probs.sum(where=loss_mask > 0)",
    "zeros_like(log_probs, None, None, True, (3, 1000, 1000))",
    "zeros_like(log_probs, shape=(10**5, 10**5))",
    "full_like(log_probs, 0, None, None, True, (3, 1000, 10**3))",
    "ones_like(log_probs, int)",
    "where(loss_mask > 0, 1, 0, log_probs)",
    "log_probs.flatten(1)",
    "log_probs.fill(0)",
    "log_probs.sort()",
    "log_probs.put(0, 5.0)",
    "log_probs.itemset(0, 5.0)",
    "log_probs.setflags(write=True)",
    "log_probs.resize(1)",
    "log_probs.view()",
    "log_probs.T",
    "log_probs.flat",
    "np.copyto(log_probs, 0)",
    "np.put(log_probs, 0, 5.0)",
    "np.putmask(log_probs, loss_mask, 0)",
    "np.add.at(log_probs, 0, 1)",
    "np.asarray(log_probs)",
]


def kl_scenario(expression: str) -> str:
    """The expression on line 9 of a kl scenario (a JSON string is a YAML double-quoted one)."""
    return textwrap.dedent("""\
        id: kl
        title: k1
        boundary: kl
        inputs:
          log_probs:     [[-0.5, -1.0, -0.2]]
          ref_log_probs: [[-0.6, -0.8, -0.4]]
          loss_mask:     [[1, 1, 0]]
        invariants:
          - close: {output: kl, expected: EXPR}
        """).replace("EXPR", json.dumps(expression))


@pytest.mark.parametrize("source", ESCAPES + WRITES, ids=range(len(ESCAPES + WRITES)))
def test_escapes_are_refused_at_load_time_with_file_and_line(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = kl_scenario(source)
    assert text.splitlines()[8].lstrip().startswith("- close:")
    with pytest.raises(SpecError) as ei:
        load_text(text, "escape.yaml")
    (line,) = ei.value.lines()
    assert line.startswith("escape.yaml:9: invariants.0.close.expected: expression"), line
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("source,node", [
    (PWN, "__wrapped__"), ("getattr(log_probs, 'sum')", "getattr"), ("log_probs.__class__", "__class__"),
    ("10**10**10", "10**10**10"), ("np.ones((10**9,))", "np.ones"), ("(lambda: 1)()", "lambda"),
    ("exp(log_probs, out=log_probs)", "'out'"), ("f'{log_probs}'", "f-string"), ("(y := log_probs)", ":="),
    ("clip(log_probs, 5, 5, log_probs)", "clip takes at most 3 positional"),
    ("log_probs.sum(1, None, log_probs[:, 0])", "the method sum takes at most 1 positional"),
    ("nan_to_num(log_probs, False)", "nan_to_num takes at most 1 positional"),
])
def test_the_message_names_the_offending_node(source, node):
    with pytest.raises(SpecError) as ei:
        load_text(kl_scenario(source))
    assert node in str(ei.value)


def test_the_escape_through_the_cli_exits_2_and_runs_nothing(tmp_path):
    (tmp_path / "escape.yaml").write_text(kl_scenario(PWN), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "sentinel", "run", "escape.yaml", "-o", "-"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "escape.yaml:9: invariants.0.close.expected" in proc.stderr
    assert not (tmp_path / "pwned").exists()


def test_a_writing_expression_that_would_turn_a_violation_into_holds_is_refused(tmp_path):
    """k1's kl is log_probs - ref_log_probs, never 5: `clip(kl, 5, 5)` is violated in a real run.
    Its writing form `clip(kl, 5, 5, kl)` clipped the observed kl itself to 5 before the
    comparison (holds, exit 0, observation 5 in the report); now the file is refused (exit 2)."""
    def run(expression: str) -> subprocess.CompletedProcess:
        (tmp_path / "kl.yaml").write_text(kl_scenario(expression), encoding="utf-8")
        return subprocess.run([sys.executable, "-m", "sentinel", "run", "kl.yaml", "-o", "report.json"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    honest = run("clip(kl, 5, 5)")
    assert honest.returncode == 1, honest.stdout + honest.stderr
    (result,) = json.loads((tmp_path / "report.json").read_text())["results"]
    assert result["invariants"][0]["verdict"] == "violated"
    assert result["invariants"][0]["observed"][0][:2] == pytest.approx([0.1, -0.2])
    (tmp_path / "report.json").unlink()
    for writing in ("clip(kl, 5, 5, kl)", "np.clip(kl, 5, 5, kl)", "kl.clip(5, 5, kl)", "exp(kl, kl) * 0 + 5"):
        proc = run(writing)
        assert proc.returncode == 2, (writing, proc.stdout, proc.stderr)
        assert "kl.yaml:9: invariants.0.close.expected: expression" in proc.stderr, proc.stderr
        assert "positional" in proc.stderr, proc.stderr
        assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize("source", ["clip(kl, 5, 5, kl)", "exp(kl, kl)", "kl.sum(1, None, kl[:, 0])",
                                    "nan_to_num(kl, False)", "kl.clip(5, 5, kl)"])
def test_the_evaluator_cannot_write_even_where_a_refusal_is_missed(source, monkeypatch):
    """Were the positional table wrong (every call allowed any number of positional arguments),
    the observations still reach the evaluator read-only: the write fails, nothing changes."""
    monkeypatch.setattr(expr, "FUNCTION_ARGS", dict.fromkeys(expr.FUNCTION_ARGS, 9))
    monkeypatch.setattr(expr, "METHOD_ARGS", dict.fromkeys(expr.METHOD_ARGS, 9))
    expr._language.cache_clear()
    try:
        kl = np.array([[0.1, -0.2, np.nan]])
        seen = kl.copy()
        obs = RunObservation(inputs={"log_probs": LP[:1]}, outputs={"kl": kl})
        with pytest.raises(expr.ExprError, match="read-only"):
            evaluate_expected(source, obs)
        np.testing.assert_array_equal(kl, seen)
        assert kl.flags.writeable  # the caller's array keeps its own flags: the evaluator saw a read-only view
    finally:
        expr._language.cache_clear()


# --- what people write -------------------------------------------------------------------

NS = {"values": np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "loss_mask": np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
      "log_probs": np.array([[0.0, -1.0, -2.0], [-0.5, 0.0, 0.0]]), "ref_log_probs": np.full((2, 3), -1.0),
      "advantages": np.array([[1.0, -1.0, 0.5], [2.0, 0.0, 0.0]])}
V, M, LP, REF, A = NS["values"], NS["loss_mask"], NS["log_probs"], NS["ref_log_probs"], NS["advantages"]


@pytest.mark.parametrize("source,want", [
    ("(values * loss_mask).sum() / loss_mask.sum()", (V * M).sum() / M.sum()),
    ("np.where(loss_mask > 0, log_probs - ref_log_probs, 0)", np.where(M > 0, LP - REF, 0)),
    ("where(loss_mask > 0, log_probs - ref_log_probs, 0)", np.where(M > 0, LP - REF, 0)),
    ("-clip(exp(log_probs - ref_log_probs), 0.8, 1.2) * advantages * loss_mask / sum(loss_mask)",
     -np.clip(np.exp(LP - REF), 0.8, 1.2) * A * M / M.sum()),
    ("sum((log_probs - ref_log_probs) * loss_mask, axis=-1, keepdims=True) / sum(loss_mask, axis=-1, keepdims=True)",
     ((LP - REF) * M).sum(-1, keepdims=True) / M.sum(-1, keepdims=True)),
    ("(values * loss_mask).sum(axis=1) / loss_mask.sum(axis=1)", (V * M).sum(1) / M.sum(1)),
    ("values.max(axis=0)", V.max(0)), ("values.cumsum(axis=-1)", V.cumsum(-1)), ("values.mean()", V.mean()),
    ("values.clip(2, 5)", V.clip(2, 5)), ("values.reshape(-1)", V.reshape(-1)), ("np.cumsum(values, axis=1)", V.cumsum(1)),
    ("(log_probs - ref_log_probs) ** 2 / 2", (LP - REF) ** 2 / 2),
    ("exp(ref_log_probs - log_probs) - 1 - (ref_log_probs - log_probs)", np.exp(REF - LP) - 1 - (REF - LP)),
    ("maximum(-exp(log_probs) * advantages, -clip(exp(log_probs), 0.8, 1.28) * advantages)",
     np.maximum(-np.exp(LP) * A, -np.clip(np.exp(LP), 0.8, 1.28) * A)),
    ("values * [[1.0], [0.0]]", V * [[1.0], [0.0]]), ("values[:, 0]", V[:, 0]), ("values[0, 1:]", V[0, 1:]),
    ("values[..., -1]", V[..., -1]), ("values[loss_mask > 0]", V[M > 0]), ("values[[1, 0]]", V[[1, 0]]),
    ("values[:, None, :].sum(axis=1)", V), ("0 < values < 4", (V > 0) & (V < 4)),
    ("(values > 2) & (loss_mask > 0) | (values == 1)", ((V > 2) & (M > 0)) | (V == 1)),
    ("values > 2 and loss_mask > 0", (V > 2) & (M > 0)), ("not loss_mask", M == 0),
    ("1.0 if loss_mask.sum() > 2 else 0.0", 1.0), ("abs(-values) % 4 // 1", np.abs(V) % 4 // 1),
    ("2 ** 10 * 1e-3 + np.pi - np.e", 2 ** 10 * 1e-3 + np.pi - np.e), ("isfinite(values / (values - 1))", V != 1),
    ("full_like(values, 7) + zeros_like(values) * ones_like(values)", np.full_like(V, 7)),
    ("-np.inf < values", np.ones_like(V)), ("sqrt(square(values))", V), ("log(exp(values))", V),
    ("minimum(values, 3) + sign(values - 3)", np.minimum(V, 3) + np.sign(V - 3)),
])
def test_ordinary_forms_evaluate_right(source, want):
    expr.check(source, NS)
    np.testing.assert_allclose(expr.evaluate(source, NS), np.asarray(want, dtype=np.float64), rtol=1e-12)


def test_every_catalog_expression_is_in_the_language():
    seen = 0
    for sc in load_paths([catalog_path()]):
        for inv in sc.invariants:
            if isinstance(getattr(inv, "expected", None), str):
                expr.check(inv.expected, {p.name for p in sc.spec.inputs} | {p.name for p in sc.spec.outputs})
                seen += 1
    assert seen >= 10


def test_a_name_the_run_lacks_is_missing_not_an_error():
    o = RunObservation(inputs={"log_probs": LP}, outputs={})
    with pytest.raises(Missing, match="pg_loss"):
        evaluate_expected("pg_loss * 0", o)


# --- limits at run time ------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "x.reshape(-1)[:, None] * x.reshape(-1)",  # 10**10 elements: refused before numpy allocates them
    "where(x.reshape(-1)[:, None] > 0, x.reshape(-1), 0)",
    "x.reshape(-1)[:, None] > x.reshape(-1)",
    "concatenate([x, x, x, x, x, x, x, x, x, x, x])",
    "y[i[:, None], i % 10]",  # advanced indexing: 2000 x 2000 index arrays
    "x.reshape(-1)[:, None].clip(x.reshape(-1))",  # a method broadcasting its arguments with its receiver
    "[" + "x, " * 100 + "] + 0",  # a list of arrays becomes one array of 10**7 elements
    "where([" + "x, " * 100 + "] > 0, 1, 0)",
    "[" + "x, " * 100 + "]",  # the result itself
])
def test_oversized_intermediates_are_refused_before_they_are_built(source):
    """Refused with a limit, and the memory numpy allocated on the way (tracemalloc sees
    numpy's buffers) stays below one allowed intermediate (MAX_ELEMENTS float64 values)."""
    ns = {"x": np.zeros(100_000), "y": np.zeros((2000, 10)), "i": np.arange(2000)}
    tracemalloc.start()
    try:
        with pytest.raises(expr.ExprError, match="limit"):
            expr.evaluate(source, ns)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * expr.MAX_ELEMENTS + 1_000_000, peak


def test_integer_exponents_are_bounded():
    with pytest.raises(expr.ExprError, match="exponent"):
        expr.evaluate("x ** 100", {"x": np.arange(3)})
    np.testing.assert_allclose(expr.evaluate("x ** 2.5", {"x": np.arange(3.0)}), np.arange(3.0) ** 2.5)


def test_evaluation_has_a_time_limit():
    with pytest.raises(expr.ExprError, match="limit"):
        expr.evaluate("exp(x) + 1", {"x": np.zeros(3)}, time_limit=0.0)


def test_a_runtime_failure_is_an_expression_error_naming_the_node():
    with pytest.raises(expr.ExprError, match="broadcast") as ei:
        expr.evaluate("x + y", {"x": np.zeros(3), "y": np.zeros(4)})
    assert "`x + y`" in str(ei.value)


def test_the_docs_list_the_language():
    """The docs' "What `expected` may say" names every function, method and keyword allowed."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "concepts" / "invariants.md").read_text(encoding="utf-8")
    section = page.split("## What `expected` may say", 1)[1].split("\n## ", 1)[0]
    words = set(re.findall(r"[a-z_0-9]+", section))
    assert set(expr.FUNCTIONS) <= words, set(expr.FUNCTIONS) - words
    assert expr.METHODS <= words and expr.KEYWORDS <= words and set(expr.CONSTANTS) <= words
