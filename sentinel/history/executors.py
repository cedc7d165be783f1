"""Where tasks run: one interface, two engines.

- `local` (default): this machine, `-j N` at a time. A history task runs in a thread of the
  CLI: its work is its worker's (forked by the CLI's one zygote: torch and the target's
  libraries imported once per scan, not once per pool process); the CLI only checks out and
  judges answers. Any other task (`sentinel mutate`'s shards, whose hunt driver is CPU work of
  its own) runs in a process pool.
- `ray`: each task is a Ray task; `RAY_ADDRESS` (Ray's own variable) selects a running
  cluster, otherwise a local one starts in-process. The repository path must exist on every
  node (a shared file system, or the same checkout path): a task checks its commit out there.

Both answer `submit(task) -> concurrent.futures.Future` whose result is the task's JSON
(sentinel/history/task.py); scheduling, retries and transport are the engine's own.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from abc import ABC, abstractmethod
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import connection
from typing import Any, Callable

from .. import reaper
from ..errors import UsageError
from .task import Task, evaluate

RAY_HINT = "pip install 'rl-sentinel[ray]'"
STOP_GRACE_S = 10.0  # an interrupted pool process's time to clean up (its workers, worktrees) before it is killed


class Executor(ABC):
    """Runs tasks, `jobs` at a time at most on this machine's share."""

    name: str = ""

    def __init__(self, jobs: int):
        self.jobs = max(1, jobs)

    @abstractmethod
    def submit(self, task: Task, fn: Callable[[Any], str] = evaluate) -> "Future[str]":
        """Start `fn(task)` (a history task by default; `sentinel mutate` sends its shards);
        the future's result is its JSON answer."""

    def close(self, abandon: bool = False) -> None:
        """Release what the executor started (its processes, a Ray instance it began). `abandon`:
        an interrupt or an error is on its way up, so running tasks are stopped, not awaited."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(abandon=exc_type is not None)


# tasks whose work runs in worker processes: a thread of the CLI drives each
DRIVERS = (evaluate,)


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, jobs: int):
        super().__init__(jobs)
        self._threads = ThreadPoolExecutor(self.jobs, thread_name_prefix="task")
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, task: Task, fn: Callable[[Any], str] = evaluate) -> "Future[str]":
        if fn in DRIVERS:
            return self._threads.submit(fn, task)
        if self._pool is None:
            # spawn: a fresh interpreter per pool process, nothing inherited from the CLI's threads;
            # each ends with its workers once the CLI is gone (a SIGKILL runs no clean-up)
            self._pool = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_pool_process)
        return self._pool.submit(_pool_task, fn, task)

    def close(self, abandon: bool = False) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not abandon:
            pool.shutdown(wait=True, cancel_futures=True)
            return
        # a pool task runs a whole shard: waiting for it would outlast the interrupt by minutes.
        # shutdown(wait=False) forgets its manager thread: kept here, joined once the processes are gone
        procs = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        _stop(procs)
        if manager is not None:
            manager.join(STOP_GRACE_S)


_busy = False  # a pool process: inside a task (an interrupt runs its clean-up) or idle (it just ends)


def _pool_task(fn: Callable[[Any], str], task: Any) -> str:
    """A task in a pool process; after an interrupt the task queued next to it (one is, past what
    cancel_futures reaches) starts no work."""
    global _busy
    from .. import process
    if process.stopping():
        raise KeyboardInterrupt("interrupted: the task was not started")
    _busy = True
    try:
        return fn(task)
    finally:
        _busy = False


def _pool_process() -> None:
    """A pool process's start: it ends with its workers once the CLI is gone (a SIGKILL runs no
    clean-up), and an interrupt (SIGTERM from `close`, Ctrl-C's SIGINT) runs the CLI's own clean-up
    in a task: its workers killed, its `finally` blocks (worktrees, temporary files) run. An idle
    process ends quietly (raised there, the interrupt would print a traceback from the pool's loop)."""
    from .. import cleanup, process
    reaper.watch_parent()
    cleanup.install_signal_handlers()
    cleanup.on_interrupt(process.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM):
        busy_handler = signal.getsignal(sig)

        def handler(signum, frame, busy_handler=busy_handler):
            if not _busy:
                os._exit(0)
            busy_handler(signum, frame)
        signal.signal(sig, handler)


def _stop(procs: list[Any]) -> None:
    """Interrupt each pool process still running, then kill with its descendants any still running
    STOP_GRACE_S later. One that has ended is never signalled: the pool may have reaped it, and its
    pid may be another process's by now."""
    running = {p.sentinel: p for p in procs if p.pid is not None}
    for ended in connection.wait(list(running), 0):
        running.pop(ended)
    for p in running.values():
        try:
            os.kill(p.pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while running and (left := deadline - time.monotonic()) > 0:
        for ended in connection.wait(list(running), left):  # a sentinel is ready once its process ended
            running.pop(ended)
    for p in running.values():
        reaper.kill_tree(p.pid)


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, jobs: int):
        super().__init__(jobs)
        try:
            import ray
        except ImportError:
            raise UsageError(f"--executor ray needs Ray: {RAY_HINT}") from None
        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level="warning")
            if not os.environ.get("RAY_ADDRESS"):
                # a local instance: as many CPUs as -j asks, a small object store (answers are short JSON)
                kwargs.update(num_cpus=self.jobs, object_store_memory=100 * 1024 * 1024)
            ray.init(**kwargs)
        self._remotes: dict[Callable, Any] = {}

    def submit(self, task: Task, fn: Callable[[Any], str] = evaluate) -> "Future[str]":
        if fn not in self._remotes:
            self._remotes[fn] = self._ray.remote(num_cpus=1, max_retries=1)(fn)
        return self._remotes[fn].remote(task).future()

    def close(self, abandon: bool = False) -> None:  # Ray's shutdown ends its tasks either way
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


EXECUTORS: dict[str, type[Executor]] = {"local": LocalExecutor, "ray": RayExecutor}


def make(name: str, jobs: int) -> Executor:
    if name not in EXECUTORS:
        raise UsageError(f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")
    return EXECUTORS[name](jobs)
