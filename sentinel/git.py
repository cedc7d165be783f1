"""Git work for targets: a revision of a repository as a tree to import from.

The user's checkout, branch, index and stash are never touched: a requested revision comes
from the checkout cache (sentinel/checkouts.py: a detached clone kept per commit, never in the
user's worktree list), or, with the cache off or unusable, is checked out detached into a
temporary worktree that is removed on success, failure and Ctrl-C. Nor are the user's own
worktrees: nothing here runs `git worktree prune`; only worktrees in a `sentinel-wt-*` folder
are removed, or their registration where the folder is gone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import checkouts, cleanup
from .errors import GitError  # noqa: F401 - a repository or revision that cannot be used

WORKTREE = "WORKTREE"  # names the working tree itself, uncommitted changes included


@dataclass
class Checkout:
    path: Path
    commit: str | None
    subject: str | None
    dirty: bool | None


def _repo(path: Path):
    import git
    try:
        return git.Repo(path)
    except git.NoSuchPathError:
        raise GitError(f"repository {path} does not exist") from None
    except git.InvalidGitRepositoryError:
        raise GitError(f"{path} is not a git repository: a revision (--commit, --base, --head, --since) needs one") from None


def resolve(repo: Path, rev: str) -> tuple[str, str]:
    """(full sha, subject) of a revision, or GitError before any work starts."""
    import git
    r = _repo(repo)
    try:
        c = r.commit(rev)
    except (git.BadName, ValueError, git.GitCommandError):
        raise GitError(f"unknown revision {rev!r} in {repo}") from None
    return c.hexsha, c.summary


@contextmanager
def checkout(repo: Path, rev: str | None, private: bool = False) -> Iterator[Checkout]:
    """The tree to import from. No rev (or WORKTREE): the working tree as it is (a bare
    repository: HEAD). Otherwise the cached checkout of rev (`private`: never the cache, for a
    caller that writes in the tree), else a temporary detached worktree at rev."""
    repo = Path(repo).expanduser().resolve()
    if not repo.exists():
        raise GitError(f"repository {repo} does not exist")
    if rev in (None, WORKTREE):
        try:
            r = _repo(repo)
        except GitError:
            yield Checkout(repo, None, None, None)  # a plain folder: no version facts
            return
        if not r.bare:
            head = r.head.commit if r.head.is_valid() else None
            yield Checkout(Path(r.working_tree_dir), head.hexsha if head else None, head.summary if head else None,
                           r.is_dirty(untracked_files=False))
            return
        rev = "HEAD"
    import git
    sha, subject = resolve(repo, rev)
    r = _repo(repo)
    with ExitStack() as stack:
        cached = None if private or not checkouts.enabled() else _cached(stack, repo, r, sha)
        if cached is not None:
            yield Checkout(cached, sha, subject, False)
            return
    tmp = path = None
    try:
        # made, marked, registered and due for removal in one step: an interrupt waits for it
        with cleanup.deferred_interrupts():
            tmp = Path(tempfile.mkdtemp(prefix=cleanup.WORKTREE_PREFIX))
            cleanup.mark(tmp, repo=str(repo))  # a killed run's leftovers are swept by the next command
            path = tmp / sha[:12]
            with _worktree_lock(repo):
                _forget_missing(r)
                try:
                    r.git.worktree("add", "--detach", "--quiet", str(path), sha)
                except git.GitCommandError as e:
                    raise GitError(f"could not check out {sha[:12]} of {repo} into a temporary worktree: "
                                   f"{_stderr(e)}") from None
        yield Checkout(path, sha, subject, False)
    finally:
        if tmp is not None:
            with cleanup.deferred_interrupts():
                _remove(r, repo, tmp)


def _cached(stack: ExitStack, repo: Path, r, sha: str) -> Path | None:
    """The cache's tree of `sha`, held while `stack` is open; None when the cache cannot serve
    (not writable, or a damaged entry another command is using)."""
    try:
        return stack.enter_context(checkouts.use(repo, str(r.common_dir), sha))
    except (checkouts.Busy, OSError):
        return None


def _remove(r, repo: Path, folder: Path) -> None:
    """Remove our worktree folder `folder` (sentinel-wt-*) from `repo`: each worktree in it,
    the registration of any whose folder is gone, then the folder."""
    with _worktree_lock(repo):
        for wt in sorted(folder.iterdir()) if folder.is_dir() else []:
            if wt.is_dir():
                try:
                    r.git.worktree("remove", "--force", str(wt))
                except Exception:  # noqa: BLE001 - its registration is dropped below
                    pass
        cleanup.remove_tree(folder)
        _forget(r, lambda gitdir: _inside(gitdir, folder))


def _forget(r, ours) -> None:
    """Drop the registration (.git/worktrees/NAME) of each worktree whose recorded folder
    `ours(gitdir)` says is ours and that no longer exists: what `git worktree prune` does, for
    our worktrees alone."""
    try:
        admin = Path(r.common_dir) / "worktrees"
        entries = list(admin.iterdir()) if admin.is_dir() else []
    except Exception:  # noqa: BLE001 - a broken repository: nothing to forget
        return
    for entry in entries:
        try:
            gitdir = Path((entry / "gitdir").read_text().strip())
        except OSError:
            continue
        if ours(gitdir) and not gitdir.exists():
            shutil.rmtree(entry, ignore_errors=True)


def _forget_missing(r) -> None:
    """Registrations of our worktrees whose sentinel-wt-* folder is gone altogether (swept, or
    the temp folder cleaned): no live run can be using them."""
    _forget(r, lambda gitdir: gitdir.parent.parent.name.startswith(cleanup.WORKTREE_PREFIX)
            and not gitdir.parent.parent.exists())


def _inside(path: Path, folder: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real.startswith(top + os.sep)


def sweep_stale() -> list[str]:
    """Remove the temporary worktrees of runs that were killed (their owner process is gone):
    deregistered from their repository, then deleted. Returns what was removed."""
    removed = []
    for folder, owner in cleanup.stale_worktree_folders():
        repo = Path(owner.get("repo", ""))
        try:
            if owner.get("repo") and repo.exists():
                _remove(_repo(repo), repo, folder)
        except Exception:  # noqa: BLE001 - a broken repo must not stop the command
            pass
        cleanup.remove_tree(folder)
        removed.append(str(folder))
    if removed:
        cleanup.sweep_lock_files()
    return removed + checkouts.sweep()


_THREADS = threading.Lock()


@contextmanager
def _worktree_lock(repo: Path) -> Iterator[None]:
    """Serialise `git worktree add/remove/prune` on one repository: run concurrently (both
    sides of a compare, two sentinel processes) they race on .git/worktrees, and git fails
    with "could not create directory of '.git/worktrees/...'". The lock file lives in the
    temp folder, keyed by the repository, so the user's .git gets nothing new; its holder
    deletes it on release, and a waiter that then holds a deleted file's lock tries again."""
    key = hashlib.sha1(str(repo).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"sentinel-worktree-{key}.lock"
    try:
        import fcntl
    except ImportError:  # Windows: the thread lock alone
        with _THREADS:
            yield
        return
    with _THREADS:
        while True:
            f = open(path, "a")
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                same = os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            f.close()  # the holder before us deleted it: lock the current file instead
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            f.close()


def _stderr(e: Exception) -> str:
    text = (getattr(e, "stderr", "") or str(e)).strip()
    return text.replace("stderr: ", "").strip(" '\n") or type(e).__name__
