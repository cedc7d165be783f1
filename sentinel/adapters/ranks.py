"""Several ranks of one distributed job in one process: each rank a thread, the collectives real.

A trainer function that runs a collective in the middle of its computation (an all-reduce of
statistics, an all-gather of a sequence's context-parallel chunks) cannot be played one rank after
another: every rank must be inside the collective at once. `run_ranks` starts one thread per rank on
torch's threaded process group (``torch.testing._internal.distributed.multi_threaded_pg``: a world
per thread, ``all_reduce`` / ``all_gather`` / ``broadcast`` meet across the threads), builds the
named subgroups the caller asks for, and hands each thread its `Rank` (`current`), so a shim (such
as Megatron's ``mpu``) answers each rank its own rank, size and groups.

A rank that never joins a collective the others wait in (a skipped all-reduce) would hang the job
on real hardware; here it is a `RanksDeadlock` raised in the caller, once every live rank has
waited in a collective with no progress for `STALL_S`.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist

STALL_S = 2.0  # every live rank waiting this long with no collective finishing: a deadlock

_local = threading.local()
_one_run = threading.Lock()  # torch's threaded world is process-wide: one set of ranks at a time


class RanksDeadlock(RuntimeError):
    """Some ranks wait in a collective that the others never join."""


@dataclass(frozen=True)
class Rank:
    """One simulated rank: its global rank, the world size, and its named subgroups."""

    rank: int
    world_size: int
    groups: Mapping[str, tuple[dist.ProcessGroup, list[int]]] = field(default_factory=dict)

    def group(self, name: str) -> dist.ProcessGroup:
        return self.groups[name][0]

    def rank_in(self, name: str) -> int:
        return self.groups[name][1].index(self.rank)

    def size_of(self, name: str) -> int:
        return len(self.groups[name][1])


def current() -> Rank | None:
    """The rank this thread plays inside `run_ranks`, or None outside it."""
    return getattr(_local, "rank", None)


class _Progress:
    """Counts the ranks inside a collective and the collectives finished (for deadlock detection)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting = 0
        self.finished = 0


def run_ranks(world_size: int, fn: Callable[[Rank], Any],
              groups: Mapping[str, Sequence[Sequence[int]]] | None = None) -> list[Any]:
    """``fn(rank)`` on `world_size` threads at once, one per rank, over a threaded process group;
    returns the ranks' results in rank order. `groups`: name -> the partition of the ranks into
    subgroups (each rank in exactly one), created on every rank in the same order as torch requires.
    The first exception a rank raises (lowest rank first) is raised here."""
    from torch.testing._internal.distributed import multi_threaded_pg as mt

    if current() is not None:
        raise RuntimeError("run_ranks inside a simulated rank: ranks do not nest")
    partitions = {name: [list(g) for g in parts] for name, parts in (groups or {}).items()}
    for name, parts in partitions.items():
        if sorted(r for g in parts for r in g) != list(range(world_size)):
            raise ValueError(f"group {name!r}: {parts} is not a partition of ranks 0..{world_size - 1}")
    results: list[Any] = [None] * world_size
    errors: list[BaseException | None] = [None] * world_size
    progress = _Progress()
    original_join = mt.Collective.join

    def join(self, rank, data):  # the threaded group's rendezvous, counted
        with progress.lock:
            progress.waiting += 1
        try:
            return original_join(self, rank, data)
        finally:
            with progress.lock:
                progress.waiting -= 1
                progress.finished += 1

    def body(r: int, store: dist.Store) -> None:
        try:
            dist.init_process_group("threaded", rank=r, world_size=world_size, store=store)
            mine: dict[str, tuple[dist.ProcessGroup, list[int]]] = {}
            for name, parts in partitions.items():
                for g in parts:
                    pg = dist.new_group(g)
                    if r in g:
                        mine[name] = (pg, g)
            _local.rank = Rank(r, world_size, mine)
            results[r] = fn(_local.rank)
        except BaseException as e:  # noqa: BLE001 - SystemExit is how the group unwinds a waiting rank
            errors[r] = e
            mt.ProcessLocalGroup.exception_handle(e)
        finally:
            _local.rank = None
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a rank that failed before its group existed
                pass

    with _one_run:
        excepthook = sys.excepthook  # init_process_group prefixes it with the rank, once per thread
        mt._install_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        mt.Collective.join = join
        # After fork() torch rebuilds its intra-op thread pool on a thread's first parallel op, and two
        # threads doing that at once can see no pool ("Invalid thread pool!"): rebuild it here, once.
        torch.set_num_threads(torch.get_num_threads())
        try:
            store = dist.HashStore()
            threads = [threading.Thread(target=body, args=(r, store), daemon=True, name=f"sentinel-rank-{r}")
                       for r in range(world_size)]
            for t in threads:
                t.start()
            deadlock = _watch(threads, progress)
            if deadlock:
                mt.ProcessLocalGroup.exception_handle(RanksDeadlock())
                for t in threads:
                    t.join(timeout=30)
        finally:
            mt.Collective.join = original_join
            mt.ProcessLocalGroup.reset()
            torch._C._distributed_c10d._set_thread_isolation_mode(False)
            mt._uninstall_threaded_pg()
            sys.excepthook = excepthook
    if deadlock:
        done = [r for r in range(world_size) if errors[r] is None]
        raise RanksDeadlock(f"{world_size} simulated ranks: ranks {deadlock} wait in a collective that "
                            f"rank(s) {done or 'none'} never joined")
    for e in errors:
        if e is not None and not isinstance(e, SystemExit):
            raise e
    for e in errors:
        if e is not None:
            raise RuntimeError(f"a simulated rank exited: {e}") from e
    return results


def _watch(threads: list[threading.Thread], progress: _Progress) -> list[int]:
    """Wait for the ranks; the ranks still waiting if every live one has waited in a collective
    for `STALL_S` while none finished (a deadlock), else []."""
    since, seen = None, -1
    while True:
        alive = [i for i, t in enumerate(threads) if t.is_alive()]
        if not alive:
            return []
        with progress.lock:
            stuck, finished = progress.waiting >= len(alive), progress.finished
        if stuck and finished == seen:
            if since is not None and time.monotonic() - since > STALL_S:
                return alive
        else:
            since, seen = (time.monotonic(), finished) if stuck else (None, -1)
        threads[alive[0]].join(timeout=0.02)
