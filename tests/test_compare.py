"""compare and bisect on a small git repository built here: buggy -> unrelated -> broken
import -> fixed -> unrelated. Runs on every CI run; no real trainer needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from render_helpers import report_command

HERE = Path(__file__).parent

BUGGY = '''
import torch
VERSION = "buggy"
def opsm_mask(lp, old, adv, m, delta):
    seq_kl = ((old - lp) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
    return 1 - ((adv < 0) & (seq_kl > delta)).float()          # decided per token
'''
FIXED = '''
import torch
VERSION = "fixed"
def opsm_mask(lp, old, adv, m, delta):
    seq_kl = ((old - lp) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
    seq_adv = (adv * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
    return (1 - ((seq_adv < 0) & (seq_kl > delta)).float()).expand_as(lp)   # per sequence
'''
SCENARIO = """
id: tiny-opsm
title: OPSM decides per sequence
boundary: opsm_mask
config: {opsm_delta: 0.1}
inputs:
  log_probs:     [[0.0, 0.0, 0.0]]
  old_log_probs: [[1.0, 1.0, 1.0]]
  advantages:    [[-0.5, 0.25, -0.25]]
  loss_mask:     [[1, 1, 1]]
invariants:
  - sequence_uniform: {output: opsm_mask}
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def new_repo(repo: Path) -> Path:
    """An empty git repository (branch main, a committer set) at `repo`."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    return repo


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory) -> dict:
    repo = new_repo(tmp_path_factory.mktemp("tiny") / "trainer")
    shas = {}
    for name, files in [("buggy", {"tinytrainer.py": BUGGY}),
                        ("broken", {"tinytrainer.py": BUGGY + "\ndef (:\n"}),  # does not import: skipped
                        ("docs", {"tinytrainer.py": BUGGY, "README.md": "tiny\n"}),
                        ("fixed", {"tinytrainer.py": FIXED}), ("unrelated", {"README.md": "tiny trainer\n"})]:
        for f, text in files.items():
            (repo / f).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"{name} commit")
        shas[name] = git(repo, "rev-parse", "HEAD")
    scenario = repo.parent / "tiny.yaml"
    scenario.write_text(SCENARIO)
    return {"repo": repo, "shas": shas, "scenario": scenario}


@pytest.fixture(autouse=True)
def _worker_finds_adapter(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))


def sentinel(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sentinel.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_compare_fixed_and_untouched_checkout(tiny_repo, tmp_path):
    repo, shas = tiny_repo["repo"], tiny_repo["shas"]
    before = (git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), git(repo, "worktree", "list"))
    out = tmp_path / "cmp.json"
    p = sentinel("compare", str(tiny_repo["scenario"]), "--target", "tiny_adapter:TinyAdapter", "--repo", str(repo),
                 "--base", shas["buggy"], "--head", shas["fixed"], "-o", str(out))
    assert p.returncode == 0, p.stderr + p.stdout
    rep = json.loads(out.read_text())
    assert rep["kind"] == "compare"
    assert rep["comparisons"] == [{"id": "tiny-opsm", "verdict": "fixed", "base": "violated", "head": "holds"}]
    assert rep["targets"]["base"]["commit"] == shas["buggy"] and rep["targets"]["base"]["subject"] == "buggy commit"
    assert rep["targets"]["head"]["commit"] == shas["fixed"]
    base = next(r for r in rep["results"] if r["target"] == "base")
    assert base["observations"]["opsm_mask"] == [[0.0, 1.0, 0.0]]
    # the user's checkout, branch, index and worktree list are as before
    assert (git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), git(repo, "worktree", "list")) == before
    md = report_command(out, "--format", "markdown").stdout
    assert "fixed" in md and shas["buggy"][:10] in md and shas["fixed"][:10] in md and "sentinel compare" in md


def test_compare_regressed_exit_1(tiny_repo, tmp_path):
    shas = tiny_repo["shas"]
    p = sentinel("compare", str(tiny_repo["scenario"]), "--target", "tiny_adapter:TinyAdapter",
                 "--repo", str(tiny_repo["repo"]), "--base", shas["fixed"], "--head", shas["buggy"], "-o", "-", "--json")
    assert p.returncode == 1
    assert json.loads(p.stdout)["comparisons"][0]["verdict"] == "regressed"


def test_compare_head_worktree_with_uncommitted_fix(tiny_repo, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(tiny_repo["repo"]), str(clone)], check=True)
    git(clone, "checkout", "-q", tiny_repo["shas"]["buggy"])
    (clone / "tinytrainer.py").write_text(FIXED)  # the fix, not yet committed
    p = sentinel("compare", str(tiny_repo["scenario"]), "--target", "tiny_adapter:TinyAdapter", "--repo", str(clone),
                 "--base", "HEAD", "--head", "WORKTREE", "-o", "-", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["comparisons"][0]["verdict"] == "fixed"
    assert rep["targets"]["head"]["dirty"] is True
    assert git(clone, "status", "--porcelain") == "M tinytrainer.py"


def test_compare_broken_import_is_inconclusive(tiny_repo):
    shas = tiny_repo["shas"]
    p = sentinel("compare", str(tiny_repo["scenario"]), "--target", "tiny_adapter:TinyAdapter",
                 "--repo", str(tiny_repo["repo"]), "--base", shas["buggy"], "--head", shas["broken"], "-o", "-", "--json")
    assert p.returncode == 3 and p.stdout, p.stderr
    rep = json.loads(p.stdout)
    assert rep["comparisons"][0]["verdict"] == "inconclusive"
    assert "SyntaxError" in rep["targets"]["head"]["load_error"]["type"]


def test_unknown_revision_refused_before_work(tiny_repo):
    p = sentinel("compare", str(tiny_repo["scenario"]), "--target", "tiny_adapter:TinyAdapter",
                 "--repo", str(tiny_repo["repo"]), "--base", "no-such-rev", "--head", "HEAD")
    assert p.returncode == 2 and "unknown revision 'no-such-rev'" in p.stderr


def test_bisect_finds_fix_and_skips_broken_commit(tiny_repo, tmp_path):
    shas = tiny_repo["shas"]
    out = tmp_path / "bisect.json"
    p = sentinel("bisect", str(tiny_repo["scenario"]), "--target", "tiny_adapter:TinyAdapter",
                 "--repo", str(tiny_repo["repo"]), "--good", shas["buggy"], "--bad", shas["unrelated"], "-o", str(out))
    assert p.returncode == 0, p.stderr + p.stdout
    log = json.loads(out.read_text())
    assert log["first"]["commit"] == shas["fixed"]
    assert log["good_verdict"] == "violated" and log["bad_verdict"] == "holds"
    assert shas["fixed"] in p.stdout.replace("\n", "") and "fixed commit" in p.stdout
    skipped = [x for x in log["probes"] if x["verdict"] == "skip"]
    assert all(x["commit"] == shas["broken"] for x in skipped)


def test_bare_repository_works(tiny_repo, tmp_path):
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(tiny_repo["repo"]), str(bare)], check=True)
    p = sentinel("run", str(tiny_repo["scenario"]), "--target", "tiny_adapter:TinyAdapter", "--repo", str(bare),
                 "-o", "-", "--json")
    assert p.returncode == 0, p.stderr  # bare repo, no --commit: HEAD (the fixed trainer + unrelated)
    assert not list((bare / "worktrees").glob("*")) if (bare / "worktrees").exists() else True


def test_concurrent_checkouts_of_one_repo(tiny_repo):
    """Both sides of a compare (and two sentinel processes) add and remove worktrees of one
    repository at once; unserialised, git failed with "could not create directory of
    '.git/worktrees/...'" (a CI run lost a compare to it)."""
    import threading
    from sentinel import git as sgit
    repo, shas, failures = tiny_repo["repo"], tiny_repo["shas"], []

    def churn(rev: str) -> None:
        for _ in range(40):
            try:
                with sgit.checkout(repo, rev) as co:
                    assert (co.path / "tinytrainer.py").exists()
            except Exception as e:  # noqa: BLE001
                failures.append(repr(e))

    threads = [threading.Thread(target=churn, args=(shas[k],)) for k in ("buggy", "fixed", "buggy", "docs")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert failures == []
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main worktree is left


def test_compare_leaves_out_a_scenario_written_for_other_targets(tiny_repo, tmp_path):
    """A scenario whose `targets:` leave this target out is not run on it (runner), so compare neither
    runs nor compares it: it raised KeyError looking for its result."""
    other = tmp_path / "other.yaml"
    text = Path(tiny_repo["scenario"]).read_text()
    other.write_text(text.replace("id: ", "id: other-", 1).replace('targets: ["*"]', "targets: [trl]")
                     if 'targets: ["*"]' in text else text.replace("id: ", "targets: [trl]\nid: other-", 1))
    shas = tiny_repo["shas"]
    p = sentinel("compare", str(tiny_repo["scenario"]), str(other), "--target", "tiny_adapter:TinyAdapter",
                 "--repo", str(tiny_repo["repo"]), "--base", shas["buggy"], "--head", shas["fixed"], "-o", "-", "--json")
    assert p.returncode in (0, 1), p.stdout + p.stderr
    rep = json.loads(p.stdout)
    ids = {c["id"] for c in rep["comparisons"]}
    assert ids and not any(i.startswith("other-") for i in ids), ids
