"""Imports once: a pre-started process with torch imported forks every worker.

A worker's start was a new interpreter importing torch (~1 s idle, 3-4 s on a busy 2-core
machine) and, for some targets, heavy libraries their code imports (slime: torch._dynamo and
ray, another ~4 s), paid again by every worker: both sides of a differential hunt, each of the
hundreds of short hunts of `history --hunt` and `sentinel mutate`. The zygote (`python -m
sentinel.zygote_server`, one per CLI process, started by sentinel/launch.py before the CLI's own
imports, else on the first worker) imports torch once; asked for a worker, it imports the
target's declared libraries (`TargetInfo.preload`, sentinel/targets.py) into itself, then forks.
The fork becomes an ordinary worker (`sentinel.worker.main`): its own session, its pipes those
the CLI sent over (SCM_RIGHTS), the CLI's environment and folder of the moment. A trainer's
own modules are imported in the fork, never in the zygote: the zygote stays clean for the next
commit.

The CLI side (`fork`) returns a `Forked` that behaves as the `subprocess.Popen` of a spawned
worker (pid, pipes, poll, kill, wait): the zygote reports each fork's exit status. The zygote
ends with the CLI (it polls its parent), and its forks end with it (theirs).
`SENTINEL_ZYGOTE=off`, or no fork (Windows), spawns each worker as before.
`SENTINEL_ZYGOTE_SOCKET=PATH` asks the shared zygote listening there (`python -m
sentinel.zygote_server --listen PATH`) instead of starting one: torch imported once for many
CLI calls (a CI job, a test session); if nothing listens there, the CLI starts its own.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

MSG_BYTES = 1 << 18  # one message on the control socket, at most


def module_command(module: str, *args: str) -> list[str]:
    """`python -m module args`, with `sentinel` imported from where this CLI's own is: `-m` puts
    the current folder first on sys.path, so a CLI run in a folder holding another `sentinel`
    (a clone of this repository beside an installed release) had workers running that one's
    code. Only the `sentinel` package is pinned (imported before the current folder can shadow
    it); everything else resolves as under `python -m`, the current folder first."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    boot = ("import os, runpy, sys\n"
            # the current folder stays first, absolute, as -m has it (the zygote maps it to each CLI's)
            "if sys.path[:1] == ['']: sys.path[0] = os.getcwd()\n"
            f"sys.path.insert(0, {root!r}); import sentinel; sys.path.remove({root!r})\n"
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", boot, *args]


def enabled() -> bool:
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and \
        os.environ.get("SENTINEL_ZYGOTE", "on").lower() not in ("off", "0", "no", "false")


# --- the CLI's side ---------------------------------------------------------------------------

LOOK_S = 0.5  # how often a wait for a fork's exit checks that its pid still exists


def _exists(pid: int) -> bool:
    """The process `pid` is still there (running, or a zombie its zygote has not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid: ours is gone
        return False
    return True


class Forked:
    """A worker forked by the zygote, as `subprocess.Popen` shows a spawned one."""

    def __init__(self, pid: int, stdin, stdout, stderr):
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self.returncode: int | None = None
        self._ended = threading.Event()

    def _exited(self, status: int | None) -> None:
        if status is None:
            self.returncode = -signal.SIGKILL  # the zygote is gone, and its forks with it
        elif os.WIFSIGNALED(status):
            self.returncode = -os.WTERMSIG(status)
        else:
            self.returncode = os.WEXITSTATUS(status)
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        gone = 0
        while not self._ended.wait(LOOK_S if deadline is None else max(0.0, min(LOOK_S, deadline - time.monotonic()))):
            # the zygote reports each exit; a report that never comes must not hang the CLI (a
            # test session once waited here for ever): a pid that is gone on two looks in a row
            # (its report had time to arrive) ended unreported
            gone = gone + 1 if not _exists(self.pid) else 0
            if gone >= 2:
                self._exited(None)
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Client:
    """The zygote, seen from the CLI: started once, asked for forks from any thread."""

    def __init__(self, target: str | None = None) -> None:
        self.proc: subprocess.Popen | None = None
        self.sock = _shared()
        if self.sock is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.sock = ours
            hint = [target] if target else []  # its declared libraries imported right after torch
            self.proc = subprocess.Popen(module_command("sentinel.zygote_server", str(theirs.fileno()), *hint),
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, start_new_session=True)
            theirs.close()
        self.lock = threading.Lock()  # one fork request at a time: its answer is the next "pid"
        self.pids: list[int] = []
        self.got_pid = threading.Condition()
        self.forks: dict[int, Forked] = {}
        self.early: dict[int, int] = {}  # exits reported before the fork's handle was made
        self.alive = True
        self.owner = os.getpid()  # a forked copy of this process must start its own
        threading.Thread(target=self._read, daemon=True, name="zygote").start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(MSG_BYTES)
            except OSError:
                data = b""
            if not data:
                break
            msg = json.loads(data)
            if "pid" in msg:
                with self.got_pid:
                    self.pids.append(msg["pid"])
                    self.got_pid.notify_all()
            elif "exit" in msg:
                with self.got_pid:
                    proc = self.forks.pop(msg["exit"], None)
                    if proc is None:
                        self.early[msg["exit"]] = msg["status"]
                if proc is not None:
                    proc._exited(msg["status"])
        with self.got_pid:
            self.alive = False
            self.got_pid.notify_all()
            left, self.forks = list(self.forks.values()), {}
        for proc in left:
            proc._exited(None)

    def fork(self, preload: tuple[str, ...] = (), timeout: float = 300.0) -> Forked | None:
        """A new worker (None when the zygote is gone or silent: the caller spawns one)."""
        fds = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
        theirs = [fds[0][0], fds[1][1], fds[2][1]]
        request = {"op": "fork", "env": dict(os.environ), "cwd": os.getcwd(), "preload": list(preload)}
        try:
            with self.lock:
                with self.got_pid:
                    if not self.alive:
                        raise OSError("the zygote is gone")
                socket.send_fds(self.sock, [json.dumps(request).encode()], theirs)
                with self.got_pid:
                    if not self.got_pid.wait_for(lambda: self.pids or not self.alive, timeout) or not self.pids:
                        raise OSError("the zygote did not fork")
                    pid = self.pids.pop(0)
                    proc = Forked(pid, os.fdopen(fds[0][1], "wb"), os.fdopen(fds[1][0], "rb"),
                                  os.fdopen(fds[2][0], "rb"))
                    status = self.early.pop(pid, "alive")
                    if status == "alive":
                        self.forks[pid] = proc
            if status != "alive":
                proc._exited(status)
            return proc
        except OSError:
            for fd in (fds[0][1], fds[1][0], fds[2][0]):
                try:
                    os.close(fd)
                except OSError:
                    pass
            return None
        finally:
            for fd in theirs:
                os.close(fd)

    def close(self, wait: bool = True) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            if wait:
                self.proc.wait()


def identity() -> dict[str, str]:
    """What a shared zygote must share with a CLI to serve it: the interpreter and this package."""
    return {"prefix": os.path.realpath(sys.prefix), "sentinel": os.path.dirname(os.path.realpath(__file__))}


def _shared() -> socket.socket | None:
    """A connection to the shared zygote named by SENTINEL_ZYGOTE_SOCKET (`python -m
    sentinel.zygote_server --listen PATH`), None when unset or not listening (then our own)."""
    path = os.environ.get("SENTINEL_ZYGOTE_SOCKET")
    if not path:
        return None
    try:  # only a zygote of this interpreter and this sentinel (another venv's CLI starts its own)
        with open(path + ".json") as f:
            if json.load(f) != identity():
                return None
    except (OSError, ValueError):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


_client: Client | None = None
_client_lock = threading.Lock()


def start(target: str | None = None) -> Client | None:
    """The zygote of this process, started now if it is not yet (None when disabled). `target`:
    the command's target, whose declared libraries (`TargetInfo.preload`) the zygote imports
    right after torch, before any fork asks for them."""
    global _client
    if not enabled():
        return None
    with _client_lock:
        if _client is None or not _client.alive or _client.owner != os.getpid():
            _client = Client(target)
            # at exit, killed and not waited for: its teardown (torch's memory) is no part of the command
            atexit.register(_client.close, False)
        return _client


def reset() -> None:
    """Close this process's zygote (shared or its own): the next worker starts or connects anew,
    under the environment of that moment."""
    global _client
    with _client_lock:
        if _client is not None:
            _client.close()
        _client = None


def fork(preload: tuple[str, ...] = ()) -> Forked | None:
    client = start()
    return client.fork(preload) if client is not None else None
