"""Nothing left behind: SIGTERM mid-compare cleans up like Ctrl-C; after SIGKILL the workers
die with the CLI and the next command sweeps the worktrees. Checked on `git worktree list`,
the temp folder and the process table, with real processes and a real repository."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faulty_adapter import CODES

TESTS = Path(__file__).resolve().parent
SENTINEL = str(Path(sys.executable).with_name("sentinel"))
HANG = f"""id: hangs
title: the target hangs
boundary: loss_agg
inputs:
  values:    [[1.0, 2.0, 3.0, {CODES['hang']}]]
  loss_mask: [[1, 1, 1, 0]]
invariants:
  - close: {{output: loss, expected: 2.0}}
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def setup(tmp_path):
    repo, tmp = tmp_path / "repo", tmp_path / "tmp"
    repo.mkdir()
    tmp.mkdir()
    _git(repo, "init", "-q")
    for i in range(2):
        (repo / "f.txt").write_text(str(i))
        _git(repo, "add", "f.txt")
        _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", f"c{i}")
    (tmp_path / "hang.yaml").write_text(HANG)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    cmd = [SENTINEL, "compare", str(tmp_path / "hang.yaml"), "--target", "faulty_adapter:FaultyAdapter",
           "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--timeout", "120", "-o", str(tmp_path / "r.json")]
    return repo, tmp, env, cmd


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(p)
    return out


def _start_and_wait_for_the_hang(repo, env, cmd) -> tuple[subprocess.Popen, set[int]]:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        wts = _git(repo, "worktree", "list").splitlines()
        kids = _descendants(proc.pid)
        # two worktrees, and each side's worker has forked the hanging scenario's child
        if len(wts) == 3 and len(kids) >= 4:
            time.sleep(0.5)
            return proc, _descendants(proc.pid)
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"the compare never reached its hanging scenario: {proc.stderr.read() if proc.poll() is not None else ''}")


def _wait_gone(pids: set[int], seconds: float = 10.0) -> set[int]:
    deadline = time.monotonic() + seconds
    while (left := _alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process table")
def test_sigterm_mid_compare_leaves_nothing(setup):
    repo, tmp, env, cmd = setup
    before = _git(repo, "worktree", "list")
    proc, kids = _start_and_wait_for_the_hang(repo, env, cmd)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130, proc.stderr.read()
    assert not _wait_gone(kids), "worker processes outlived the CLI"
    assert _git(repo, "worktree", "list") == before
    assert sorted(os.listdir(tmp)) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process table")
def test_sigkill_mid_compare_then_the_next_command_sweeps(setup):
    repo, tmp, env, cmd = setup
    before = _git(repo, "worktree", "list")
    proc, kids = _start_and_wait_for_the_hang(repo, env, cmd)
    proc.kill()
    proc.wait(timeout=10)
    assert not _wait_gone(kids), "worker processes outlived a SIGKILLed CLI"
    assert _git(repo, "worktree", "list") != before  # what a SIGKILL cannot clean up ...
    done = subprocess.run([SENTINEL, "list", "targets"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _git(repo, "worktree", "list") == before  # ... the next command does
    assert sorted(os.listdir(tmp)) == []


def test_the_sweep_leaves_a_live_runs_worktrees_alone(tmp_path, monkeypatch):
    from sentinel import cleanup, git
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    live = tmp_path / f"{cleanup.WORKTREE_PREFIX}live"
    live.mkdir()
    cleanup.mark(live, repo=str(tmp_path))  # this process: alive
    unmarked = tmp_path / f"{cleanup.WORKTREE_PREFIX}unmarked"
    unmarked.mkdir()  # not provably ours
    dead = tmp_path / f"{cleanup.WORKTREE_PREFIX}dead"
    dead.mkdir()
    (dead / cleanup.OWNER_FILE).write_text('{"pid": 999999999, "start": "1", "repo": "/nonexistent"}')
    assert git.sweep_stale() == [str(dead)]
    assert live.exists() and unmarked.exists() and not dead.exists()
