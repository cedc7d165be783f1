"""Old commits run (issue 19, item 12), on a toy trainer repository built here:

- a commit that imports a name (or a submodule) the installed version of a heavy dependency
  no longer has loads, with that name stubbed on the real module (as a missing module would be);
- a `TypeError` raised in the adapter's own frame (a keyword the old function lacks) is an
  adapter defect naming the adapter's line, in `sentinel compare`'s report, never the
  target's error; the target's own TypeError stays the target's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_compare import git, new_repo

HERE = Path(__file__).parent

HEAVY = "VERSION = '2.0'\nclass StillHere:\n    pass\n"  # the installed heavylib: `GoneName` was removed
OLD = '''
import torch
from heavylib import GoneName, StillHere   # GoneName existed in heavylib 1.x
from heavylib.gone_module import helper    # so did this submodule

def token_mean(values, m):
    return (values * m).sum() / m.sum().clamp_min(1)
'''
NEW = '''
import torch
from heavylib import StillHere

def token_mean(values, mask):
    return (values * mask).sum() / mask.sum().clamp_min(1)
'''
BROKEN = NEW.replace("(values * mask).sum()", "(values * mask).sum(dim='tokens')")  # the target's own TypeError
SCENARIO = """
id: toy-token-mean
title: token-mean over valid tokens
boundary: loss_agg
config: {mode: token-mean}
inputs:
  values: [[1.0, 2.0, 3.0]]
  loss_mask: [[1, 1, 0]]
invariants:
  - close: {output: loss, expected: 1.5}
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("old")
    (base / "lib").mkdir()
    (base / "lib" / "heavylib").mkdir()
    (base / "lib" / "heavylib" / "__init__.py").write_text(HEAVY)
    repo = new_repo(base / "trainer")
    (repo / "oldtrainer").mkdir()
    (repo / "oldtrainer" / "__init__.py").write_text("")
    shas = {}
    for name, text in (("old", OLD), ("new", NEW), ("broken", BROKEN)):
        (repo / "oldtrainer" / "losses.py").write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", name)
        shas[name] = git(repo, "rev-parse", "HEAD")
    scenario = base / "toy.yaml"
    scenario.write_text(SCENARIO)
    return {"repo": repo, "shas": shas, "scenario": scenario, "lib": base / "lib"}


@pytest.fixture(autouse=True)
def _paths(toy, monkeypatch):
    import os
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(toy["lib"])]))


def compare(toy, out: Path, base: str, head: str) -> tuple[subprocess.CompletedProcess, dict]:
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", "compare", str(toy["scenario"]), "--target",
                        "old_commit_adapter:OldCommitAdapter", "--repo", str(toy["repo"]), "--base", toy["shas"][base],
                        "--head", toy["shas"][head], "-o", str(out)], capture_output=True, text=True)
    return p, json.loads(out.read_text())


def _result(report: dict, side: str) -> dict:
    key = next(k for k in report["targets"] if k.endswith(side) or side in k)
    return next(r for r in report["results"] if r["target"] == key)


def test_a_removed_name_of_a_heavy_dependency_is_stubbed(toy):
    from sentinel.runner import TargetSpec, run_group
    from sentinel.spec import load_paths
    group = run_group(load_paths([toy["scenario"]]), TargetSpec("old_commit_adapter:OldCommitAdapter",
                                                                 repo=str(toy["repo"]), commit=toy["shas"]["old"]))
    assert group.target.load_error is None, group.target.load_error
    assert "heavylib.GoneName" in group.target.stubs  # stubbed on the real heavylib, which stays
    assert "heavylib.gone_module" in group.target.stubs and "heavylib" not in group.target.stubs
    # the old function loads and is reached: the adapter's keyword call then fails (next test)
    assert group.results[0].verdict == "error"


def test_an_adapter_glue_type_error_is_an_adapter_defect_in_compare(toy, tmp_path):
    p, report = compare(toy, tmp_path / "c.json", "old", "new")
    comparison, = report["comparisons"]
    assert comparison["verdict"] == "inconclusive", p.stdout + p.stderr  # never `fixed` or a flip
    old = next(r for r in report["results"] if r["target"].endswith(toy["shas"]["old"][:12])
               or r["verdict"] == "error")
    info = old["exception_info"]
    assert info["type"] == "AdapterDefect", info
    assert "tests/old_commit_adapter.py:" in info["message"] and "in b_loss_agg" in info["message"]
    assert "unexpected keyword argument 'mask'" in info["message"]
    assert "AdapterDefect" in p.stdout + p.stderr


def test_the_targets_own_type_error_stays_the_targets(toy, tmp_path):
    p, report = compare(toy, tmp_path / "c.json", "new", "broken")
    broken = next(r for r in report["results"] if r["verdict"] == "error")
    assert broken["exception_info"]["type"] == "TypeError", broken["exception_info"]
