"""Honest exit codes when nothing ran (sentinel/verdicts.py): a run, gate or compare where every
scenario is unsupported or excluded, or a hunt where every property is untested or stopped,
exits 5 and says so; a differential hunt whose side does not load exits 3 and names the side.

The differential and compare cases run on a small git repository built here (tests/
tiny_adapter.py's `tinytrainer.py`): a commit that does not import, then one that does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel import verdicts
from sentinel.verdicts import ExitCode

HERE = Path(__file__).parent
SENTINEL = str(Path(sys.executable).with_name("sentinel"))
TINY = "tiny_adapter:TinyAdapter"
TRAINER = '''
import torch
def opsm_mask(lp, old, adv, m, delta):
    return torch.ones_like(lp)
'''
KL_SCENARIO = """
id: tiny-has-no-kl
title: the tiny trainer has no KL boundary
boundary: kl
inputs:
  log_probs:     [[0.0, -1.0]]
  ref_log_probs: [[0.0, -0.5]]
  loss_mask:     [[1, 1]]
invariants:
  - close: {output: kl, expected: 0.0, where: loss_mask}
"""


def test_the_rule():
    assert verdicts.exit_code(["unsupported", "excluded"]) == ExitCode.NOTHING_RAN == 5
    assert verdicts.exit_code([]) == ExitCode.NOTHING_RAN  # a hunt whose properties all went untested
    assert verdicts.exit_code(["unsupported", "holds"]) == ExitCode.OK
    assert verdicts.exit_code(["unsupported", "error"]) == ExitCode.TARGET_ERROR
    assert verdicts.exit_code(["excluded", "error", "violated"]) == ExitCode.VIOLATED
    # the reference must support every catalog scenario: unsupported there is its error, not "nothing ran"
    assert verdicts.gate_exit_code(["unsupported"], "reference")[0] == ExitCode.TARGET_ERROR
    assert verdicts.gate_exit_code(["unsupported"], "slime")[0] == ExitCode.NOTHING_RAN
    c = verdicts.compare_exit_code
    assert c([("unsupported", "excluded", "inconclusive")]) == ExitCode.NOTHING_RAN
    assert c([("unsupported", "holds", "inconclusive")]) == ExitCode.TARGET_ERROR  # as before: inconclusive
    assert c([("error", "unsupported", "inconclusive")]) == ExitCode.TARGET_ERROR
    assert c([("unsupported", "unsupported", "inconclusive"), ("holds", "violated", "regressed")]) == ExitCode.VIOLATED
    assert c([("holds", "holds", "holds-both")]) == ExitCode.OK


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    """`broken` (a syntax error: the target does not load) then `fixed` (it loads)."""
    repo = tmp_path_factory.mktemp("tiny") / "trainer"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for name, text in (("broken", TRAINER + "\ndef (:\n"), ("fixed", TRAINER)):
        (repo / "tinytrainer.py").write_text(text)
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", name)
        shas[name] = git(repo, "rev-parse", "HEAD")
    (repo.parent / "kl.yaml").write_text(KL_SCENARIO)
    return {"repo": repo, "shas": shas, "scenario": repo.parent / "kl.yaml"}


def sentinel(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    env.pop("COLUMNS", None)
    return subprocess.run([SENTINEL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("broken", ["base", "head"])
def test_a_differential_hunt_whose_side_does_not_load_exits_3_and_names_it(tiny, tmp_path, broken):
    s = tiny["shas"]
    base, head = (s["broken"], s["fixed"]) if broken == "base" else (s["fixed"], s["broken"])
    p = sentinel("hunt", "--target", TINY, "--repo", str(tiny["repo"]), "--base", base, "--head", head,
                 "-b", "opsm_mask", "--time", "5", "--no-db", "-o", str(tmp_path / "h.json"), "--out", str(tmp_path / "f"),
                 cwd=tmp_path)
    assert p.returncode == 3, p.stdout + p.stderr
    assert f"{broken} {TINY}@{(base if broken == 'base' else head)[:12]} could not be loaded:" in p.stdout, p.stdout
    assert "TARGET ERROR" in p.stdout and "NOTHING FOUND" not in p.stdout


def test_compare_where_nothing_ran_on_either_side_exits_5(tiny, tmp_path):
    s = tiny["shas"]
    p = sentinel("compare", str(tiny["scenario"]), "--target", TINY, "--repo", str(tiny["repo"]),
                 "--base", s["fixed"], "--head", s["fixed"], "-o", str(tmp_path / "c.json"), cwd=tmp_path)
    assert p.returncode == 5, p.stdout + p.stderr
    assert "NOTHING RAN" in p.stdout


def test_a_hunt_that_decides_nothing_exits_5_and_says_so(tmp_path):
    """Cut off after a second, far below its minimum of examples: every property is stopped or untested."""
    p = sentinel("hunt", "-b", "kl", "--time", "1", "--min-examples", "1000000", "-n", "1000000", "--no-db",
                 "--seed", "0", "-o", "-", "--out", str(tmp_path / "f"), cwd=tmp_path)
    assert p.returncode == 5, p.stdout + p.stderr
    assert "NOTHING RAN" in p.stdout and "nothing was decided" in " ".join(p.stdout.split())
