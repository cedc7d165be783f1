"""The checkout cache: a commit's tree kept for the next command that needs it.

An entry is a `git clone --shared --no-checkout` of the target's repository with the commit
checked out detached, in `<cache>/sentinel-co-<sha>/<sha12>/`: a repository of its own whose
objects are read from the user's (alternates), so nothing is ever registered in the user's
`git worktree list`, and `git rev-parse HEAD` in the tree names the commit as a worktree did.
The key is the commit alone: one sha is one tree, whichever clone it came from.

- Nothing half-written is used: an entry is built in a `sentinel-build-*` folder (owner-marked,
  sentinel/cleanup.py) and renamed into place whole; a killed build is swept by the next command.
- An entry is checked before each use (HEAD is the commit, `git status` clean but for
  `__pycache__`); a corrupted one is removed and rebuilt.
- A command holds a shared lock on the entry's lock file while it uses the tree; prune and
  rebuild take it exclusively, so an entry in use is never removed. The lock file's mtime is
  the last use (LRU).
- The cache keeps at most `SENTINEL_CACHE_MAX_MB` (default 2048) MiB: after each build the
  least recently used entries nobody holds are removed. `sentinel cache info|prune` shows and
  trims it; `SENTINEL_CACHE_DIR` moves it; `SENTINEL_CHECKOUT_CACHE=off` turns it off
  (sentinel/git.py then uses a temporary worktree per command, as before).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import cleanup
from .errors import GitError

ENTRY_PREFIX = "sentinel-co-"
BUILD_PREFIX = "sentinel-build-"
DEFAULT_MAX_MB = 2048
STATS = {"built": 0, "reused": 0, "rebuilt": 0}  # this process's cache traffic (tests read it)


class Busy(Exception):
    """The entry is corrupted and another command is using it: the caller checks out privately."""


def enabled() -> bool:
    return os.environ.get("SENTINEL_CHECKOUT_CACHE", "on").lower() not in ("off", "0", "no", "false")


def cache_dir() -> Path:
    if os.environ.get("SENTINEL_CACHE_DIR"):
        return Path(os.environ["SENTINEL_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rl-sentinel" / "checkouts"


def owned(path: str | Path) -> bool:
    """A tree this tool made (a temporary worktree, a cached checkout), where writing bytecode
    beside the sources is harmless; anything else is a user's own tree."""
    p = Path(path).resolve()
    return any(d.name.startswith(cleanup.WORKTREE_PREFIX) for d in p.parents) or cache_dir().resolve() in p.parents


def max_bytes() -> int:
    try:
        return int(float(os.environ.get("SENTINEL_CACHE_MAX_MB", DEFAULT_MAX_MB)) * 2**20)
    except ValueError:
        return DEFAULT_MAX_MB * 2**20


@dataclass
class Entry:
    sha: str
    folder: Path
    size: int  # bytes, as built
    last_used: float
    repo: str
    in_use: bool

    @property
    def tree(self) -> Path:
        return self.folder / self.sha[:12]


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


@contextmanager
def use(repo: Path, common_dir: str, sha: str) -> Iterator[Path]:
    """The tree of commit `sha` of `repo` (whose git objects live in `common_dir`), from the
    cache or built into it, held for as long as the block runs. Busy when it must be rebuilt
    while another command uses it."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"{ENTRY_PREFIX}{sha}"
    with _locked(root / f"{ENTRY_PREFIX}{sha}.lock", exclusive=False) as fh:
        if folder.exists() and not _intact(folder, sha):
            if not _upgrade(fh):
                raise Busy(f"the cached checkout of {sha[:12]} is damaged and in use")
            _discard(folder)
            STATS["rebuilt"] += 1
        if folder.exists():
            STATS["reused"] += 1
        else:
            _build(repo, common_dir, sha, root)
            STATS["built"] += 1
            prune(max_bytes())  # ours is held: never removed here
        os.utime(fh.fileno())  # last use
        yield folder / sha[:12]


def _build(repo: Path, common_dir: str, sha: str, root: Path) -> None:
    """Clone, check out, mark, then rename into place whole (a lost race: the winner's stays)."""
    tmp = None
    try:
        with cleanup.deferred_interrupts():  # made and marked together: a killed build is swept
            tmp = Path(tempfile.mkdtemp(prefix=BUILD_PREFIX, dir=root))
            cleanup.mark(tmp, repo=str(repo))
        tree = tmp / sha[:12]
        steps = [("clone", "--quiet", "--shared", "--no-checkout", "--template=", common_dir, str(tree)),
                 ("-C", str(tree), "-c", "core.hooksPath=" + os.devnull, "-c", "advice.detachedHead=false",
                  "checkout", "--quiet", "--detach", sha)]
        for step in steps:
            proc = _git(*step)
            if proc.returncode:
                raise GitError(f"could not check out {sha[:12]} of {repo} into the checkout cache: "
                               f"{proc.stderr.strip()}")
        size = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file() and not f.is_symlink())
        cleanup.mark(tmp, repo=str(repo), sha=sha, size=size, built=time.time())
        try:
            os.rename(tmp, root / f"{ENTRY_PREFIX}{sha}")
        except OSError:  # another command built it meanwhile
            pass
    finally:
        if tmp is not None:
            with cleanup.deferred_interrupts():
                cleanup.remove_tree(tmp)


def _intact(folder: Path, sha: str) -> bool:
    """HEAD is `sha` and the tracked files are as committed (untracked `__pycache__` aside)."""
    tree = folder / sha[:12]
    if not (folder / cleanup.OWNER_FILE).is_file() or not tree.is_dir():
        return False
    head = _git("rev-parse", "HEAD", cwd=tree)
    if head.returncode or head.stdout.strip() != sha:
        return False
    status = _git("--no-optional-locks", "status", "--porcelain", "--untracked-files=normal", cwd=tree)
    if status.returncode:
        return False
    return all(line.startswith("?? ") and line.rstrip("/").endswith("__pycache__")
               for line in status.stdout.splitlines())


def _discard(folder: Path) -> None:
    """Move an entry out of the way at once (a rename), then delete it: a kill mid-way leaves a
    marked build folder for the sweep, never a half-deleted entry under its own name."""
    trash = Path(tempfile.mkdtemp(prefix=BUILD_PREFIX, dir=folder.parent))
    cleanup.mark(trash)
    try:
        os.replace(folder, trash / "old")
    except OSError:
        pass
    cleanup.remove_tree(trash)


@contextmanager
def _locked(path: Path, exclusive: bool, wait: bool = True) -> Iterator[object | None]:
    """An flock on `path` (None when not `wait` and it is held). Prune deletes a lock file it
    holds exclusively: a waiter that then holds a deleted file's lock tries again."""
    try:
        import fcntl
    except ImportError:  # Windows: no sharing guard
        yield None
        return
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    while True:
        fh = open(path, "a")
        try:
            fcntl.flock(fh, mode)
        except OSError:
            fh.close()
            yield None
            return
        try:
            if os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        fh.close()
    try:
        yield fh
    finally:
        fh.close()


def _upgrade(fh) -> bool:
    """Shared to exclusive, without waiting; on failure the shared lock is taken again."""
    if fh is None:
        return True
    import fcntl
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        fcntl.flock(fh, fcntl.LOCK_SH)
        return False


def entries(root: Path | None = None) -> list[Entry]:
    """The cache's entries, least recently used first."""
    root = root or cache_dir()
    out = []
    for folder in sorted(root.glob(ENTRY_PREFIX + "*")) if root.is_dir() else []:
        if not folder.is_dir():
            continue
        try:
            mark = json.loads((folder / cleanup.OWNER_FILE).read_text())
        except (OSError, ValueError):
            mark = {}
        lock = folder.with_name(folder.name + ".lock")
        try:
            used = lock.stat().st_mtime
        except OSError:
            used = folder.stat().st_mtime
        with _locked(lock, exclusive=True, wait=False) as fh:
            busy = fh is None
        out.append(Entry(sha=folder.name[len(ENTRY_PREFIX):], folder=folder, size=int(mark.get("size", 0)),
                         last_used=used, repo=mark.get("repo", ""), in_use=busy))
    return sorted(out, key=lambda e: e.last_used)


def prune(cap: int, root: Path | None = None) -> list[str]:
    """Remove least recently used entries nobody holds until the cache is within `cap` bytes.
    Returns the commits removed."""
    root = root or cache_dir()
    live = entries(root)
    total = sum(e.size for e in live)
    removed = []
    for e in live:
        if total <= cap:
            break
        lock = e.folder.with_name(e.folder.name + ".lock")
        with _locked(lock, exclusive=True, wait=False) as fh:
            if fh is None:
                continue  # in use
            _discard(e.folder)
            lock.unlink(missing_ok=True)
        total -= e.size
        removed.append(e.sha)
    return removed


def sweep(root: Path | None = None) -> list[str]:
    """Build folders of commands that were killed (owner gone): removed."""
    root = root or cache_dir()
    if not root.is_dir():
        return []
    stale = [d for d, _ in cleanup.stale_worktree_folders(root, prefix=BUILD_PREFIX)]
    for d in stale:
        cleanup.remove_tree(d)
    return [str(d) for d in stale]
