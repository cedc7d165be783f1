"""The worker process, seen from the parent: spawning it, the pre-started pool, the handle.

A worker's start is mostly `import torch` (~1 s). Where fork is possible, a worker is forked by
the zygote (sentinel/zygote.py: torch imported once per CLI process, a target's heavy libraries
once per target); the console entry (`sentinel.launch`) starts the zygote (`prestart`) before
the CLI's own imports, so it imports torch while the CLI gets ready. Without the zygote,
`prestart` spawns spare workers that a `WorkerHandle` adopts (`take`) or it spawns its own;
spares nobody took are killed at exit (`discard`).

The worker belongs to the worker, not to the target code it runs: it runs in its own session
(a target that signals its process group cannot reach the CLI), its answers are signed lines
(sentinel/channel.py), and killing it kills every process under it (sentinel/reaper.py).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import queue
import subprocess
import threading
import time
from typing import Any, Callable

from . import channel, reaper, zygote
from .errors import ChannelError, WorkerDied  # noqa: F401 - the worker exited, or gave no answer in time

START_TIMEOUT = 300.0  # the worker's own start (import torch) on a cold, busy machine
LOAD_TIMEOUT = 300.0  # importing a real trainer (and its shims) on a cold disk: --load-timeout's default

_spares: list[subprocess.Popen] = []
_live: set[subprocess.Popen] = set()  # every worker this process started and has not ended
_lock = threading.Lock()
_stopping = threading.Event()  # interrupted: start no new worker, end the running ones


def spawn_worker() -> subprocess.Popen:
    """A `sentinel.worker` child (zygote.module_command) speaking JSON lines on stdin/stdout, in a session of
    its own: target code that signals its process group (os.killpg(0, ...)) reaches the worker,
    never the CLI. The CLI forwards an interrupt itself (`stop_all`)."""
    if _stopping.is_set():
        raise WorkerDied("interrupted: no new worker is started")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(zygote.module_command("sentinel.worker"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    with _lock:
        _live.add(proc)
    return proc


def stopping() -> bool:
    """Whether this run was interrupted (`stop_all` ran)."""
    return _stopping.is_set()


def stop_all() -> None:
    """Interrupted (Ctrl-C, SIGTERM, SIGHUP): kill every live worker now, so the threads
    waiting on them return and run their cleanup (worktrees, temp files), and start no more."""
    _stopping.set()
    with _lock:
        procs = list(_live)
    for proc in procs:
        if proc.poll() is None:
            reaper.kill_tree(proc.pid)


def keep_hypothesis_home() -> None:
    """Hypothesis caches constants it collects from the code under `.hypothesis/` of the
    current folder: keep them with the tool's other state (`.sentinel/`), in this process and
    in every worker started from now on (they inherit the environment)."""
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(".sentinel", "hypothesis"))


def prestart(count: int) -> None:
    """Start the zygote now, else `count` spare workers (those nobody takes are killed at exit)."""
    if zygote.start() is not None:
        return
    _spares.extend(spawn_worker() for _ in range(count))
    atexit.register(discard)


def new_worker(target: str | None) -> subprocess.Popen | zygote.Forked:
    """A worker for `target`: forked by the zygote (its libraries imported there first), else
    a pre-started spare, else spawned."""
    if _stopping.is_set():
        raise WorkerDied("interrupted: no new worker is started")
    proc = None
    if zygote.enabled():
        from .targets import preload
        proc = zygote.fork(preload(target) if target else ())
    if proc is None:
        return take() or spawn_worker()
    with _lock:
        _live.add(proc)
    return proc


def take() -> subprocess.Popen | None:
    """A pre-started worker, each at most once (None when none is left)."""
    while True:
        with _lock:
            proc = _spares.pop() if _spares else None
        if proc is None or proc.poll() is None:
            return proc


def discard() -> None:
    """Kill every spare nobody took."""
    while (proc := take()) is not None:
        proc.kill()
        proc.wait()


class _LoadTimeout(WorkerDied):
    """The target's import or load() ran past the load timeout."""


class WorkerHandle:
    """A `sentinel.worker` child (zygote.module_command) speaking signed JSON lines (sentinel/channel.py)."""

    def __init__(self, header: dict[str, Any]):
        self.header = header
        self.key = channel.new_key()  # the worker signs its answers with it
        self.proc = new_worker(header.get("target"))
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        self.phase: str | None = None  # what the worker said it is doing while it loads the target
        self._phase_t0 = 0.0
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._err), daemon=True).start()
        self.send({**header, "key": self.key.hex()})

    @staticmethod
    def _pump(stream, sink: Callable) -> None:
        for line in stream:
            sink(line)
        if sink.__name__ == "put":
            sink(None)

    def _err(self, line: bytes) -> None:
        self.stderr.append(line.decode("utf-8", "replace"))

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise WorkerDied(self._why()) from None

    def send_all(self, msgs: list[dict[str, Any]]) -> None:
        """Queue many jobs from a thread (a full pipe must not stall the reader); a dead
        worker is noticed by `receive`."""
        def write() -> None:
            try:
                for m in msgs:
                    self.send(m)
            except WorkerDied:
                pass
        threading.Thread(target=write, daemon=True).start()

    def receive(self, timeout: float) -> dict[str, Any]:
        """The worker's next message; WorkerDied when it ends or says nothing for `timeout` s,
        ChannelError (the worker is ended) when a line on its channel is not the worker's."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next(deadline, f"the worker gave no answer within {timeout:g} s")
            if msg is not None:
                return msg

    def hello(self, load_timeout: float) -> dict[str, Any]:
        """The worker's first answer, "ready" or "load_error". Its own start (import torch) may
        take START_TIMEOUT s; the target's import and load() `load_timeout` s from when they
        began: past it the worker is ended and the answer is a load_error naming the phase."""
        start = time.monotonic()
        while True:
            if self.phase is None:
                deadline, why = start + START_TIMEOUT, f"the worker did not start within {START_TIMEOUT:g} s"
            else:
                deadline, why = self._phase_t0 + load_timeout, f"load timed out after {load_timeout:g} s {self.phase}"
            try:
                msg = self._next(deadline, why, _LoadTimeout if self.phase else WorkerDied)
            except _LoadTimeout as e:
                return {"event": "load_error", "error": {"type": "LoadTimeout", "message": str(e), "traceback": ""}}
            if msg is not None:
                return msg

    def _next(self, deadline: float, why: str, silent: type[WorkerDied] = WorkerDied) -> dict[str, Any] | None:
        """One message, or None after a phase note (recorded) that is not an answer; past the
        deadline the worker is ended and `silent(why)` raised."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self.kill()
            raise silent(why) from None
        if line is None:
            self.proc.wait(timeout=5)
            raise WorkerDied(self._why())
        try:
            msg = channel.unframe(self.key, line)
        except channel.Forged as e:
            self.kill()
            raise ChannelError(f"target {self.header.get('target')!r} wrote on the worker's channel, so no "
                               f"answer from this worker can be trusted ({e})") from None
        if msg.get("event") == "phase":
            if self.phase is None:
                self._phase_t0 = time.monotonic()  # the target's part of the load starts here
            self.phase = msg["what"]
            return None
        return msg

    def _why(self) -> str:
        rc = self.proc.poll()
        tail = "".join(self.stderr).strip().splitlines()[-5:]
        return f"the worker process exited (status {rc})" + (": " + " | ".join(tail) if tail else "")

    def kill(self) -> None:
        """End the worker and every process under it (a grandchild that left its group too)."""
        if self.proc.poll() is None:
            reaper.kill_tree(self.proc.pid)
            self.proc.kill()
            self.proc.wait()
        with _lock:
            _live.discard(self.proc)

    def close(self) -> None:
        """Every answer is in: end the worker now rather than wait for torch's interpreter
        shutdown (up to a second of a run's wall time)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.kill()
