"""What the reports for people (markdown, HTML) show of a report, decided once.

- `Locations`: paths as a report may show them: relative to the repository they are in, a
  link to the exact commit where that repository's remote is on GitHub, and never an
  absolute path of this machine.
- `Grid`: an invariant's per-token values (rows are sequences, columns tokens) with the
  expected values, the offending cells and the scenario's mask for that tensor.
- `ordered`: scenarios and comparisons worst first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable

import numpy as np

from . import boundaries
from .report import InvariantResult, Report, ScenarioResult, Target

SCENARIO_ORDER = {"violated": 0, "error": 1, "unsupported": 2, "excluded": 3, "holds": 4}
COMPARE_ORDER = {"regressed": 0, "inconclusive": 1, "still-violated": 2, "fixed": 3, "holds-both": 4}

# An absolute POSIX path inside free text: not part of a URL (`https://host/a/b`), of a
# relative path (`a/b/c`) or of a fraction; at least two components.
_ABS = re.compile(r"(?<![\w.~:/@+-])/(?:[^\s/'\"`()<>\[\]{}|,;:*?=]+/)+[^\s/'\"`()<>\[\]{}|,;:*?=]*")
_WORKTREE = re.compile(r"/sentinel-wt-[^/]+/[0-9a-f]{7,40}(?:/|$)")  # sentinel/git.py temporary worktrees
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


# --- per-token grids ---------------------------------------------------------------------

NON_FINITE = ("NaN", "Infinity", "-Infinity", "nan", "inf", "-inf")  # as reports write them (ser_json_inf_nan)


def _is_number(x: Any) -> bool:
    return x is None or x in NON_FINITE or isinstance(x, (int, float)) and not isinstance(x, bool)


def as_rows(values: Any) -> list[list[Any]] | None:
    """A [B, T] grid as rows; a [B] vector as one row; None for anything else."""
    if not isinstance(values, list) or not values:
        return None
    if all(isinstance(r, list) and r and all(_is_number(v) for v in r) for r in values):
        return values
    if all(_is_number(v) for v in values):
        return [values]
    return None


def is_scalar(x: Any) -> bool:
    return isinstance(x, (int, float, str)) and not isinstance(x, bool) or x is None


@dataclass
class Grid:
    """Values of one tensor: rows are sequences (a row tensor is one row), columns tokens."""

    name: str
    observed: list[list[Any]]
    expected: list[list[Any]] | None = None
    bad: set[tuple[int, int]] = field(default_factory=set)
    mask: list[list[Any]] | None = None
    mask_name: str | None = None
    row_vector: bool = False
    observed_as: str = "observed"  # a relational family's: "variant run" ...
    expected_as: str = "expected"  # ... and "base run" (another run's values, not an expectation)

    def masked(self, i: int, j: int) -> bool:
        try:
            return self.mask is not None and float(self.mask[i][j]) == 0.0
        except (IndexError, TypeError, ValueError):
            return False

    def expected_at(self, i: int, j: int) -> Any:
        try:
            return self.expected[i][j] if self.expected is not None else None
        except (IndexError, TypeError):
            return None

    def window(self, rows: int = 16, cols: int = 32) -> tuple[list[int | None], list[int | None]]:
        """Which rows and columns to show of a large grid: those with offending cells and their
        neighbours first, then the first ones, in order; None marks a gap."""
        def pick(n: int, hot: set[int], most: int, near: int) -> list[int | None]:
            if n <= most:
                return list(range(n))
            keep = sorted({k for h in sorted(hot) for k in range(h - near, h + near + 1) if 0 <= k < n})[:most]
            keep = sorted(set(keep) | set(range(min(n, most - len(keep)))))
            out: list[int | None] = []
            for k in keep:
                if out and out[-1] is not None and k != out[-1] + 1:
                    out.append(None)
                out.append(k)
            return out + ([None] if keep[-1] != n - 1 else [])
        width = max(len(r) for r in self.observed)
        return (pick(len(self.observed), {i for i, _ in self.bad}, rows, 0),
                pick(width, {j for _, j in self.bad}, cols, 2))

    def key(self) -> tuple:
        return (self.name, repr(self.observed), repr(self.expected), tuple(sorted(self.bad)))


def output_name(inv: InvariantResult) -> str | None:
    cfg = next(iter(inv.config.values()), None)
    if isinstance(cfg, dict):
        name = cfg.get("output") or cfg.get("input")
        return name if isinstance(name, str) else None
    return None


def _same_shape(a: list[list[Any]] | None, b: list[list[Any]]) -> bool:
    return a is not None and len(a) == len(b) and all(isinstance(x, list) and len(x) == len(y) for x, y in zip(a, b))


def fitted(expected: Any, rows: list[list[Any]], vector: bool) -> list[list[Any]] | None:
    """`expected` as a grid of the observed grid's shape, broadcast as the invariant compared
    them (a scalar, a per-row `[[x], [y]]`, one row for every row); None when it does not fit."""
    exp = as_rows(expected)
    if exp is not None and _same_shape(exp, rows):
        return exp
    if expected is None or len({len(r) for r in rows}) != 1:
        return None
    shape = (len(rows[0]),) if vector else (len(rows), len(rows[0]))
    try:
        grid = np.broadcast_to(np.array(expected, dtype=object), shape).tolist()
    except (ValueError, TypeError):  # not broadcastable, or ragged
        return None
    grid = [grid] if vector else grid
    return grid if all(_is_number(v) for row in grid for v in row) else None


def mask_for(r: ScenarioResult | None, name: str, explicit: str | None = None) -> tuple[list[list[Any]] | None, str | None]:
    """The scenario's mask for tensor `name`: the invariant's own `mask`, else the one the
    boundary port names (boundaries.Port.mask), taken from the result's inputs."""
    if r is None:
        return None, None
    mask_name = explicit
    if mask_name is None:
        try:
            b = boundaries.get(r.boundary)
        except KeyError:
            b = None
        port = b and (b.output(name) or b.input(name))
        mask_name = port.mask if port else None
    if mask_name is None:
        return None, None
    mask = r.inputs.get(mask_name)
    if isinstance(mask, list) and mask and not isinstance(mask[0], list):
        mask = [mask]
    return (mask, mask_name) if isinstance(mask, list) else (None, None)


def _grid(r: ScenarioResult | None, name: str, observed: Any, expected: Any = None, positions: list[list[int]] = (),
          explicit_mask: str | None = None) -> Grid | None:
    rows = as_rows(observed)
    if rows is None:
        return None
    vector = rows is not observed
    exp = fitted(expected, rows, vector)
    bad: set[tuple[int, int]] = set()
    for p in positions:
        if len(p) >= 2:
            bad.add((p[0], p[1]))
        elif len(p) == 1 and vector:
            bad.add((0, p[0]))
        elif len(p) == 1 and p[0] < len(rows):  # a whole row of a token grid
            bad |= {(p[0], j) for j in range(len(rows[p[0]]))}
    mask, mask_name = mask_for(r, name, explicit_mask)
    if not _same_shape(mask, rows):
        mask, mask_name = None, None
    return Grid(name, rows, exp, bad, mask, mask_name, vector)


def invariant_grid(r: ScenarioResult | None, inv: InvariantResult) -> Grid | None:
    """The per-token grid of a non-held invariant, or None (a scalar, no output named); with
    the scenario's mask when its result `r` is given."""
    name = output_name(inv) or inv.family
    cfg = next(iter(inv.config.values()), None)
    explicit = cfg.get("mask") if isinstance(cfg, dict) and isinstance(cfg.get("mask"), str) else None
    g = _grid(r, name, inv.observed, inv.expected, inv.positions, explicit)
    if g is not None:
        g.observed_as, g.expected_as = value_labels(inv)
    return g


def value_grids(r: ScenarioResult, which: str = "observations") -> list[Grid]:
    """Every per-token (or per-row) tensor of the base run's outputs (`observations`) or of its
    `inputs`, each with its mask."""
    out = []
    for name, values in getattr(r, which).items():
        g = _grid(r, name, values)
        if g is not None:
            out.append(g)
    return out


def offending(inv: InvariantResult) -> bool:
    """Positions other than `[[]]` (which a scalar output reports)."""
    return any(p for p in inv.positions)


def ordered(report: Report) -> tuple[list[list[ScenarioResult]], list[list[ScenarioResult]]]:
    """Results grouped by scenario id: (groups with a violation or an error, the others), worst
    first: by compare verdict in a compare report, else by the worst scenario verdict."""
    groups: dict[str, list[ScenarioResult]] = {}
    for r in report.results:
        groups.setdefault(r.id, []).append(r)
    compared = {c.id: COMPARE_ORDER[c.verdict] for c in report.comparisons}
    ranked = sorted(groups.values(), key=lambda rs: (compared.get(rs[0].id, 0), min(SCENARIO_ORDER[r.verdict] for r in rs)))
    bad = [rs for rs in ranked if any(r.verdict in ("violated", "error") for r in rs)]
    return bad, [rs for rs in ranked if rs not in bad]


def _named(ids: list[str], verdict: str, code: Callable[[str], str]) -> str:
    return (", ".join(code(i) for i in ids) if len(ids) <= 3 else str(len(ids))) + f" {verdict}"


def verdict_word(report: Report) -> str:
    """PASS, FAIL, or NOTHING RAN (every scenario unsupported or excluded: exit 5, not a pass)."""
    return "NOTHING RAN" if report.nothing_ran() else "PASS" if report.success else "FAIL"


def headline(report: Report, code: Callable[[str], str] = str) -> str:
    """The verdict in one line: PASS, FAIL or NOTHING RAN, then the failing scenarios (or
    compare verdicts) by name (each as `code` makes it), up to three of each, and the rest counted."""
    word = verdict_word(report)
    if report.comparisons:
        groups: dict[str, list[str]] = {}
        for c in sorted(report.comparisons, key=lambda c: COMPARE_ORDER[c.verdict]):
            groups.setdefault(c.verdict, []).append(c.id)
        bits = [_named(ids, v, code) if v != "holds-both" else f"{len(ids)} {v}" for v, ids in groups.items()]
        return f"compare {word}: " + " · ".join(bits)
    ids = {v: list(dict.fromkeys(r.id for r in report.results if r.verdict == v)) for v in ("violated", "error")}
    s = report.statistics
    bits = [_named(ids[v], v, code) for v in ("violated", "error") if ids[v]]
    bits += [f"{n} {w}" for n, w in ((s.holds, "hold"), (s.unsupported, "unsupported"), (s.excluded, "excluded")) if n]
    return f"{word}: " + (" · ".join(bits) or "nothing ran")


def number(x: Any, digits: int = 4) -> str:
    """A short form of a value for a grid cell: 0, 1, 0.25, -0.09197, nan."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "null" if x is None else str(x)
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return f"{x:.{digits}g}"


def value_labels(inv) -> tuple[str, str]:
    """How to name an invariant result's observed and expected values: "observed" and
    "expected", or, for a family that compares two runs, the variant run and the base run
    (an "expected nan" would call the base run's NaN the expectation)."""
    d = inv.details or {}
    return d.get("observed_as", "observed"), d.get("expected_as", "expected")


def cell_pair(observed: Any, expected: Any) -> tuple[str, str]:
    """Short forms of an observed and an expected value, longer when the short ones agree."""
    a, b = number(observed), number(expected)
    if a == b and observed != expected:
        a, b = repr(observed), repr(expected)
    return a, b
