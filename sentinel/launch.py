"""Console entry point: for commands that run targets, start the worker process first.

A worker's start is mostly `import torch` (~1 s); the CLI's own imports and scenario
loading take ~0.5 s more. Started before them, the worker imports torch while the CLI gets
ready, and the first `runner.WorkerHandle` adopts it (`take`). Commands that never start a
worker (list, report, schema, --help) spawn nothing.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading

WORKER_COMMANDS = frozenset({"run", "gate", "compare", "bisect", "matrix", "hunt"})
_spare: subprocess.Popen | None = None
_lock = threading.Lock()


def spawn_worker() -> subprocess.Popen:
    """A `python -m sentinel.worker` child speaking JSON lines on stdin/stdout."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "sentinel.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1)


def take() -> subprocess.Popen | None:
    """The pre-started worker, at most once per process (None if there is none)."""
    global _spare
    with _lock:
        proc, _spare = _spare, None
    return proc if proc is not None and proc.poll() is None else None


def _discard() -> None:
    proc = take()
    if proc is not None:
        proc.kill()
        proc.wait()


def entry() -> None:
    global _spare
    args = sys.argv[1:]
    if args and args[0] in WORKER_COMMANDS and "--help" not in args:
        _spare = spawn_worker()
        atexit.register(_discard)
    from .cli import entry as cli_entry
    cli_entry()
