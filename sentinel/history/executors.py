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
from abc import ABC, abstractmethod
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Callable

from .. import reaper
from ..errors import UsageError
from .task import Task, evaluate

RAY_HINT = "pip install 'rl-sentinel[ray]'"


class Executor(ABC):
    """Runs tasks, `jobs` at a time at most on this machine's share."""

    name: str = ""

    def __init__(self, jobs: int):
        self.jobs = max(1, jobs)

    @abstractmethod
    def submit(self, task: Task, fn: Callable[[Any], str] = evaluate) -> "Future[str]":
        """Start `fn(task)` (a history task by default; `sentinel mutate` sends its shards);
        the future's result is its JSON answer."""

    def close(self) -> None:
        """Release what the executor started (its processes, a Ray instance it began)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
                                             initializer=reaper.watch_parent)
        return self._pool.submit(fn, task)

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


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

    def close(self) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


EXECUTORS: dict[str, type[Executor]] = {"local": LocalExecutor, "ray": RayExecutor}


def make(name: str, jobs: int) -> Executor:
    if name not in EXECUTORS:
        raise UsageError(f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")
    return EXECUTORS[name](jobs)
