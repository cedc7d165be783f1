"""`sentinel export` where the adapter composes: a value seen inside the trainer's call (the
adapter's spy), a gradient, a trainer-wide object earlier calls wrote, the adapter's stand-ins,
and objects one call receives twice. Toy trainers recorded and replayed by a generated
validate.py; the real trainers' rows run in the slow set when their checkouts are given."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
import torch

from sentinel.adapters.spying import spy
from sentinel.export.codegen import NotSource, Writer
from sentinel.export.generate import read_at, validate_source
from sentinel.export.record import Calls, candidates
from sentinel.export.standins import NotWritable, write

TRAINER = """
import torch

class Tracker:
    def __init__(self):
        self.seen = []
    def log(self, v):
        self.seen.append(float(v))
    def export(self):
        out, self.seen = sum(self.seen), []
        return out

TRACKER = Tracker()

def inner(x):
    return x * 3.0

def outer(x):
    TRACKER.log(x.detach().sum())
    return (inner(x) * 2.0).sum()
"""


def _record(tmp_path, body: str):
    """Run `body` (adapter code: `toytrainer` imported) with the trainer's calls recorded."""
    (tmp_path / "toytrainer.py").write_text(TRAINER)
    (tmp_path / "toyadapter.py").write_text("import torch\nimport toytrainer\nfrom sentinel.adapters.spying import spy\n"
                                            + body)
    sys.path.insert(0, str(tmp_path))
    try:
        import toyadapter
        trainer = str(tmp_path / "toytrainer.py")
        with Calls(lambda f: f == trainer, lambda f: f == str(tmp_path / "toyadapter.py"),
                   Writer(lambda m: m == "toytrainer")) as rec:
            out = toyadapter.go()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toyadapter", None), sys.modules.pop("toytrainer", None)
    return rec, out


def _validate(tmp_path, rec, checks) -> dict[str, Any]:
    """The generated validate.py, run alone on the toy trainer's folder."""
    r = {"calls": {"base": rec.calls}, "prelude": {"stubs": [], "optional": [], "names": [], "shims": {}, "bare": []},
         "standins": rec.writer.standins, "root": str(tmp_path)}
    meta = {"title": "t", "id": "t", "trigger": {}}
    src = validate_source(r, checks, meta, "toy", {})
    (tmp_path / "validate.py").write_text(src)
    proc = subprocess.run([sys.executable, "-I", str(tmp_path / "validate.py"), str(tmp_path)], capture_output=True,
                          text=True, cwd=tmp_path)
    return {"rc": proc.returncode, **json.loads(proc.stdout)}


def _check(call, path, expected, **kw):
    return {"observable": kw.pop("observable", "v"), "kind": kw.pop("kind", "values"), "path": path, "layout": "same",
            "shape": list(np.shape(expected)), "expected": expected, "atol": 1e-6, "rtol": 1e-5, "where": None,
            "run": "base", "call": call, "call_index": kw.pop("call_index", 0), **kw}


def test_a_value_seen_inside_the_call_is_replayed_by_spying_the_same_place(tmp_path):
    """verl's token loss is the argument its policy loss hands agg_loss: the adapter spies it;
    validate.py spies the same place and reads the same value (here: inner's result)."""
    rec, out = _record(tmp_path, "def go():\n    with spy(toytrainer, 'inner') as seen:\n"
                                 "        return toytrainer.outer(torch.tensor([1.0, 2.0]))\n")
    call = rec.calls[0]
    assert call["qualname"] == "outer" and call["spies"] == [{"module": "toytrainer", "name": "inner"}]
    paths = dict(candidates(rec.live[0][1], rec.live[0][0], rec.live[0][2]))
    assert paths["SPY[0][1]"].tolist() == [3.0, 6.0] and paths["SPY[0][0]['x']"].tolist() == [1.0, 2.0]
    right = _check(call, "SPY[0][1]", [3.0, 6.0])
    assert read_at(right) == "what `inner` returns inside the call"
    assert _validate(tmp_path, rec, [right])["status"] == "fixed"
    got = _validate(tmp_path, rec, [_check(call, "SPY[0][1]", [3.0, 5.0])])  # a wrong expectation: reproduced
    assert got["rc"] == 1 and got["observed"]["v"] == [3.0, 6.0] and got["training_signal_effect"][
        "offending_positions"]["v"] == [[1]]


def test_a_gradient_is_taken_through_the_argument_that_carries_the_input(tmp_path):
    rec, _ = _record(tmp_path, "def go():\n    x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
                               "    return toytrainer.outer(x)\n")
    call = rec.calls[0]
    assert "requires_grad=True" in call["args"]["x"]  # a leaf in validate.py too
    grad = _check(call, "result", [6.0, 6.0], kind="gradient", wrt_path="ARGS['x']", observable="grad:loss/x")
    assert "gradient of the sum of what the call returns" in read_at(grad)
    assert _validate(tmp_path, rec, [grad])["status"] == "fixed"
    got = _validate(tmp_path, rec, [{**grad, "expected": [6.0, 3.0]}])
    assert got["rc"] == 1 and got["observed"]["grad:loss/x"] == [6.0, 6.0]


def test_a_trainer_wide_object_is_referenced_and_the_runs_earlier_calls_replayed(tmp_path):
    """AReaL's grpo_loss_fn logs into stats_tracker.DEFAULT_TRACKER and the adapter reads it with
    export(): validate.py must not copy the tracker (a copy shares nothing with what the loss
    wrote), and it must make the earlier calls of the run before export()."""
    rec, out = _record(tmp_path, "def go():\n    toytrainer.TRACKER.export()\n"
                                 "    toytrainer.outer(torch.tensor([1.0, 2.0]))\n"
                                 "    return toytrainer.TRACKER.export()\n")
    assert out == 3.0 and [c["qualname"] for c in rec.calls] == ["Tracker.export", "outer", "Tracker.export"]
    last = rec.calls[2]
    assert last["args"]["self"].endswith("_import('toytrainer', 'TRACKER'))") and last["shared"]
    got = _validate(tmp_path, rec, [_check(last, "result", 3.0, call_index=2)])
    assert got["status"] == "fixed", got  # without the replayed outer() the export would read 0.0
    assert _validate(tmp_path, rec, [_check(last, "result", -3.0, call_index=2)])["observed"]["v"] == 3.0


class Policy(torch.nn.Module):
    """A stand-in model."""

    __sentinel_standin__ = True

    def __init__(self, lp: torch.Tensor):
        super().__init__()
        self.lp = lp

    def forward(self, **kwargs: Any):
        return self.lp * SCALE


SCALE = 2.0


def helper(x):
    return x


class Unwritable:
    __sentinel_standin__ = True

    def f(self):
        return helper(1)


def test_stand_ins_are_written_out_with_what_their_code_names():
    into: dict[str, str] = {}
    write(Policy, into)
    src = into["Policy"]
    assert "from typing import Any" in src and "import torch" in src and "SCALE = 2.0" in src
    assert "class Policy(torch.nn.Module):" in src
    scope: dict[str, Any] = {}
    exec(src, scope)  # noqa: S102 - the very text validate.py gets
    w = Writer(lambda m: False)
    w.begin()
    model = Policy(torch.tensor([1.0, -1.0]))
    text = w.source({"a": model, "b": model})  # one object in, one object out
    name = text.split("'a': (", 1)[1].split(" := ", 1)[0]
    assert text.count("_new(Policy") == 1 and text.endswith(f"'b': {name}}}")
    scope.update(_new=lambda cls, attrs: (lambda o: (o.__dict__.update(attrs), o)[1])(cls.__new__(cls)), torch=torch)
    built = eval(text, scope)  # noqa: S307
    assert built["a"] is built["b"] and built["a"](x=1).tolist() == [2.0, -2.0]
    with pytest.raises(NotWritable, match="names helper"):
        write(Unwritable, {})


def test_values_the_adapters_hand_trainers_have_a_source_form():
    import argparse
    w = Writer(lambda m: m == __name__)
    w.begin()
    uids = np.array(["a", "b"], dtype=object)
    assert w.source(uids) == "(_v1 := np.array(['a', 'b'], dtype=object))"
    assert w.source(np.array([1.5, 2.0])) == "(_v2 := np.array([1.5, 2.0], dtype=np.float64))"
    assert w.source(functools.partial(helper, value=1.0)) == \
        f"functools.partial(_import({__name__!r}, 'helper'), *[], **{{'value': 1.0}})"
    assert w.source(defaultdict(list)) == "collections.defaultdict(list, {})"
    assert w.source(torch.tensor([1.0]).requires_grad_()) .endswith("requires_grad=True))")

    class Args:  # an adapter's stand-in for a trainer's argparse args (OpenRLHF's)
        __sentinel_options__ = True

        def __init__(self):
            self.gamma, self._reads = 1.0, set()
    assert w.source(Args()).endswith("argparse.Namespace(**{'gamma': 1.0}))")
    with pytest.raises(NotSource):
        w.source(argparse)  # a module has no source form


SWEEP_ROWS = [("verl", "gspo-seq-ratio-nan-masked"),  # pg_loss seen inside the call (agg_loss's loss_mat)
              ("trl", "grpo-loss-counts-masked-rows"),  # stand-ins, a shared model, a gradient
              ("areal", "areal-approx-kl-sign")]  # the stats tracker, earlier calls, a logger on stdout


@pytest.mark.slow
@pytest.mark.parametrize("target,scenario", SWEEP_ROWS)
def test_export_a_composed_finding_on_a_real_trainer(tmp_path, target, scenario):
    repo = os.environ.get(f"SENTINEL_{target.upper()}_REPO")
    if not repo:
        pytest.skip(f"SENTINEL_{target.upper()}_REPO (a {target} checkout) is not set")
    from sentinel.export.bundle import Request, export
    out = tmp_path / "bundle"
    s = export(Request(scenario, target, out, repo=repo))
    before = json.loads((out / "before.json").read_text())
    assert s["reproduced"] and before["status"] == "reproduced" and before["validate_exit"] == 1
    assert before["test"]["exit"] == 1
    if target == "trl":  # the gradient check went in, and it shows the (B - M) / B scaling
        assert before["observed"]["grad:loss/log_probs"] == [[-0.25, -0.25], [0.0, 0.0]]
