"""Every descendant dies: finding a process's descendants and killing them, wherever they moved.

A process group kill misses a grandchild that called `setsid()`. A worker therefore becomes a
child subreaper (Linux): a descendant orphaned under it is re-parented to the worker instead
of init, so it stays in the worker's tree, and `kill_descendants` finds and kills it there.
Elsewhere (no /proc, no prctl) these calls do nothing and the group kill is all there is.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it (Linux); False elsewhere."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(interval: float = 0.5) -> None:
    """End this process and every descendant it has once the process that started it is gone
    (this one re-parented: a SIGKILLed CLI): a worker, or a pool process running shards, never
    runs on as an orphan."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                kill_descendants(os.getpid())
                os._exit(1)
            time.sleep(interval)
    threading.Thread(target=watch, daemon=True, name="watch-parent").start()


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (every thread's), from /proc; [] when unknown."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            return _children_by_scan(pid)  # a kernel without /proc/PID/task/TID/children
    return out


def _children_by_scan(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, parents before their children."""
    out, todo = [], [pid]
    while todo:
        for c in _children(todo.pop()):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def kill_descendants(pid: int, keep: frozenset[int] = frozenset(), reap: bool = False, rounds: int = 50) -> list[int]:
    """SIGKILL every descendant of `pid` not in `keep`, again until none is left (a dying
    process's children move up to the subreaper, and a forking one may add some). With `reap`
    (`pid` is this process), wait for the killed direct children so none stays a zombie.
    Returns the pids killed."""
    killed: list[int] = []
    for _ in range(rounds):
        found = [p for p in descendants(pid) if p not in keep and _alive(p)]
        if not found:
            break
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if p not in killed:
                killed.append(p)
        if reap:  # so their children move up to us, and no zombie is left
            _reap([p for p in _children(pid) if p not in keep])
    return killed


def kill_tree(pid: int) -> None:
    """Kill `pid` and every descendant: stopped first, so it forks nothing new meanwhile."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        return
    kill_descendants(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    """Running (a zombie has ended: it only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _reap(pids: list[int]) -> None:
    for p in pids:
        try:
            os.waitpid(p, 0)
        except ChildProcessError:
            pass
