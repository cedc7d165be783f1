"""sentinel mutate's operators, mutant naming and in-child application, on small snippets
(pure ast and one process: no worker)."""

from __future__ import annotations

import contextlib
import sys
import textwrap
import types

import pytest

from sentinel.errors import UsageError
from sentinel.mutate import equivalent
from sentinel.mutate.apply import apply, resolve
from sentinel.mutate.mutants import Function, mutants, swapped
from sentinel.mutate.operators import OPERATORS


def changes(body: str, op: str, params: str = "x, m, n, a, b, log_probs, ref") -> set[tuple[str, str]]:
    src = f"def f({params}):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return {(m.original, m.replacement) for m in mutants(Function("mod:f", src, 1), [op])}


CASES = {
    "drop-mask": ("return (x * m_mask).sum()", ("x * m_mask", "x")),
    "sum-mean": ("return x.sum(-1)", ("x.sum(-1)", "x.mean(-1)")),
    "reduce-dim": ("return x.sum()", ("x.sum()", "x.sum(dim=-1)")),
    "clamp-denominator": ("return x / n.clamp_min(1)", ("n.clamp_min(1)", "n")),
    "detach": ("w = x.clamp(a, b).detach()\nreturn w", ("x.clamp(a, b).detach()", "x.clamp(a, b)")),
    "no-grad": ("with torch.no_grad():\n    x.div_(a)\nreturn x", ("with torch.no_grad():\n    x.div_(a)", "x.div_(a)")),
    "sign": ("return a - b", ("a - b", "a + b")),
    "compare": ("return x > a", ("x > a", "x >= a")),
    "min-max": ("return torch.maximum(a, b)", ("torch.maximum(a, b)", "torch.minimum(a, b)")),
    "swap-args": ("return kl(log_probs, ref, m)", ("kl(log_probs, ref, m)", "kl(ref, log_probs, m)")),
    "inplace": ("return log_probs - ref", ("log_probs - ref", "log_probs.sub_(ref)")),
    "slice": ("return x[:, 1:]", ("1:", "2:")),
    "constant": ("return 0.5 * x", ("0.5", "1.0")),
    "masked-fill": ("return x.masked_fill(m, 0.0)", ("x.masked_fill(m, 0.0)", "x.masked_fill(m, 1.0)")),
    "and-or": ("return (a < 0) & (b > 1)", ("(a < 0) & (b > 1)", "(a < 0) | (b > 1)")),
    "delete": ("x = x * m\nreturn x", ("x = x * m", "<deleted>")),
}


def test_every_operator_has_a_case_and_a_documented_example():
    assert set(CASES) == set(OPERATORS)
    for name, fn in OPERATORS.items():
        assert "->" in (fn.__doc__ or ""), f"{name}'s docstring shows no example"


@pytest.mark.parametrize("op", sorted(CASES))
def test_operator_makes_its_change(op):
    body, change = CASES[op]
    assert change in changes(body, op)


@pytest.mark.parametrize("body, op, change", [
    ("return x.mean()", "sum-mean", ("x.mean()", "x.sum()")),
    ("return m.sum(-1, keepdim=True)", "reduce-dim", ("m.sum(-1, keepdim=True)", "m.sum()")),
    ("return x / torch.clamp(n, min=1e-8)", "clamp-denominator", ("torch.clamp(n, min=1e-08)", "n")),
    ("y = a * b\nreturn y", "detach", ("y = a * b", "y = (a * b).detach()")),
    ("return -x", "sign", ("-x", "x")),
    ("return x <= a", "compare", ("x <= a", "x < a")),
    ("return x.amax(-1)", "min-max", ("x.amax(-1)", "x.amin(-1)")),
    ("x.mul_(a)\nreturn x", "inplace", ("x.mul_(a)", "x.mul(a)")),
    ("k = x\nk *= a\nreturn k", "inplace", ("k *= a", "k = k * a")),
    ("x = x * m\nreturn x", "inplace", ("x = x * m", "x *= m")),
    ("return x[..., -1]", "slice", ("x[..., -1]", "x[..., -2]")),
    ("return x[:, :-1]", "slice", (":-1", ":-2")),
    ("return x + 1e-08", "constant", ("1e-08", "0.0")),
    ("return s.masked_fill(m, float('-inf'))", "masked-fill", ("s.masked_fill(m, float('-inf'))", "s.masked_fill(m, 0.0)")),
    ("return a and b", "and-or", ("a and b", "a or b")),
    ("x[m] = 0\nreturn x", "delete", ("x[m] = 0", "<deleted>")),
])
def test_operator_other_forms(body, op, change):
    assert change in changes(body, op)


@pytest.mark.parametrize("body, op", [
    ("return (x * y).sum()", "drop-mask"),  # no mask in the product
    ("return x / n", "clamp-denominator"),  # no clamp
    ("return n.clamp_min(1) / x", "clamp-denominator"),  # a clamp on the numerator
    ("y = x * m\nreturn y", "delete"),  # a first assignment: NameError on every input
    ("return a + b", "inplace"),  # a, b are not the function's inputs (see params below)
    ("n = len(x)\nreturn n", "detach"),  # a Python value
    ("return x.sum(-1)", "constant"),  # an int, not a float constant
])
def test_operator_leaves_alone(body, op):
    assert not changes(body, op, params="x, m, n, s" if op == "inplace" else "x, m, n, s, a, b")


def test_docstring_signature_and_decorators_are_never_mutated():
    src = 'def f(x, eps=1e-8) -> float:\n    """0.5 * x"""\n    return x\n'
    assert mutants(Function("mod:f", "@torch.no_grad()\n" + src, 1)) == []


def test_key_is_kept_when_lines_move_and_position_follows():
    src = "def f(a, b):\n    return a - b\n"
    moved = "def f(a, b):\n    c = 1\n    return a - b\n"
    one = {m.key: m for m in mutants(Function("mod:f", src, 10), ["sign"])}
    two = {m.key: m for m in mutants(Function("mod:f", moved, 10), ["sign"])}
    assert set(one) == set(two)
    k = next(iter(one))
    assert one[k].position.endswith(":11:12") and two[k].position.endswith(":12:12")
    assert "-    return a - b" in one[k].diff and "+    return a + b" in one[k].diff


MODULE = '''
import functools

def helper(x):
    return x + 1

def twice(x):
    return helper(x) * 2

class Base:
    def value(self):
        return 1

class Child(Base):
    def value(self):
        return super().value() + 10

def outer(k):
    def inner(x):
        return x * k
    return inner

CLOSED = outer(3)
TABLE = {"helper": helper}

def helper_plant(x, scale=100):
    return helper(x) * scale

def clipped(x, clip=None):
    if clip is None:
        y = x - 1
    elif clip > 0:
        y = min(x, clip)
    else:
        y = x
    return y
'''


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    (tmp_path / "mut_toy_mod.py").write_text(MODULE)
    (tmp_path / "mut_toy_user.py").write_text("from mut_toy_mod import helper\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import mut_toy_mod
    import mut_toy_user
    yield mut_toy_mod, mut_toy_user
    for name in ("mut_toy_mod", "mut_toy_user"):
        sys.modules.pop(name, None)


def _mutant(module, name: str, op: str, replacement: str) -> dict:
    import inspect
    fn = resolve(f"{module.__name__}:{name}")
    lines, line = inspect.getsourcelines(fn)
    m = next(m for m in mutants(Function(f"{module.__name__}:{name}", textwrap.dedent("".join(lines)), line), [op])
             if m.replacement == replacement)
    return m.job()


def test_apply_reaches_every_reference_to_the_function(toy_module):
    mod, user = toy_module
    table_fn, imported = mod.TABLE["helper"], user.helper
    apply(_mutant(mod, "helper", "sign", "x - 1"))
    assert mod.helper(5) == 4 and user.helper(5) == 4 and mod.TABLE["helper"](5) == 4 and mod.twice(5) == 8
    assert table_fn is mod.helper and imported is mod.helper  # the same objects, new code


def test_apply_keeps_a_methods_super_and_a_closures_cell(toy_module):
    mod, _ = toy_module
    apply(_mutant(mod, "Child.value", "sign", "super().value() - 10"))
    assert mod.Child().value() == -9
    closed = mod.CLOSED
    inner_job = {"function": f"{mod.__name__}:outer", "line": 1,
                 "source": "def outer(k):\n    def inner(x):\n        return x * k\n    return inner\n"}
    apply(inner_job)  # the outer function's code replaced by the same: closures made before keep working
    assert closed(2) == 6 and mod.outer(4)(2) == 8


def test_apply_of_a_closure_whose_mutant_drops_a_free_variable(toy_module):
    mod, _ = toy_module
    closed = mod.CLOSED  # inner, closing over k = 3
    apply({"function": f"{mod.__name__}:CLOSED", "line": 1, "source": "def inner(x):\n    return x * 2\n"})
    assert closed(2) == 4  # the closure's layout kept though the body no longer reads k


def test_equivalent_yaml_is_read_and_bad_entries_name_file_and_line(tmp_path):
    good = tmp_path / "equivalent.yaml"
    good.write_text("- function: m:f\n  operator: sign\n  key: abc\n  reason: never negative here\n")
    claims = equivalent.load(good)
    assert list(claims) == ["m:f#sign@abc"] and claims["m:f#sign@abc"].reason == "never negative here"
    bad = tmp_path / "bad.yaml"
    bad.write_text("- function: m:f\n  operator: sign\n  key: abc\n  reason: ok\n- function: m:g\n  operator: sign\n  key: d\n")
    with pytest.raises(UsageError, match=r"bad.yaml:5: missing reason"):
        equivalent.load(bad)
    bad.write_text("- function: m:f\n  operator: sign\n  key: abc\n  reason: ''\n")
    with pytest.raises(UsageError, match=r"bad.yaml:4: reason must be a non-empty text"):
        equivalent.load(bad)


def test_swap_mutant_puts_a_replacement_that_builds_on_the_original_in_its_place(toy_module):
    """A plant as a mutant: the function's body calls the replacement, which reaches the
    original (not itself) when it calls the function it replaces."""
    import inspect
    mod, user = toy_module
    lines, line = inspect.getsourcelines(mod.helper)
    m = swapped(Function(f"{mod.__name__}:helper", "".join(lines), line), "times-100", f"{mod.__name__}:helper_plant",
                inspect.getsource(mod.helper_plant))
    assert m.operator == "plant" and m.key == "times-100" and m.id.endswith("#plant@times-100")
    assert "-    return x + 1" in m.diff and "+    return helper(x) * scale" in m.diff
    apply(m.job())
    assert mod.helper(5) == 600 and user.helper(5) == 600 and mod.TABLE["helper"](5) == 600 and mod.twice(5) == 1200


def test_reach_marker_fires_only_where_the_change_runs(toy_module, monkeypatch):
    """A mutant's code calls the reach marker before the statement that holds its change: an
    `elif` test in the branch that evaluates it, a deleted statement where it stood; the flag
    says whether the change ran (a survivor not reached is reach work, not a missing check)."""
    import builtins
    from sentinel.mutate import reach
    monkeypatch.setattr(builtins, reach.MARKER, None, raising=False)  # removed again after the test
    monkeypatch.setattr(reach, "_flag", None)
    mod, _ = toy_module
    assert reach.reached() is None  # nothing armed here: unknown, never "not reached"
    elif_test = _mutant(mod, "clipped", "compare", "clip >= 0")
    assert "    else:\n        __sentinel_reached__()\n        if clip >= 0:" in elif_test["source"]
    deleted = _mutant(mod, "clipped", "delete", "<deleted>")
    assert "elif clip > 0:\n        __sentinel_reached__()\n        pass" in deleted["source"]
    first = _mutant(mod, "clipped", "sign", "x + 1")
    for job, calls, expected in [(elif_test, [(5,)], False), (elif_test, [(5, -1)], True),
                                 (deleted, [(5,), (5, -1)], False), (deleted, [(5,), (5, 3)], True),
                                 (first, [(5, 3)], False), (first, [(5, 3), (5,)], True)]:
        apply(job)  # arms a fresh flag, as each mutant's forked child does
        assert reach.reached() is False
        for args in calls:
            with contextlib.suppress(UnboundLocalError):  # the deleted statement's `y`: it ran, then failed
                mod.clipped(*args)
        assert reach.reached() is expected, (job["source"], calls)
    assert mod.clipped(5) == 6  # the marker changes nothing the function computes


COMPILED = '''
import torch

@torch.compile(backend="eager", fullgraph=True)
def kl(a, b):
    d = a - b
    return (d * 2).sum()
'''


def test_reach_marker_is_no_graph_break_under_torch_compile(tmp_path, monkeypatch):
    """slime's --compile: dynamo traces the mutant's code, marker included. The marker is a call
    dynamo runs after its graph, not a graph break (one splits the mutant's graph, and under
    fullgraph=True fails the mutant as if its change had)."""
    import builtins
    torch = pytest.importorskip("torch")
    import torch._dynamo
    from torch._dynamo.utils import counters
    from sentinel.mutate import reach
    monkeypatch.setattr(builtins, reach.MARKER, None, raising=False)
    monkeypatch.setattr(reach, "_flag", None)
    monkeypatch.setattr(torch._dynamo.config, "reorderable_logging_functions", set())
    (tmp_path / "mut_compiled_mod.py").write_text(COMPILED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mut_compiled_mod", raising=False)
    import mut_compiled_mod as mod
    torch._dynamo.reset()
    counters.clear()
    a, b = torch.ones(3), torch.ones(3)
    try:
        assert float(mod.kl(a, b)) == 0.0
        apply(_mutant(mod, "kl", "sign", "a + b"))
        assert reach.reached() is False
        assert float(mod.kl(a, b)) == 12.0 and reach.reached() is True  # the mutant compiled, its marker ran
        reach._flag[0] = 0
        assert float(mod.kl(a, 2 * b)) == 18.0 and reach.reached() is True  # the compiled code, run again
        assert not counters["graph_break"]
    finally:
        torch._dynamo.reset()
        sys.modules.pop("mut_compiled_mod", None)


def test_a_mutant_put_in_place_takes_out_the_one_before(toy_module, monkeypatch):
    """Where the worker cannot fork (CUDA initialised at load) every mutant is put in place in
    the worker itself: the one before must not stay, running in the next one's jobs and firing
    the next one's reach marker (a survivor read as reached, a missing check, when it is not)."""
    import builtins
    from sentinel.mutate import reach
    monkeypatch.setattr(builtins, reach.MARKER, None, raising=False)
    monkeypatch.setattr(reach, "_flag", None)
    mod, _ = toy_module
    apply(_mutant(mod, "helper", "sign", "x - 1"))
    assert mod.helper(5) == 4 and reach.reached() is True
    apply(_mutant(mod, "clipped", "compare", "clip >= 0"))  # its change: the elif test, not run below
    assert mod.helper(5) == 6 and mod.twice(5) == 12 and mod.clipped(5) == 4
    assert reach.reached() is False
    assert mod.clipped(5, -1) == 5 and reach.reached() is True


@pytest.mark.parametrize("future", ["", "from __future__ import annotations\n"])
def test_a_mutant_compiles_under_its_modules_future_imports(future, tmp_path, monkeypatch):
    """A mutant is compiled under its module's `from __future__` imports, not apply.py's: a
    nested def's annotations stay what the unmutated function makes (objects, or strings)."""
    (tmp_path / "mut_future_mod.py").write_text(
        future + "def outer(x):\n    def inner(y: int) -> int:\n        return y\n    z = x - 1\n"
                 "    return inner.__annotations__, z\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mut_future_mod", raising=False)
    import mut_future_mod as mod
    try:
        before, _ = mod.outer(5)
        apply(_mutant(mod, "outer", "sign", "x + 1"))
        assert mod.outer(5) == (before, 6)
    finally:
        sys.modules.pop("mut_future_mod", None)
