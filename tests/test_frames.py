"""`locals_on_return` reads a target function's locals as it returns, and `hunt --coverage`
still measures that function (OpenRLHF's PolicyLoss.forward, TRL's _compute_loss)."""

from __future__ import annotations

import importlib.util
import sys

import coverage

from sentinel.adapters.frames import locals_on_return
from sentinel.coverage import measuring

SOURCE = """def f(x):
    if x > 0:
        y = 1
    else:
        y = 2
    return g(y)


def g(y):
    if y > 1:
        return -y
    return y
"""


def _module(tmp_path):
    path = tmp_path / "framed.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("framed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, path


def test_locals_are_read_at_each_return_and_the_hook_before_is_put_back(tmp_path):
    mod, _ = _module(tmp_path)
    before = sys.getprofile()
    with locals_on_return(mod.f, ("y", "missing")) as seen:
        assert mod.f(1) == 1 and mod.f(-1) == -2
    assert seen == [{"y": 1}, {"y": 2}]
    assert sys.getprofile() is before


def test_coverage_measures_the_function_whose_locals_are_read(tmp_path):
    """Under sys.settrace the hook replaced coverage.py's tracer: the function and all it called
    measured nothing (PolicyLoss.forward: 0 of 14 branches)."""
    mod, path = _module(tmp_path)
    folder = tmp_path / "cov"
    with measuring(str(folder), [str(tmp_path)]):
        with locals_on_return(mod.f, ("y",)) as seen:
            mod.f(1)
            mod.f(-1)
    assert len(seen) == 2
    combined = coverage.Coverage(data_file=str(folder / ".coverage"))
    combined.combine([str(folder)])
    data = combined.get_data()
    lines = set(data.lines(str(path.resolve())) or data.lines(str(path)) or [])
    assert {2, 3, 5, 6, 10, 11, 12} <= lines  # both arms of f, g's branch and its fall-through


def test_locals_are_read_under_cprofile_and_the_profiler_is_put_back():
    # cProfile's hook is no Python callable: chaining it raised TypeError into the target's call,
    # and sys.setprofile(it) could not put it back
    import cProfile

    def f(x):
        y = x + 1
        return y

    prof = cProfile.Profile()
    prof.enable()
    try:
        with locals_on_return(f, ("y",)) as seen:
            f(1)
        after = sys.getprofile()
    finally:
        prof.disable()
    assert seen == [{"y": 2}]
    assert after is prof
