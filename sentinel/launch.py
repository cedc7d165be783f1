"""Console entry point: for commands that run targets, start the worker process first.

A worker's start is mostly `import torch` (~1 s); the CLI's own imports and scenario
loading take ~0.5 s more. Started before them, the worker imports torch while the CLI gets
ready, and `runner.WorkerHandle` adopts it (`take`). Commands that never start a
worker (list, report, schema, --help) spawn nothing.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading

# how many workers each command starts at once (compare: base and head side by side)
WORKER_COMMANDS = {"run": 1, "gate": 1, "compare": 2, "bisect": 1, "matrix": 1, "hunt": 1}
_spares: list[subprocess.Popen] = []
_lock = threading.Lock()


def spawn_worker() -> subprocess.Popen:
    """A `python -m sentinel.worker` child speaking JSON lines on stdin/stdout."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "sentinel.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1)


def take() -> subprocess.Popen | None:
    """A pre-started worker, each at most once (None when none is left)."""
    while True:
        with _lock:
            proc = _spares.pop() if _spares else None
        if proc is None or proc.poll() is None:
            return proc


def _discard() -> None:
    while (proc := take()) is not None:
        proc.kill()
        proc.wait()


def entry() -> None:
    args = sys.argv[1:]
    if args and args[0] in WORKER_COMMANDS and "--help" not in args:
        _spares.extend(spawn_worker() for _ in range(min(WORKER_COMMANDS[args[0]], os.cpu_count() or 1)))
        atexit.register(_discard)
    from .cli import entry as cli_entry
    cli_entry()
