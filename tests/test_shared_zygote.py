"""One zygote for many CLI calls (`python -m sentinel.zygote_server --listen PATH`, found
through SENTINEL_ZYGOTE_SOCKET): a CLI's workers are forked there, torch is not imported
again, and a killed CLI's workers end with its connection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sentinel import reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process table")
SENTINEL = str(Path(sys.executable).parent / "sentinel")


def _until(what, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if got := what():
            return got
        time.sleep(0.1)
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


@pytest.fixture
def listener(tmp_path):
    path = str(tmp_path / "z.sock")
    proc = subprocess.Popen([sys.executable, "-m", "sentinel.zygote_server", "--listen", path],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, start_new_session=True)  # as conftest.py
    assert _until(lambda: os.path.exists(path)), "the shared zygote never listened"
    yield proc, path
    proc.terminate()
    assert proc.wait(30) == 0
    assert not os.path.exists(path) and not os.path.exists(path + ".json")  # nothing left behind


def test_a_cli_forks_its_workers_from_the_shared_zygote_and_a_killed_cli_leaves_none(listener, tmp_path):
    zyg, path = listener
    env = {**os.environ, "SENTINEL_ZYGOTE_SOCKET": path}
    cli = subprocess.Popen([SENTINEL, "hunt", "--time", "120", "-n", "1000000", "--seed", "0", "-o",
                            str(tmp_path / "h.json")], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        # the worker: under the listener (its connection's zygote forked it), not under the CLI
        workers = _until(lambda: [p for p in reaper.descendants(zyg.pid) if _ppid(p) != zyg.pid])
        assert workers, "no worker was forked by the shared zygote"
        assert not [p for p in reaper.descendants(cli.pid) if "zygote_server" in _cmdline(p)], \
            "the CLI started a zygote of its own"
    finally:
        cli.send_signal(signal.SIGKILL)
        cli.wait(30)
    assert _until(lambda: not reaper.descendants(zyg.pid), 30), "workers outlived a SIGKILLed CLI"
    assert zyg.poll() is None  # the listener serves on


def test_the_shared_zygote_serves_one_cli_after_another(listener, tmp_path):
    _, path = listener
    env = {**os.environ, "SENTINEL_ZYGOTE_SOCKET": path}
    for i in range(2):
        r = subprocess.run([SENTINEL, "gate", "-o", str(tmp_path / f"g{i}.json")], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert json.loads((tmp_path / f"g{i}.json").read_text())["statistics"]["holds"] >= 40


def test_a_zygote_of_another_interpreter_or_package_is_not_used(listener, tmp_path):
    zyg, path = listener
    Path(path + ".json").write_text(json.dumps({"prefix": "/elsewhere", "sentinel": "/elsewhere/sentinel"}))
    env = {**os.environ, "SENTINEL_ZYGOTE_SOCKET": path}
    cli = subprocess.Popen([SENTINEL, "hunt", "--time", "120", "-n", "1000000", "--seed", "0", "-o",
                            str(tmp_path / "h.json")], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        assert _until(lambda: [p for p in reaper.descendants(cli.pid) if "zygote_server" in _cmdline(p)]), \
            "the CLI did not start its own zygote"
        assert not reaper.descendants(zyg.pid)
    finally:
        cli.send_signal(signal.SIGKILL)
        cli.wait(30)


@pytest.mark.parametrize("target, why", [("faulty_adapter:SignalGroupAtLoadAdapter", "status -15"),
                                         ("faulty_adapter:KillGroupAtLoadAdapter", "status -9")])
def test_a_worker_of_the_shared_zygote_dies_of_the_signals_its_own_would(listener, tmp_path, target, why):
    """The listener's own SIGTERM handler (it removes its socket) must not reach the workers."""
    from test_faults import TESTS, scenario
    _, path = listener
    (tmp_path / "s.yaml").write_text(scenario("ok"))
    env = {**os.environ, "SENTINEL_ZYGOTE_SOCKET": path,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([SENTINEL, "run", str(tmp_path / "s.yaml"), "--target", target, "--timeout", "20", "-o",
                           str(tmp_path / "r.json")], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, start_new_session=True)
    assert done.returncode == 3, done.stderr[-3000:]
    (result,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert result["verdict"] == "error" and why in result["reason"], result["reason"]
