"""The worker process, seen from the parent: spawning it, the pre-started pool, the handle.

A worker's start is mostly `import torch` (~1 s). The console entry (`sentinel.launch`)
pre-starts workers (`prestart`) before the CLI's own imports, so the worker imports torch
while the CLI gets ready; a `WorkerHandle` adopts one (`take`) or spawns its own. Spares
nobody took are killed at exit (`discard`).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import queue
import subprocess
import sys
import threading
from typing import Any, Callable

from .errors import WorkerDied  # noqa: F401 - the worker exited, or gave no answer in time

_spares: list[subprocess.Popen] = []
_live: set[subprocess.Popen] = set()  # every worker this process started and has not ended
_lock = threading.Lock()
_stopping = threading.Event()  # interrupted: start no new worker, end the running ones


def spawn_worker() -> subprocess.Popen:
    """A `python -m sentinel.worker` child speaking JSON lines on stdin/stdout."""
    if _stopping.is_set():
        raise WorkerDied("interrupted: no new worker is started")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "sentinel.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
    with _lock:
        _live.add(proc)
    return proc


def stop_all() -> None:
    """Interrupted (Ctrl-C, SIGTERM, SIGHUP): kill every live worker now, so the threads
    waiting on them return and run their cleanup (worktrees, temp files), and start no more."""
    _stopping.set()
    with _lock:
        procs = list(_live)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()


def keep_hypothesis_home() -> None:
    """Hypothesis caches constants it collects from the code under `.hypothesis/` of the
    current folder: keep them with the tool's other state (`.sentinel/`), in this process and
    in every worker started from now on (they inherit the environment)."""
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(".sentinel", "hypothesis"))


def prestart(count: int) -> None:
    """Start `count` spare workers now; those nobody takes are killed at exit."""
    _spares.extend(spawn_worker() for _ in range(count))
    atexit.register(discard)


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


class WorkerHandle:
    """A `python -m sentinel.worker` child speaking JSON lines."""

    def __init__(self, header: dict[str, Any]):
        self.header = header
        self.proc = take() or spawn_worker()  # the console script may have started one
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self.send(header)

    @staticmethod
    def _pump(stream, sink: Callable) -> None:
        for line in stream:
            sink(line)
        if sink.__name__ == "put":
            sink(None)

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
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
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise WorkerDied(f"the worker gave no answer within {timeout:g} s") from None
        if line is None:
            self.proc.wait(timeout=5)
            raise WorkerDied(self._why())
        return json.loads(line)

    def _why(self) -> str:
        rc = self.proc.poll()
        tail = "".join(self.stderr).strip().splitlines()[-5:]
        return f"the worker process exited (status {rc})" + (": " + " | ".join(tail) if tail else "")

    def kill(self) -> None:
        if self.proc.poll() is None:
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
