"""Paths as a report for people may show them: relative to the repository they are in, a
link to the exact commit where that repository's remote is on GitHub, and never an absolute
path of this machine."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Iterable

from ..report import Report, Target

# An absolute POSIX path inside free text: not part of a URL (`https://host/a/b`), of a
# relative path (`a/b/c`) or of a fraction; at least two components.
_ABS = re.compile(r"(?<![\w.~:/@+-])/(?:[^\s/'\"`()<>\[\]{}|,;:*?=]+/)+[^\s/'\"`()<>\[\]{}|,;:*?=]*")
_WORKTREE = re.compile(r"/sentinel-(?:wt|co)-[^/]+/[0-9a-f]{7,40}(?:/|$)")  # temporary worktrees, cached checkouts
_PACKAGES = re.compile(r"/(?:site|dist)-packages/")
_GITHUB = re.compile(r"github\.com[:/]+([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")


@lru_cache(maxsize=64)
def github_url(repo: str) -> str | None:
    """`https://github.com/owner/name` when the repository at `repo` has its remote (origin,
    else the first) on GitHub; None for any other remote, no remote, or no repository."""
    try:
        import git
        r = git.Repo(repo)
        remotes = list(r.remotes)
        remote = next((x for x in remotes if x.name == "origin"), remotes[0] if remotes else None)
        url = remote.url if remote is not None else ""
    except Exception:  # noqa: BLE001 - no git, no repository, unreadable config: plain text then
        return None
    m = _GITHUB.search(url)
    return f"https://github.com/{m.group(1)}/{m.group(2)}" if m else None


def _toplevel(path: Path) -> Path:
    try:
        import git
        return Path(git.Repo(path, search_parent_directories=True).working_tree_dir).resolve()
    except Exception:  # noqa: BLE001 - not a checkout: the folder itself
        return path.resolve()


class Locations:
    """Roots a path may be shown relative to: each target's repository, the checkout the
    command runs in (or the folder), and the folder sentinel itself is installed in."""

    def __init__(self, report: Report, cwd: Path | None = None) -> None:
        self.report = report
        roots: list[tuple[Path, str | None]] = [(Path(t.repo).resolve(), key) for key, t in report.targets.items()
                                               if t.repo and Path(t.repo).is_absolute()]
        roots += [(_toplevel(cwd or Path.cwd()), None), (Path(__file__).resolve().parents[1], None)]
        # the deepest root first: a target checkout inside the current one is its own root
        self.roots = sorted(roots, key=lambda r: len(r[0].parts), reverse=True)

    def relative(self, path: str | None) -> str | None:
        """`path` relative to the root it is under; None for an absolute path under no root."""
        if not path:
            return None
        if not path.startswith("/"):
            return str(PurePosixPath(path))
        if m := _WORKTREE.search(path):
            return path[m.end():] or "."
        p = Path(path)
        for root, key in self.roots:
            if p == root:
                return root.name if key else "."
            if p.is_relative_to(root):
                return str(p.relative_to(root))
        if m := _PACKAGES.search(path):
            return path[m.end():]
        return None

    def scrub(self, text: str, elide: str = "…/") -> str:
        """`text` with every absolute path made relative, or cut to `elide` + its file name."""
        def one(m: re.Match[str]) -> str:
            rel = self.relative(m.group())
            return rel if rel is not None else elide + PurePosixPath(m.group()).name
        return _ABS.sub(one, text)

    def command(self, argv: Iterable[str]) -> list[str]:
        return [self.scrub(a, elide="") for a in argv]

    def target(self, key: str) -> Target | None:
        return self.report.targets.get(key)

    def commit_url(self, key: str) -> str | None:
        t = self.target(key)
        base = github_url(t.repo) if t and t.repo and t.commit else None
        return f"{base}/commit/{t.commit}" if base else None

    def source(self, key: str, file: str | None, line: int | None) -> tuple[str | None, str | None]:
        """(the file:line text, a link to that line at the target's commit or None). The text
        is None when the file is outside every root: it is then not shown at all.

        A relative file is relative to the target's checkout (adapters write it so), as is
        one under the target's repository or a temporary worktree of it."""
        t = self.target(key)
        repo = Path(t.repo).resolve() if t and t.repo and Path(t.repo).is_absolute() else None
        if file and repo and file.startswith("/") and Path(file).is_relative_to(repo):
            rel, in_target = str(Path(file).relative_to(repo)), True
        else:
            rel = self.relative(file)
            in_target = bool(file) and (not file.startswith("/") or bool(_WORKTREE.search(file)))
        if rel is None:
            return None, None
        text = f"{rel}:{line}" if line else rel
        base = github_url(t.repo) if in_target and t and t.repo and t.commit else None
        url = f"{base}/blob/{t.commit}/{rel}" + (f"#L{line}" if line else "") if base else None
        return text, url

    def describe(self, key: str) -> str:
        """The target in words (no markup): name, commit and subject, version, plant, device."""
        t = self.target(key)
        if t is None:
            return key
        bits = [t.name]
        where = (self.relative(t.repo) or PurePosixPath(t.repo).name) if t.repo else t.name
        if where not in (t.name, "."):
            bits.append(f"at {where}")
        if t.commit:
            bits.append(t.commit[:10] + (f" ({t.subject})" if t.subject else "") + (" + uncommitted changes" if t.dirty else ""))
        if t.version:
            bits.append(f"version {t.version}")
        if t.plant:
            bits.append(f"planted bug {t.plant}")
        if t.device and t.device != "cpu":
            bits.append(f"on {t.device}")
        return " ".join(bits)
