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
        return self._pool.submit(fn, task)

    def close(self, abandon: bool = False) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        if self._pool is not None:
            procs = list((getattr(self._pool, "_processes", None) or {}).values())
            self._pool.shutdown(wait=False, cancel_futures=True)
            if abandon:  # a pool task runs a whole shard: waiting for it would outlast the interrupt by minutes
                _stop(procs)
            self._pool.shutdown(wait=True)


def _pool_process() -> None:
    """A pool process's start: it ends with its workers once the CLI is gone (a SIGKILL runs no
    clean-up), and an interrupt (SIGTERM from `close`) runs the CLI's own clean-up here: its
    workers killed, its `finally` blocks (worktrees, temporary files) run."""
    from .. import cleanup, process
    reaper.watch_parent()
    cleanup.install_signal_handlers()
    cleanup.on_interrupt(process.stop_all)


def _stop(procs: list[Any]) -> None:
    """Interrupt each pool process, then kill with its descendants any still running STOP_GRACE_S later."""
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except (ProcessLookupError, TypeError):  # ended, or never started (no pid)
            pass
    running = {p.sentinel: p for p in procs if p.pid is not None}
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
