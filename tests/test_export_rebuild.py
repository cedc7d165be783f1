"""A gradient check whose input reaches the trainer only through an argument the adapter built
(`spying.composes`: slime's loss_function takes logits packed from the log-probs): validate.py
writes the adapter's function out and rebuilds the argument from a leaf that is the drawn
input, only where the recorded argument is proven to be that function's output. A toy
trainer recorded and replayed; slime's fix row in the slow set."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from sentinel.export.codegen import Writer
from sentinel.export.generate import validate_source
from sentinel.export.record import Calls
from sentinel.export.select import _gradient

TRAINER = """
def loss(logits):
    return (logits[..., 0].log() * 2.0).sum() / logits.shape[0]
"""
ADAPTER = """
import torch
import toytrainer
from sentinel.adapters.spying import composes

SCALE = 1.0


@composes
def two_token(flat):
    return torch.stack([flat * SCALE, {rest}], dim=-1).exp()  # no column of it is the input


def go(x):
    return toytrainer.loss(two_token(x.reshape(-1)))
"""


def _gradient_check(tmp_path, rest="-flat"):
    """Record the toy adapter's call and ask for d loss / d x, as select does for a
    `gradient` invariant."""
    (tmp_path / "toytrainer.py").write_text(TRAINER)
    (tmp_path / "toyadapter.py").write_text(ADAPTER.replace("{rest}", rest))
    sys.path.insert(0, str(tmp_path))
    x = torch.tensor([[-1.0, -0.5], [-0.25, -2.0]], requires_grad=True)
    try:
        import toyadapter
        trainer, writer = str(tmp_path / "toytrainer.py"), Writer(lambda m: m == "toytrainer")
        with Calls(lambda f: f == trainer, lambda f: f == str(tmp_path / "toyadapter.py"), writer) as rec:
            out = toyadapter.go(x)
        ch = {"observable": "grad:loss/x", "kind": "gradient", "run": "base", "expected": [[1.0, 1.0], [1.0, 1.0]],
              "atol": 1e-6, "rtol": 1e-5, "where": None}
        got = _gradient(ch, "loss", "x", {"x": x.detach().numpy()}, {"outputs": {"loss": out.detach().numpy()}},
                        rec.calls, rec.live, rec.composed, writer)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toyadapter", None), sys.modules.pop("toytrainer", None)
    return got, rec


def _validate(tmp_path, rec, check):
    r = {"calls": {"base": rec.calls}, "prelude": {"stubs": [], "optional": [], "names": [], "shims": {}, "bare": []},
         "standins": rec.writer.standins, "root": str(tmp_path)}
    src = validate_source(r, [check], {"title": "t", "id": "t", "trigger": {}}, "toy", {})
    (tmp_path / "validate.py").write_text(src)
    proc = subprocess.run([sys.executable, "-I", str(tmp_path / "validate.py"), str(tmp_path)], capture_output=True,
                          text=True, cwd=tmp_path)
    return {"rc": proc.returncode, **json.loads(proc.stdout)}, src


def test_a_built_argument_is_rebuilt_from_a_leaf_and_differentiated_by_it(tmp_path):
    check, rec = _gradient_check(tmp_path)
    assert "unsupported" not in check, check  # before: "no argument of loss carries the input x as drawn"
    assert check["wrt_path"] == "BUILT['logits']['flat']" and check["layout"] == "same"
    assert check["call"]["args"]["logits"] == "two_token(**BUILT['logits'])"
    got, src = _validate(tmp_path, rec, check)
    assert "def two_token(flat):" in src and "SCALE = 1.0" in src and "@composes" not in src
    assert got["rc"] == 1 and got["observed"]["grad:loss/x"] == [[0.5, 0.5], [0.5, 0.5]], got  # 2 / tokens, not 1
    assert _validate(tmp_path, rec, {**check, "expected": [[0.5, 0.5], [0.5, 0.5]]})[0]["status"] == "fixed"


def test_an_argument_not_proven_to_be_the_functions_output_is_refused(tmp_path):
    check, _ = _gradient_check(tmp_path, rest="torch.rand_like(flat)")  # run again, it gives another tensor
    assert check["unsupported"].endswith("logits is not two_token's output on its recorded inputs"), check
    assert "call" not in check


@pytest.mark.slow
def test_slime_unclipped_gradient_fix_row(tmp_path):
    """ppo-gradient-unclipped, fixed by slime 763f18d5b: its gradient check exports (before the
    rebuild: refused, no argument carries the log-probs), reproduces at the parent and is fixed at the fix."""
    repo = os.environ.get("SENTINEL_SLIME_REPO")
    if not repo:
        pytest.skip("SENTINEL_SLIME_REPO (a slime checkout) is not set")
    from sentinel.export.bundle import Request, export
    out = tmp_path / "bundle"
    s = export(Request("ppo-gradient-unclipped", "slime", out, repo=repo, commit="763f18d5b^", fixed_at="763f18d5b"))
    assert [c["kind"] for c in s["checks"]] == ["gradient"]
    before = json.loads((out / "before.json").read_text())
    after = json.loads((out / "after.json").read_text())
    assert before["status"] == "reproduced" and before["test"]["exit"] == 1
    assert after["status"] == "fixed" and after["test"]["exit"] == 0
    got = np.asarray(before["observed"]["grad:loss/log_probs"]) * 2  # the bug halves the gradient
    assert np.allclose(got, np.asarray(before["expected"]["grad:loss/log_probs"], dtype=float), atol=1e-6)
