"""Nothing left behind: ownership marks on what a run creates, and the sweep of what a killed
run left.

A run that ends normally, by an exception, Ctrl-C, SIGTERM or SIGHUP removes its own
worktrees, temporary checkouts, lock files and report temp files, and kills its workers
(sentinel/launch.py and sentinel/cli/ turn SIGTERM and SIGHUP into the same KeyboardInterrupt
as Ctrl-C). A run killed with SIGKILL cannot: its workers die with it (a parent-death signal, see
sentinel/worker.py), and the next command sweeps what it left. The sweep removes only what it
can prove is RL-Sentinel's and whose owner process is gone: a folder named `sentinel-wt-*`
in the temp folder holding an owner mark (pid and that process's start time, so a reused pid
is not mistaken for the owner) whose process no longer exists, or one a SIGKILL left before
its mark was written (still empty a minute after it was made). In the user's repository it
removes only the worktrees it finds there (sentinel/git.py), never prunes theirs.

A worktree is created and removed with interrupts deferred (`deferred_interrupts`): Ctrl-C
mid-way waits until the worktree is both made and due for removal, or removed entirely.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

WORKTREE_PREFIX = "sentinel-wt-"
OWNER_FILE = "owner.json"
YOUNG_S = 60.0  # an unmarked folder this young may be a run that has not written its mark yet


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def me() -> dict:
    return {"pid": os.getpid(), "start": _start_time(os.getpid())}


def alive(owner: dict) -> bool:
    """Whether the process that wrote `owner` still runs (the same process, not a reused pid)."""
    pid = int(owner.get("pid", -1))
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    start = _start_time(pid)
    return start is None or owner.get("start") is None or start == owner["start"]


def mark(folder: Path, **facts) -> None:
    """Record this process as the owner of `folder` (plus facts the sweep needs, e.g. the repo),
    all at once: a killed writer leaves no half-written mark."""
    part = folder / (OWNER_FILE + ".part")
    part.write_text(json.dumps({**me(), **facts}))
    os.replace(part, folder / OWNER_FILE)


def stale_worktree_folders(tmp: Path | None = None, young_s: float = YOUNG_S,
                           prefix: str = WORKTREE_PREFIX) -> list[tuple[Path, dict]]:
    """(folder, owner) of every `sentinel-wt-*` (`prefix`) folder whose owner is gone, and (folder, {}) of
    every one killed before its mark was written: nothing in it but a partial mark, made more
    than `young_s` ago (a younger one may be a live run about to write its mark)."""
    out = []
    for d in sorted(Path(tmp or tempfile.gettempdir()).glob(prefix + "*")):
        try:
            owner = json.loads((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            if _unmarked_and_old(d, young_s):
                out.append((d, {}))
            continue  # not provably ours (or not marked yet): left alone
        if not alive(owner):
            out.append((d, owner))
    return out


def _unmarked_and_old(folder: Path, young_s: float) -> bool:
    try:
        names = {p.name for p in folder.iterdir()}
        age = time.time() - folder.stat().st_mtime
    except OSError:
        return False
    return folder.is_dir() and names <= {OWNER_FILE + ".part"} and age > young_s


def sweep_lock_files(tmp: Path | None = None) -> None:
    """Worktree lock files nobody holds (their holder was killed before deleting them)."""
    try:
        import fcntl
    except ImportError:
        return
    for f in Path(tmp or tempfile.gettempdir()).glob("sentinel-worktree-*.lock"):
        try:
            with open(f, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fh.fileno()).st_ino == os.stat(f).st_ino:
                    f.unlink()
        except OSError:
            continue  # held right now, or gone already


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def stale_tmp_files(path: Path) -> list[Path]:
    """`.NAME.<pid>.*.tmp` siblings of `path` (report temp files) whose writer is gone."""
    out = []
    for f in path.parent.glob(f".{path.name}.*.tmp"):
        parts = f.name[len(path.name) + 2:].split(".")
        if parts and parts[0].isdigit() and not alive({"pid": int(parts[0])}):
            out.append(f)
    return out


# --- signals --------------------------------------------------------------------------------

_on_interrupt: list[Callable[[], None]] = []


def on_interrupt(fn: Callable[[], None]) -> None:
    """Call `fn` first when the run is interrupted (e.g. kill the workers, so the threads
    waiting on them return and their cleanup runs)."""
    if fn not in _on_interrupt:
        _on_interrupt.append(fn)


def interrupted() -> None:
    while _on_interrupt:
        try:
            _on_interrupt.pop()()
        except Exception:  # noqa: BLE001 - cleanup goes on
            pass


_pending: list[int] = []  # signals that came inside `deferred_interrupts`
_depth = 0  # how many `deferred_interrupts` blocks the main thread is in
_raised = False  # an interrupt is on its way up: one more must not break into its cleanup


def _raise_interrupt(signum, frame):  # noqa: ARG001
    global _raised
    interrupted()  # first: the threads blocked on workers must be freed before anyone waits on them
    if _depth:
        _pending.append(signum)
    elif not _raised:
        _raised = True
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP that come during the block (Python raises them in the main
    thread) are raised when it ends, so that the block happens entirely or not at all: e.g. a
    worktree is added together with the code that removes it. Other threads need no shield: an
    interrupt is never raised in them."""
    global _depth, _raised
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            signum = _pending[0]
            _pending.clear()
            if not _raised:
                _raised = True
                raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def install_signal_handlers() -> None:
    """Ctrl-C, SIGTERM (what CI's `timeout` sends) and SIGHUP: the same cleanup."""
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, _raise_interrupt)

