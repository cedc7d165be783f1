"""Imports once (sentinel/zygote.py): workers are forked by one process that imported torch;
a trainer's modules are imported in each fork, never in the zygote, so the next commit's
worker sees its own code; the CLI's environment of the moment reaches the fork."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from test_compare import BUGGY, FIXED, SCENARIO, git, new_repo

HERE = Path(__file__).parent
RECORD = '''
import os
with open(os.environ["TINY_IMPORTED_BY"], "a") as _f:  # who imported the trainer: pid and parent
    _f.write(f"{os.getpid()} {os.getppid()} {os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK')}\\n")
'''

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")


def test_each_commit_is_imported_in_a_fork_of_the_zygote_never_in_it(tmp_path, monkeypatch):
    from sentinel import process, spec, zygote
    from sentinel.runner import TargetSpec, run_group
    monkeypatch.setenv("SENTINEL_ZYGOTE", "on")
    monkeypatch.setenv("SENTINEL_CACHE_DIR", str(tmp_path / "cache"))
    record = tmp_path / "imported-by.txt"
    repo = new_repo(tmp_path / "trainer")
    for text in (BUGGY, FIXED):
        (repo / "tinytrainer.py").write_text(RECORD + text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "c")
    client = zygote.start()
    # set after the zygote started: the fork must still get them (and find tiny_adapter)
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    monkeypatch.setenv("TINY_IMPORTED_BY", str(record))
    # the CLI's environment need not carry the worker's CUDA rule: the fork must set it again (a
    # worker that initialised CUDA made every CUDA scenario fail: "Cannot re-initialize CUDA")
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    scenarios = spec.load_text(SCENARIO)
    verdicts = [run_group(scenarios, TargetSpec("tiny_adapter:TinyAdapter", str(repo), rev)).results[0].verdict
                for rev in ("HEAD~1", "HEAD", "HEAD~1")]
    assert verdicts == ["violated", "holds", "violated"]  # each worker has its commit's code, none stale
    lines = [line.split() for line in record.read_text().splitlines()]
    assert [nvml for *_, nvml in lines] == ["1", "1", "1"]
    importers = [(int(pid), int(parent)) for pid, parent, _ in lines]
    assert len(importers) == 3
    assert all(parent == client.proc.pid for _, parent in importers)  # forked by the zygote ...
    assert client.proc.pid not in {pid for pid, _ in importers}  # ... which never imported the trainer
    assert client.alive and client.proc.poll() is None  # one zygote served the three
    assert not process._live or all(p.poll() is not None for p in process._live)


def test_a_worker_the_zygote_forked_reports_its_exit(tmp_path, monkeypatch):
    from sentinel import process, zygote
    monkeypatch.setenv("SENTINEL_ZYGOTE", "on")
    handle = process.WorkerHandle({"target": "reference", "root": None, "device": "cpu", "timeout": 10, "options": {}})
    try:
        assert isinstance(handle.proc, zygote.Forked)
        assert handle.receive(120)["event"] == "ready"
        assert handle.proc.poll() is None
    finally:
        handle.kill()
    assert handle.proc.wait(10) == -9


def test_the_zygote_off_spawns_workers(monkeypatch):
    from sentinel import process
    monkeypatch.setenv("SENTINEL_ZYGOTE", "off")
    handle = process.WorkerHandle({"target": "reference", "root": None, "device": "cpu", "timeout": 10, "options": {}})
    try:
        assert not hasattr(handle.proc, "_exited") and handle.receive(120)["event"] == "ready"
    finally:
        handle.close()


@pytest.mark.parametrize("args, target", [
    (["gate", "--target", "slime", "--repo", "x"], "slime"), (["hunt", "-t", "verl"], "verl"),
    (["run", "--target=areal"], "areal"), (["gate"], None), (["run", "--target"], None),
    (["hunt", "--target", "verl", "-t", "trl"], "trl"), (["gate", "-tverl"], "verl"),
    (["matrix", "-t", "verl=/r@v1"], "verl")])
def test_the_command_line_names_the_target_before_the_cli_parses_it(args, target):
    from sentinel.launch import target_named
    assert target_named(args) == target


def test_the_zygote_imports_the_named_targets_libraries_before_any_fork():
    """slime declares torch._dynamo (seconds of import): the zygote started for `--target slime`
    has it before the first fork asks (sentinel/launch.py starts it before the CLI's imports)."""
    import subprocess
    import sys
    probe = ("import sys; from sentinel import zygote_server as z; z._ready(sys.argv[1:]); "
             "print('torch._dynamo' in sys.modules)")
    seen = [subprocess.run([sys.executable, "-c", probe, *t], capture_output=True, text=True, check=True).stdout.split()
            for t in ([], ["slime"], ["no-such-target"])]
    assert seen == [["False"], ["True"], ["False"]]


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads the zygote's command line from /proc")
def test_a_client_for_a_target_starts_its_zygote_with_the_name(monkeypatch):
    from sentinel import zygote
    monkeypatch.setenv("SENTINEL_ZYGOTE", "on")
    monkeypatch.delenv("SENTINEL_ZYGOTE_SOCKET", raising=False)
    client = zygote.Client("slime")
    try:
        # Popen returns once the exec has closed its close-on-exec pipe; the new program's arguments
        # are laid out a moment later, and a loaded machine reads an empty cmdline in between (CI, stop 47)
        deadline = time.monotonic() + 10
        while not (raw := Path(f"/proc/{client.proc.pid}/cmdline").read_bytes()) and time.monotonic() < deadline:
            time.sleep(0.01)
        argv = raw.rstrip(b"\0").split(b"\0")
        assert argv[-1] == b"slime"
    finally:
        client.close()


def test_a_fork_whose_exit_report_never_comes_does_not_hang_its_waiter():
    """The zygote reports each fork's exit; a test session once waited for ever on one whose report
    never came (its zygote had reaped it). A pid that is gone ends the wait, as a kill."""
    import subprocess
    from sentinel.zygote import Forked
    p = subprocess.Popen(["true"])
    p.wait()  # reaped here: no zygote will ever report it
    f = Forked(p.pid, None, None, None)
    assert f.wait(timeout=60) == -9 and f.poll() == -9  # before: TimeoutExpired (the event never set)
    assert Forked(p.pid, None, None, None).wait() == -9  # no timeout: ended by the looks, not for ever
    alive = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):  # a fork that still runs is still waited for
            Forked(alive.pid, None, None, None).wait(timeout=1.2)
    finally:
        alive.kill()
        alive.wait()
