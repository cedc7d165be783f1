"""validate.py replaying a recorded call at another commit of the trainer: an argument the
adapter binds at its declared absent value (`bind(..., absent=...)`) is left out where the
function there has no such parameter, as the adapter itself leaves it out; any other missing
parameter stays an error. Toy trainers recorded and replayed; the real rows in the slow set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from sentinel.export.generate import validate_source
from sentinel.export.record import Calls
from sentinel.export.codegen import Writer

NEW = """
def loss(x, scale=1.0, rejection=None, level="token"):
    return x * scale
"""
OLD = """
def loss(x, scale=1.0):  # the parent commit: no `rejection`, no `level`
    return x * scale * 2.0
"""
ADAPTER = """
import torch
import toytrainer
from sentinel.adapters.binding import bind

def go(rejection, level):
    fn = toytrainer.loss
    return fn(**bind(fn, "b", {"x": torch.tensor([1.0, 2.0])}, {"rejection": rejection, "level": level},
                     absent={"rejection": None, "level": "token"}))
"""


def _record(tmp_path, rejection=None, level="token"):
    (tmp_path / "toytrainer.py").write_text(NEW)
    (tmp_path / "toyadapter.py").write_text(ADAPTER)
    sys.path.insert(0, str(tmp_path))
    try:
        import toyadapter
        trainer = str(tmp_path / "toytrainer.py")
        with Calls(lambda f: f == trainer, lambda f: f == str(tmp_path / "toyadapter.py"),
                   Writer(lambda m: m == "toytrainer")) as rec:
            toyadapter.go(rejection, level)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toyadapter", None), sys.modules.pop("toytrainer", None)
    return rec


def _validate(tmp_path, rec, trainer: str) -> dict[str, Any]:
    """The generated validate.py run alone against a trainer folder holding `trainer`."""
    call = rec.calls[0]
    check = {"observable": "v", "kind": "values", "path": "result", "layout": "same", "shape": [2],
             "expected": [1.0, 2.0], "atol": 1e-6, "rtol": 1e-5, "where": None, "run": "base", "call": call,
             "call_index": 0}
    r = {"calls": {"base": rec.calls}, "prelude": {"stubs": [], "optional": [], "names": [], "shims": {}, "bare": []},
         "standins": rec.writer.standins, "root": str(tmp_path)}
    src = validate_source(r, [check], {"title": "t", "id": "t", "trigger": {}}, "toy", {})
    side = tmp_path / "side"
    side.mkdir(exist_ok=True)
    (side / "toytrainer.py").write_text(trainer)
    (tmp_path / "validate.py").write_text(src)
    proc = subprocess.run([sys.executable, "-I", str(tmp_path / "validate.py"), str(side)], capture_output=True,
                          text=True, cwd=tmp_path)
    return {"rc": proc.returncode, **json.loads(proc.stdout)}


def test_an_argument_at_its_absent_value_is_left_out_where_the_function_lacks_it(tmp_path):
    """AReaL's ppo_actor_loss_fn gained `rejection_sampling` in bc9f00988: the recording holds
    rejection_sampling=None (its default, which the adapter declares absent), and the parent's
    function has no such parameter. validate.py must make the parent's own call there (before
    the fix: TypeError, exit 2)."""
    rec = _record(tmp_path)
    assert rec.calls[0]["absent"] == ["level", "rejection"]
    assert _validate(tmp_path, rec, NEW)["status"] == "fixed"  # the recorded commit: all arguments kept
    old = _validate(tmp_path, rec, OLD)
    assert old["rc"] == 1 and old["observed"]["v"] == [2.0, 4.0], old  # the parent's function ran


def test_an_argument_at_another_value_or_not_declared_absent_stays_an_error(tmp_path):
    rec = _record(tmp_path, rejection={"cap": 2.0})  # an option the parent lacks: never dropped
    assert rec.calls[0]["absent"] == ["level"]
    got = _validate(tmp_path, rec, OLD)
    assert got["rc"] == 2 and "unexpected keyword argument 'rejection'" in got["error"]
    rec = _record(tmp_path)
    gone = OLD.replace("scale=1.0", "factor=1.0").replace("* scale", "* factor")  # `scale` has no absent value
    got = _validate(tmp_path, rec, gone)
    assert got["rc"] == 2 and "unexpected keyword argument 'scale'" in got["error"]


@pytest.mark.slow
def test_areal_regression_parent_replays_without_rejection_sampling(tmp_path):
    """decoupled-loss-behaviour-weight, regression bc9f00988 -> its parent: reproduced at the
    commit, fixed at the parent, and the unit test fails / passes there."""
    repo = os.environ.get("SENTINEL_AREAL_REPO")
    if not repo:
        pytest.skip("SENTINEL_AREAL_REPO (an AReaL checkout) is not set")
    from sentinel.export.bundle import Request, export
    out = tmp_path / "bundle"
    export(Request("decoupled-loss-behaviour-weight", "areal", out, repo=repo, commit="bc9f00988",
                   fixed_at="bc9f00988^"))
    before = json.loads((out / "before.json").read_text())
    after = json.loads((out / "after.json").read_text())
    assert before["status"] == "reproduced" and before["test"]["exit"] == 1
    assert after["status"] == "fixed", after
    assert after["validate_exit"] == 0 and after["test"]["exit"] == 0
