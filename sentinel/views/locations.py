"""Paths as a report for people may show them: relative to the repository they are in, a
link to the exact commit where that repository's remote is on GitHub, and never an absolute
path of this machine."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Iterable

from ..links import github_url
from ..report import Report, Target

# An absolute POSIX path inside free text: not part of a URL (`https://host/a/b`), of a
# relative path (`a/b/c`) or of a fraction; at least two components.
_ABS = re.compile(r"(?<![\w.~:/@+-])/(?:[^\s/'\"`()<>\[\]{}|,;:*?=]+/)+[^\s/'\"`()<>\[\]{}|,;:*?=]*")
_WORKTREE = re.compile(r"/sentinel-(?:wt|co)-[^/]+/[0-9a-f]{7,40}(?:/|$)")  # temporary worktrees, cached checkouts
_PACKAGES = re.compile(r"/(?:site|dist)-packages/")
# options whose value is a file written (needs not exist), a path read, or nothing at all
_WRITES = {"-o", "--output", "--junit", "--plot", "--out", "--db", "--cache", "--bundles", "--dir", "--markdown"}
_PATHS = {"--repo", "--known", "--equivalent", "--path", "-p", "--catalog"}
_FLAGS = {"--all-commits", "--compile", "--first", "-x", "--force", "--json", "--list", "--list-operators", "--no-cache",
          "--no-db", "--verbose", "-v", "--version"}
_CATALOG = "catalog=\"$(python -c 'from sentinel.catalog import catalog_path; print(catalog_path())')\""


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

    def reproduce(self, argv: list[str]) -> str:
        """The report's command as shell lines to run from the folder it ran in (Report.cwd):
        each path relative to that folder; outside it, a target checkout as its
        `$SENTINEL_<NAME>_REPO` variable, a bundled scenario under `$catalog` (defined on a line
        before), any other path as a `<path to NAME>` to fill in (never a path of this
        machine); the revision that ran pinned (`--commit SHA`, or the resolved `--base` and
        `--head` of a compare). "" when the report has no command."""
        if not argv:
            return ""
        here = Path(self.report.cwd) if self.report.cwd and Path(self.report.cwd).is_dir() else Path.cwd()
        self._catalog = False
        words, opt = [], None
        for a in argv:
            flag, eq, value = a.partition("=") if a.startswith("--") and "=" in a else (None, "", a)
            shown = self._argument(flag or opt, value, here) if (flag or not a.startswith("-") or opt) else shlex.quote(a)
            words.append(f"{flag}={shown}" if flag else shown)
            opt = a if a.startswith("-") and not eq and a not in _FLAGS else None
        line = " ".join(words + self._pins(argv))
        return (_CATALOG + "\n" + line) if self._catalog else line

    def _argument(self, option: str | None, value: str, here: Path) -> str:
        pinned = {"--commit": "", "--base": "base", "--head": "head"}
        if option in pinned and value != "WORKTREE":  # the revision that ran, resolved
            ts = self.report.targets
            side = [t for k, t in ts.items() if pinned[option] and k.partition(":")[0] == pinned[option]]  # base:slime
            t = side[0] if len(side) == 1 else next(iter(ts.values())) if len(ts) == 1 and not pinned[option] else None
            return shlex.quote(t.commit if t and t.commit and not t.dirty else value)
        p = here / value
        if option in _WRITES:  # written, not read: relative to the folder, else its name there
            return shlex.quote(os.path.relpath(p, here) if p.resolve().is_relative_to(here.resolve()) else p.name)
        if not (value.startswith("/") or (p.exists() and "/" in value) or option in _PATHS):
            return shlex.quote(value)
        p, home = p.resolve(), here.resolve()
        if p.is_relative_to(home):
            return shlex.quote(os.path.relpath(p, home))
        for t in self.report.targets.values():
            if t.repo and Path(t.repo).is_absolute() and Path(t.repo).resolve() == p:
                return f'"$SENTINEL_{re.sub(r"[^A-Z0-9]", "_", t.name.upper())}_REPO"'
        from ..catalog import catalog_path
        bundled = catalog_path().resolve()
        if p.is_relative_to(bundled):
            self._catalog = True
            return '"$catalog"' + ("/" + shlex.quote(str(p.relative_to(bundled))) if p != bundled else "")
        if len(Path(os.path.commonpath([p, home])).parts) > 2:  # a neighbour (../other/x.yaml), not via /
            return shlex.quote(os.path.relpath(p, home))
        return shlex.quote(f"<path to {p.name}>")

    def _pins(self, argv: list[str]) -> list[str]:
        """`--commit SHA` for a one-target report that ran a commit of a checkout and did not name it."""
        given = {a.partition("=")[0] for a in argv}
        ts = list(self.report.targets.values())
        if self.report.kind in ("run", "hunt", "mutate") and len(ts) == 1 and not given & {"--commit", "--base", "--head"}:
            t = ts[0]
            if t.repo and t.commit and not t.dirty and "--repo" in given:
                return ["--commit", t.commit]
        return []

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
