"""Nothing left behind: SIGTERM mid-compare cleans up like Ctrl-C; after SIGKILL the workers
die with the CLI and the next command sweeps the worktrees. Checked on `git worktree list`,
the temp folder and the process table, with real processes and a real repository. The
hanging target has forked a grandchild that left its process group (setsid): it dies too.
Only our own leftovers are swept: the user's worktrees are never pruned, and Ctrl-C at any
moment of a bisect leaves `git worktree list` as it was."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from faulty_adapter import CODES

TESTS = Path(__file__).resolve().parent
SENTINEL = str(Path(sys.executable).with_name("sentinel"))
HANG = f"""id: hangs
title: the target forks a grandchild that calls setsid(), then hangs
boundary: loss_agg
inputs:
  values:    [[1.0, 2.0, 3.0, {CODES['setsid-hang']}]]
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
    (tmp_path / "pids").mkdir()
    # the checkout cache off: these tests watch the temporary worktrees it falls back to
    env = {**os.environ, "TMPDIR": str(tmp), "FAULTY_PID_DIR": str(tmp_path / "pids"),
           "SENTINEL_CHECKOUT_CACHE": "off", "SENTINEL_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
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


def _start_and_wait_for_the_hang(repo, env, cmd, worktrees: int = 3) -> tuple[subprocess.Popen, set[int]]:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    pids = Path(env["FAULTY_PID_DIR"])
    while time.monotonic() < deadline:
        wts = _git(repo, "worktree", "list").splitlines()
        # a pid file can be seen before its writer wrote it: read the written ones
        grandchildren = {int(t) for f in pids.glob("setsid-hang.*.pid") if (t := f.read_text().strip())}
        # two worktrees (none with the checkout cache), and each side's worker has forked the
        # hanging scenario's child, which has forked its grandchild (in a session of its own)
        if len(wts) == worktrees and len(grandchildren) == 2:
            time.sleep(0.5)
            return proc, _descendants(proc.pid) | grandchildren
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


@pytest.mark.slow  # two compares; test_sigterm_mid_compare_leaves_nothing stays in the default set
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
    monkeypatch.setenv("SENTINEL_CACHE_DIR", str(tmp_path / "cache"))
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


# --- only our own leftovers ---------------------------------------------------------------------

def _user_worktree_gone(repo: Path, tmp_path: Path) -> str:
    """The user's own worktree whose folder they deleted: registered, prunable, theirs."""
    own = tmp_path / "users-own-worktree"
    _git(repo, "worktree", "add", "--detach", "-q", str(own), "HEAD")
    import shutil
    shutil.rmtree(own)
    listed = _git(repo, "worktree", "list", "--porcelain")
    assert str(own) in listed and "prunable" in listed
    return listed


def _dead_run_folder(tmp: Path, repo: Path) -> Path:
    """What a SIGKILLed run leaves: a marked sentinel-wt folder whose owner is gone."""
    from sentinel import cleanup
    dead = tmp / f"{cleanup.WORKTREE_PREFIX}killed"
    dead.mkdir()
    (dead / cleanup.OWNER_FILE).write_text(f'{{"pid": 999999999, "start": "1", "repo": "{repo}"}}')
    return dead


@pytest.mark.slow  # a whole compare
def test_the_users_own_worktrees_are_never_pruned(setup, tmp_path):
    repo, tmp, env, cmd = setup
    listed = _user_worktree_gone(repo, tmp_path)
    dead = _dead_run_folder(tmp, repo)  # makes the sweep work on this repository
    (tmp_path / "ok.yaml").write_text(HANG.replace(str(CODES["setsid-hang"]), str(CODES["ok"])))
    compare = [*cmd[:2], str(tmp_path / "ok.yaml"), *cmd[3:]]
    done = subprocess.run(compare, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not dead.exists()  # the killed run's folder was swept ...
    assert _git(repo, "worktree", "list", "--porcelain") == listed  # ... and the user's worktree kept
    bisect = [SENTINEL, "bisect", str(tmp_path / "ok.yaml"), "--target", "faulty_adapter:FaultyAdapter",
              "--repo", str(repo), "--good", "HEAD~1", "--bad", "HEAD"]
    _dead_run_folder(tmp, repo)
    done = subprocess.run(bisect, env=env, capture_output=True, text=True, timeout=300)
    assert "same verdict" in done.stderr, done.stderr  # it ran, checked both out, and removed them
    assert _git(repo, "worktree", "list", "--porcelain") == listed
    assert sorted(os.listdir(tmp)) == []


def test_our_worktree_whose_folder_is_gone_is_unregistered_alone(setup, tmp_path, monkeypatch):
    from sentinel import cleanup, git
    repo, tmp, _, _ = setup
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("SENTINEL_CACHE_DIR", str(tmp / "cache"))
    monkeypatch.setattr("tempfile.tempdir", None)
    listed = _user_worktree_gone(repo, tmp_path)
    ours = _dead_run_folder(tmp, repo)
    _git(repo, "worktree", "add", "--detach", "-q", str(ours / "abc"), "HEAD")
    import shutil
    shutil.rmtree(ours / "abc")  # a registered worktree of ours whose folder is gone
    assert git.sweep_stale() == [str(ours)]
    assert _git(repo, "worktree", "list", "--porcelain") == listed


def test_an_empty_folder_a_kill_left_before_its_mark_is_swept(tmp_path, monkeypatch):
    from sentinel import cleanup, git
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("SENTINEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("tempfile.tempdir", None)
    old = tmp_path / f"{cleanup.WORKTREE_PREFIX}killed-before-mark"
    old.mkdir()
    (old / (cleanup.OWNER_FILE + ".part")).write_text('{"pid": 1')  # the mark, half written
    a_while_ago = time.time() - 2 * cleanup.YOUNG_S
    os.utime(old, (a_while_ago, a_while_ago))
    young = tmp_path / f"{cleanup.WORKTREE_PREFIX}being-made"
    young.mkdir()  # a live run that has not written its mark yet
    full = tmp_path / f"{cleanup.WORKTREE_PREFIX}unknown-content"
    full.mkdir()
    (full / "something").write_text("not ours to judge")
    os.utime(full, (a_while_ago, a_while_ago))
    assert git.sweep_stale() == [str(old)]
    assert not old.exists() and young.exists() and full.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process table")
def test_sigkill_mid_compare_with_the_checkout_cache_never_touches_the_worktree_list(setup, tmp_path):
    """With the cache on, nothing is registered in the repository at any moment: a SIGKILL
    leaves `git worktree list` as it was, and both cached trees whole and free for reuse."""
    import json
    repo, tmp, env, cmd = setup
    env = {**env, "SENTINEL_CHECKOUT_CACHE": "on"}
    before = _git(repo, "worktree", "list", "--porcelain")
    proc, kids = _start_and_wait_for_the_hang(repo, env, cmd, worktrees=1)
    assert _git(repo, "worktree", "list", "--porcelain") == before  # mid-run too
    proc.kill()
    proc.wait(timeout=10)
    assert not _wait_gone(kids), "worker processes outlived a SIGKILLed CLI"
    assert _git(repo, "worktree", "list", "--porcelain") == before
    done = subprocess.run([SENTINEL, "cache", "info", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)["entries"]
    assert {e["commit"] for e in entries} == {_git(repo, "rev-parse", r).strip() for r in ("HEAD~1", "HEAD")}
    assert not any(e["in_use"] for e in entries)  # the killed command's locks went with it
    assert not list((tmp_path / "cache").glob("sentinel-build-*"))
    assert sorted(os.listdir(tmp)) == []


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process table")
def test_ctrl_c_at_any_moment_of_a_bisect_leaves_no_worktree(tmp_path):
    """12 bisects, each interrupted 1 to 3 times at random moments (fixed seed): every one
    leaves `git worktree list`, the temp folder and the process table as they were."""
    from test_compare import BUGGY, FIXED, SCENARIO, new_repo
    repo, tmp = new_repo(tmp_path / "trainer"), tmp_path / "tmp"
    tmp.mkdir()
    for i, text in enumerate([BUGGY, BUGGY + "# 1\n", BUGGY + "# 2\n", BUGGY + "# 3\n", FIXED, FIXED + "# 5\n"]):
        (repo / "tinytrainer.py").write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"c{i}")
    (tmp_path / "tiny.yaml").write_text(SCENARIO)
    env = {**os.environ, "TMPDIR": str(tmp), "SENTINEL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    cmd = [SENTINEL, "bisect", str(tmp_path / "tiny.yaml"), "--target", "tiny_adapter:TinyAdapter", "--repo", str(repo),
           "--good", "HEAD~5", "--bad", "HEAD"]
    before = _git(repo, "worktree", "list", "--porcelain")
    rng = random.Random(22)
    for attempt in range(12):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        time.sleep(rng.uniform(0.5, 12.0))
        kids = _descendants(proc.pid)
        for _ in range(rng.randint(1, 3)):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            time.sleep(rng.uniform(0.0, 0.3))
        rc = proc.wait(timeout=60)
        stderr = proc.stderr.read()
        # -SIGINT: interrupted while Python itself was starting, before any handler existed
        assert rc in (0, 130, -signal.SIGINT), (attempt, rc, stderr[-2000:])
        assert _git(repo, "worktree", "list", "--porcelain") == before, (attempt, stderr[-2000:])
        assert sorted(os.listdir(tmp)) == [], (attempt, stderr[-2000:])
        assert not _wait_gone(kids), (attempt, "processes outlived the interrupted bisect")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process table")
def test_sigkill_mid_mutate_on_two_jobs_leaves_no_shard_running(tmp_path):
    """`sentinel mutate -j 2` runs its shards in a process pool; a SIGKILLed CLI (what a CI job's
    timeout or a parent's subprocess.run does on Ctrl-C) left the pool's processes and their
    workers judging mutants as orphans (seen: six processes of a killed slime run at 06:08)."""
    env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis")}
    cmd = [sys.executable, "-m", "sentinel", "mutate", "-t", "reference", "-b", "kl", "--budget", "5", "-j", "2",
           "--no-cache", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, kids = time.monotonic() + 120, set()
    while time.monotonic() < deadline and proc.poll() is None:
        kids = _descendants(proc.pid)
        # two pool processes, each with a worker that has forked a mutant's child
        if sum(1 for k in kids if _descendants(k)) >= 4:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "mutate ended before its shards ran"
    time.sleep(0.5)
    kids |= _descendants(proc.pid)
    proc.kill()
    proc.wait(timeout=10)
    assert not _wait_gone(kids, 15), "shard processes outlived a SIGKILLed mutate"


def test_an_interrupted_run_exits_130_whatever_outcome_a_layer_below_made_of_it(monkeypatch):
    """A Ctrl-C that reached bisect while it started a worker was read as a target that could not be
    loaded, and the run exited 2 (CI, stop 47): once interrupted, a run exits 130, as entry() promises."""
    from sentinel import cli, process

    def outcome():
        raise SystemExit(2)

    monkeypatch.setattr(cli, "app", outcome)
    for name in ("install_signal_handlers", "on_interrupt"):  # this test process keeps its own handlers
        monkeypatch.setattr(cli.cleanup, name, lambda *a: None)
    monkeypatch.setattr(cli.git, "sweep_stale", lambda: None)
    monkeypatch.setattr(process, "_stopping", threading.Event())
    with pytest.raises(SystemExit) as got:
        cli.entry()
    assert got.value.code == 2  # not interrupted: the outcome stands
    process._stopping.set()
    with pytest.raises(SystemExit) as got:
        cli.entry()
    assert got.value.code == 130
