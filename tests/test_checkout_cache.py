"""The checkout cache (sentinel/checkouts.py): a commit's tree built once and reused, never in
the user's `git worktree list`, trimmed to its cap least recently used first (an entry in use
kept), and a damaged or half-built entry never used. Real git, a real repository built here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from test_compare import BUGGY, FIXED, SCENARIO, git, new_repo

HERE = Path(__file__).parent


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SENTINEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SENTINEL_CHECKOUT_CACHE", "on")
    monkeypatch.setenv("PYTHONPATH", str(HERE))  # the worker finds tiny_adapter
    r = new_repo(tmp_path / "trainer")
    for i, text in enumerate([BUGGY, BUGGY + "# 1\n", FIXED]):
        (r / "tinytrainer.py").write_text(text)
        git(r, "add", "-A")
        git(r, "commit", "-q", "-m", f"c{i}")
    return r


def _stats():
    from sentinel import checkouts
    return dict(checkouts.STATS)


def _delta(before: dict) -> dict:
    return {k: v - before[k] for k, v in _stats().items()}


def test_a_second_run_at_the_same_commit_reuses_the_cached_tree(repo, tmp_path):
    from sentinel import checkouts, spec
    from sentinel.runner import TargetSpec, run_group
    scenarios = spec.load_text(SCENARIO)
    listed = git(repo, "worktree", "list", "--porcelain")
    before = _stats()
    first = run_group(scenarios, TargetSpec("tiny_adapter:TinyAdapter", str(repo), "HEAD~2"))
    assert _delta(before) == {"built": 1, "reused": 0, "rebuilt": 0}
    assert git(repo, "worktree", "list", "--porcelain") == listed  # nothing registered, during or after
    second = run_group(scenarios, TargetSpec("tiny_adapter:TinyAdapter", str(repo), "HEAD~2"))
    assert _delta(before) == {"built": 1, "reused": 1, "rebuilt": 0}
    assert [r.verdict for r in first.results] == [r.verdict for r in second.results] == ["violated"]
    assert first.target.commit == second.target.commit == git(repo, "rev-parse", "HEAD~2")
    [entry] = checkouts.entries()
    assert entry.sha == first.target.commit and not entry.in_use
    assert git(entry.tree, "rev-parse", "HEAD") == entry.sha  # the tree is a checkout of that commit
    assert git(repo, "worktree", "list", "--porcelain") == listed


def test_cache_info_and_prune_on_the_command_line(repo):
    from sentinel import git as sgit
    from sentinel.cli import app
    for rev in ("HEAD~1", "HEAD"):
        with sgit.checkout(repo, rev):
            pass
    cli = CliRunner()
    info = json.loads(cli.invoke(app, ["cache", "info", "--json"]).stdout)
    assert {e["commit"] for e in info["entries"]} == {git(repo, "rev-parse", r) for r in ("HEAD~1", "HEAD")}
    assert info["bytes"] == sum(e["bytes"] for e in info["entries"]) > 0
    done = cli.invoke(app, ["cache", "prune", "--all"])
    assert done.exit_code == 0 and "removed 2 commits" in done.stdout
    assert json.loads(cli.invoke(app, ["cache", "info", "--json"]).stdout)["entries"] == []


def test_prune_respects_the_cap_least_recently_used_first_and_keeps_an_entry_in_use(repo):
    from sentinel import checkouts
    from sentinel import git as sgit
    shas = [git(repo, "rev-parse", r) for r in ("HEAD~2", "HEAD~1", "HEAD")]
    for i, rev in enumerate(shas):
        with sgit.checkout(repo, rev):
            pass
        lock = checkouts.cache_dir() / f"{checkouts.ENTRY_PREFIX}{rev}.lock"
        os.utime(lock, (1000.0 + i, 1000.0 + i))  # used in this order, oldest first
    sizes = {e.sha: e.size for e in checkouts.entries()}
    assert [e.sha for e in checkouts.entries()] == shas and all(sizes.values())
    assert checkouts.prune(sizes[shas[1]] + sizes[shas[2]]) == [shas[0]]  # the least recently used goes
    assert [e.sha for e in checkouts.entries()] == shas[1:]
    with sgit.checkout(repo, shas[1]) as co:  # in use now (and so the most recent)
        assert checkouts.prune(0) == [shas[2]]
        assert [e.sha for e in checkouts.entries()] == [shas[1]] and co.path.is_dir()
        assert checkouts.entries()[0].in_use
    assert checkouts.prune(0) == [shas[1]] and checkouts.entries() == []


@pytest.mark.parametrize("damage", ["edited", "deleted", "no-mark", "untracked-module"])
def test_a_damaged_entry_is_detected_and_rebuilt(repo, damage):
    from sentinel import checkouts, cleanup
    from sentinel import git as sgit
    with sgit.checkout(repo, "HEAD~2") as co:
        path = co.path
    module = path / "tinytrainer.py"
    if damage == "edited":
        module.write_text(FIXED)
    elif damage == "deleted":
        module.unlink()
    elif damage == "no-mark":
        (path.parent / cleanup.OWNER_FILE).unlink()
    else:
        (path / "shadow.py").write_text("x = 1\n")
    (path / "__pycache__").mkdir(exist_ok=True)  # what an import leaves: not damage
    before = _stats()
    with sgit.checkout(repo, "HEAD~2") as co:
        assert _delta(before) == {"built": 1, "reused": 0, "rebuilt": 1}
        assert (co.path / "tinytrainer.py").read_text() == BUGGY
        assert not (co.path / "shadow.py").exists()
    with sgit.checkout(repo, "HEAD~2"):
        assert _delta(before) == {"built": 1, "reused": 1, "rebuilt": 1}


def test_pycache_alone_is_not_damage(repo):
    from sentinel import git as sgit
    with sgit.checkout(repo, "HEAD") as co:
        (co.path / "__pycache__").mkdir()
        (co.path / "__pycache__" / "tinytrainer.cpython-311.pyc").write_bytes(b"\0")
    before = _stats()
    with sgit.checkout(repo, "HEAD"):
        assert _delta(before) == {"built": 0, "reused": 1, "rebuilt": 0}


def test_a_killed_build_is_never_used_and_is_swept(repo):
    """A build killed half-way leaves a marked `sentinel-build-*` folder: never taken for the
    entry (only a whole one is renamed into place), removed once its owner is gone."""
    from sentinel import checkouts, cleanup
    from sentinel import git as sgit
    sha = git(repo, "rev-parse", "HEAD")
    root = checkouts.cache_dir()
    half = root / f"{checkouts.BUILD_PREFIX}killed"
    (half / sha[:12]).mkdir(parents=True)
    (half / sha[:12] / "tinytrainer.py").write_text("half")
    (half / cleanup.OWNER_FILE).write_text(json.dumps({"pid": 999999999, "start": "1", "repo": str(repo)}))
    live = root / f"{checkouts.BUILD_PREFIX}live"
    live.mkdir()
    cleanup.mark(live, repo=str(repo))  # a build going on in a live process: left alone
    with sgit.checkout(repo, "HEAD") as co:
        assert (co.path / "tinytrainer.py").read_text() == FIXED
    assert checkouts.sweep() == [str(half)]
    assert not half.exists() and live.exists()
    assert [e.sha for e in checkouts.entries()] == [sha]


def test_the_cache_off_falls_back_to_a_temporary_worktree(repo, monkeypatch):
    from sentinel import checkouts
    from sentinel import git as sgit
    monkeypatch.setenv("SENTINEL_CHECKOUT_CACHE", "off")
    listed = git(repo, "worktree", "list", "--porcelain")
    with sgit.checkout(repo, "HEAD~1") as co:
        assert git(repo, "worktree", "list", "--porcelain") != listed  # a registered temporary worktree
        assert (co.path / "tinytrainer.py").read_text() == BUGGY + "# 1\n"
    assert git(repo, "worktree", "list", "--porcelain") == listed
    assert checkouts.entries() == []
