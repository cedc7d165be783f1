"""Deviations tied to the code they excuse (issue 19, item 10; sentinel/adapters/excuses.py):
a declared deviation names the function it excuses and the hash of its body as read; at a
commit where that body differs (or outside its commit range) it does not apply, and a
difference it explained before is reported as a finding that says why it was skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deviation_adapter import AGG_HASH, V1_HASH
from sentinel import hunt as H
from sentinel.adapters import excuses
from sentinel.adapters.contract import Adapter, deviation
from sentinel.runner import TargetSpec
from test_compare import git, new_repo
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS, HUNT

HERE = Path(__file__).parent
V1 = '''import torch


def k1(log_probs, ref_log_probs):
    # the toy's convention: scaled by 1.5
    return 1.5 * (log_probs - ref_log_probs)
'''
# the same convention with another comment and a blank line: the hash stays
V1_REWORDED = V1.replace("# the toy's convention: scaled by 1.5", "# scaled, on purpose\n")
# the same math written another way: a change of code, the author has not read it
V2 = V1.replace("return 1.5 * (log_probs - ref_log_probs)", "d = log_probs - ref_log_probs\n    return 1.5 * d")
AGG = '''import torch


def token_mean(values, mask):
    # the toy's convention: half the token mean
    m = mask.bool()
    return 0.5 * torch.where(m, values, torch.zeros_like(values)).sum() / m.sum().clamp_min(1)
'''
AGG_V2 = AGG.replace("m.sum().clamp_min(1)", "m.sum().clamp(min=1)")


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict:
    repo = new_repo(tmp_path_factory.mktemp("dev") / "trainer")
    (repo / "devtoy").mkdir()
    (repo / "devtoy" / "__init__.py").write_text("from .kl import k1 as scaled_k1\n")
    shas = {}
    for name, text, agg in (("v1", V1, AGG), ("reworded", V1_REWORDED, AGG), ("v2", V2, AGG_V2)):
        (repo / "devtoy" / "kl.py").write_text(text)
        (repo / "devtoy" / "agg.py").write_text(agg)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", name)
        shas[name] = git(repo, "rev-parse", "HEAD")
    return {"repo": repo, "shas": shas}


@pytest.fixture(autouse=True)
def _toy_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))


def _at(toy, name: str, tmp_path: Path) -> Path:
    """A plain copy of the toy's tree at commit `name` (for the hash, which reads files)."""
    out = tmp_path / name
    (out / "devtoy").mkdir(parents=True)
    for f in ("__init__.py", "kl.py", "agg.py"):
        (out / "devtoy" / f).write_text(git(toy["repo"], "show", f"{toy['shas'][name]}:devtoy/{f}") + "\n")
    return out


def test_the_hash_keeps_comments_and_blank_lines_and_moves_with_code(toy, tmp_path):
    v1, reworded, v2 = (_at(toy, n, tmp_path) for n in ("v1", "reworded", "v2"))
    assert excuses.current_hash("devtoy.kl:k1", [v1]) == V1_HASH  # what the toy adapter declares
    assert excuses.current_hash("devtoy.kl:k1", [reworded]) == V1_HASH
    assert excuses.current_hash("devtoy.kl:k1", [v2]) not in (None, V1_HASH)
    # a name the package re-exports is followed to its def
    assert excuses.current_hash("devtoy:scaled_k1", [v1]) == V1_HASH
    assert excuses.current_hash("devtoy.kl:gone", [v1]) is None
    assert excuses.current_hash("devtoy.agg:token_mean", [v1]) == AGG_HASH
    assert excuses.current_hash("devtoy.agg:token_mean", [v2]) != AGG_HASH


def test_standing_by_body_and_by_commit_range(toy, tmp_path):
    repo, shas = toy["repo"], toy["shas"]
    v1, v2 = _at(toy, "v1", tmp_path), _at(toy, "v2", tmp_path)
    assert excuses.standing("devtoy.kl:k1", (V1_HASH,), (), [v1], None)["applies"]
    st = excuses.standing("devtoy.kl:k1", (V1_HASH,), (), [v2], None)
    assert not st["applies"] and st["skipped"].startswith("the body of devtoy.kl:k1 changed") and st["hash_now"] in st["skipped"]
    assert "not found" in excuses.standing("devtoy.kl:gone", (V1_HASH,), (), [v1], None)["skipped"]
    # a commit range [v1, v2): the repository's HEAD is v2, outside; its first commit is v1
    assert excuses.standing("", (), (shas["v1"],), [], repo)["applies"]
    st = excuses.standing("", (), (shas["v1"], shas["v2"]), [], repo)
    assert not st["applies"] and "at or after" in st["skipped"]
    st = excuses.standing("", (), (shas["v2"] + "^",), [], repo)
    assert st["applies"]
    assert "unknown" in excuses.standing("", (), ("0" * 40,), [], repo)["skipped"]


def test_a_bad_tie_is_refused_when_the_adapter_is_defined():
    with pytest.raises(TypeError, match="a body hash needs the source"):
        type("Bad", (Adapter,), {"deviations": {"x": deviation("kl", reason="r", link="l", body="abc")}})
    with pytest.raises(TypeError, match="module:qualname"):
        type("Bad", (Adapter,), {"deviations": {"x": deviation("kl", reason="r", link="l", source="devtoy.kl.k1")}})


def _hunt(toy, name: str, tmp_path: Path):
    return H.differential(TargetSpec("reference"), TargetSpec("deviation_adapter:DeviationToy", repo=str(toy["repo"]),
                                                              commit=toy["shas"][name]),
                          ["kl"], DIFFERENTIAL_SECONDS, 0, against=True, out_dir=tmp_path / name, first=True,
                          max_examples=150, **DIFFERENTIAL)


def test_excused_at_the_body_it_was_read_at_reported_after_it_changed(toy, tmp_path):
    rep = _hunt(toy, "reworded", tmp_path)  # a comment changed: still the body the author read
    dev = next(d for d in rep.hunt.deviations if d.name == "scaled-k1")
    assert dev.applies and dev.met > 0 and dev.hash_now == V1_HASH
    assert rep.hunt.findings == []
    rep = _hunt(toy, "v2", tmp_path)  # the body changed: the deviation no longer explains the difference
    dev = next(d for d in rep.hunt.deviations if d.name == "scaled-k1")
    assert not dev.applies and dev.met == 0 and dev.hash_now != V1_HASH
    assert dev.skipped.startswith("the body of devtoy.kl:k1 changed")
    f, = rep.hunt.findings
    assert f.signature.observable in ("kl", "grad:kl/log_probs", "grad:kl/ref_log_probs") and "declared deviation 'scaled-k1' is skipped here: the body of devtoy.kl:k1" in f.message


def _single(toy, name: str, tmp_path: Path):
    return H.hunt(TargetSpec("deviation_adapter:DeviationToy", repo=str(toy["repo"]), commit=toy["shas"][name]),
                  names=["loss_agg.mode.token-mean"], seed=0, db=None, out_dir=tmp_path / name, first=True,
                  max_examples=150, **HUNT)


def test_a_single_target_hunt_skips_it_too(toy, tmp_path):
    # the formula property `close` meets the halved token-mean: a deviation where its body is as read
    rep = _single(toy, "v1", tmp_path)
    dev = next(d for d in rep.hunt.deviations if d.name == "half-token-mean")
    assert dev.applies and dev.met > 0 and rep.hunt.findings == []
    rep = _single(toy, "v2", tmp_path)
    dev = next(d for d in rep.hunt.deviations if d.name == "half-token-mean")
    assert not dev.applies and dev.skipped.startswith("the body of devtoy.agg:token_mean changed")
    f, = rep.hunt.findings
    assert "declared deviation 'half-token-mean' is skipped here: the body of devtoy.agg:token_mean" in f.message


def test_list_boundaries_prints_the_hash_at_the_checkout(toy, tmp_path):
    env = {**os.environ, "COLUMNS": "400"}
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", "list", "boundaries", "--target",
                        "deviation_adapter:DeviationToy", "--repo", str(_at(toy, "v2", tmp_path))],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if "scaled-k1" in line)
    now = excuses.current_hash("devtoy.kl:k1", [_at(toy, "v2", tmp_path / "again")])
    assert V1_HASH in row and now in row and "no: the body of devtoy.kl:k1 changed" in row
