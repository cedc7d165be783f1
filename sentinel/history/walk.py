"""The walk: a range's first-parent commits, which of them touch the loss path, and the sample.

One `git log` lists the range with each commit's changed files (a merge against its first
parent, `--diff-merges=first-parent`), so deciding which commits can change a verdict costs
one git call, not one per commit.
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import GitError

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ][0-9:]+([+-]\d{2}:?\d{2}|Z)?)?$")
# "fix: x (#2114)", "Merge pull request #88 from ...", "[PR #12] ..."; the last number wins
_PR = re.compile(r"(?:\(#|pull request #|PR #)(\d+)\)?")
_REC, _SEP = "\x1e", "\x1f"


@dataclass
class WalkCommit:
    sha: str
    date: str
    subject: str
    touches: bool
    files: tuple[str, ...] = ()

    @property
    def pr(self) -> int | None:
        return pr_number(self.subject)


def pr_number(subject: str) -> int | None:
    """The pull request a subject names (`... (#2114)`, `Merge pull request #12 ...`), else None."""
    found = _PR.findall(subject)
    return int(found[-1]) if found else None


def is_date(since: str) -> bool:
    return bool(_DATE.match(since.strip()))


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if r.returncode:
        raise GitError(f"git {' '.join(args[:2])} in {repo}: {r.stderr.strip() or r.returncode}")
    return r.stdout


def rev(repo: Path, name: str) -> str:
    """The full sha of a revision (GitError naming it when unknown)."""
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").strip()
    except GitError:
        raise GitError(f"unknown revision {name!r} in {repo}") from None


def commit_date(repo: str | Path, sha: str) -> str:
    return _git(Path(repo), "show", "-s", "--format=%cI", sha).strip()


def is_ancestor(repo: str | Path, a: str, b: str) -> bool:
    return subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", a, b]).returncode == 0


def touches(files: tuple[str, ...], loss_path_files: tuple[str, ...]) -> bool:
    """A changed file is on the loss path when it is a declared file or lies in a declared folder (`dir/`)."""
    return any(f == p or (p.endswith("/") and f.startswith(p)) for f in files for p in loss_path_files)


def walk(repo: str | Path, since: str | None, until: str, loss_path_files: tuple[str, ...]) -> list[WalkCommit]:
    """First-parent commits of the range, oldest first. `since` is a revision (itself included,
    as the baseline) or a date (the first commit on or after it is the baseline); None: the
    whole first-parent history of `until`."""
    repo = Path(repo)
    head = rev(repo, until)
    fmt = f"--format={_REC}%H{_SEP}%cI{_SEP}%s"
    args = ["log", "--first-parent", "--reverse", "--name-only", "--diff-merges=first-parent", fmt]
    if since and is_date(since):
        args += [f"--since={since}", head]
    elif since:
        base = rev(repo, since)
        if not is_ancestor(repo, base, head):
            raise GitError(f"--since {since} is not an ancestor of --until {until}")
        args.append(head if _is_root(repo, base) else f"{base}^..{head}")
    else:
        args.append(head)
    commits = []
    for rec in _git(repo, *args).split(_REC)[1:]:
        head_line, _, rest = rec.partition("\n")
        sha, date, subject = head_line.split(_SEP, 2)
        files = tuple(f for f in rest.splitlines() if f.strip())
        commits.append(WalkCommit(sha, date, subject, touches(files, loss_path_files), files))
    if since and not is_date(since):
        commits = _from(commits, rev(repo, since))
    if not commits:
        raise GitError(f"no commits in the range {since or '(start)'}..{until} of {repo}")
    return commits


def _is_root(repo: Path, sha: str) -> bool:
    return not _git(repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]


def _from(commits: list[WalkCommit], base: str) -> list[WalkCommit]:
    """From the baseline on: `base^..head` on a first-parent walk may start before `base` when
    `base` is a merge's second parent; the baseline must be where the range starts."""
    for i, c in enumerate(commits):
        if c.sha == base:
            return commits[i:]
    raise GitError(f"{base[:12]} is not on the first-parent history of the range's end")


def auto_stride(relevant: int) -> int:
    """Every k-th relevant commit: about 2*sqrt(n) samples, so sampling and the bisects that
    follow (log2 k probes per flip) both stay a small fraction of an exhaustive walk."""
    return max(1, math.ceil(math.sqrt(relevant) / 2))


def sample(commits: list[WalkCommit], every: int, all_commits: bool) -> list[int]:
    """Indices (into `commits`) to evaluate: the baseline, every `every`-th commit that touches
    the loss path (every commit with `all_commits`), and the last of them."""
    relevant = [i for i, c in enumerate(commits) if i > 0 and (all_commits or c.touches)]
    picked = {0, *relevant[every - 1::every]}
    if relevant:
        picked.add(relevant[-1])
    return sorted(picked)
