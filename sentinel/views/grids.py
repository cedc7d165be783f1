"""An invariant's values as people read them: a per-token `Grid` (rows are sequences, columns
tokens) with the expected values, the offending cells and the scenario's mask for that
tensor, and the short forms of values (`fmt`, `number`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import boundaries
from ..report import InvariantResult, ScenarioResult


def fmt(x: Any) -> str:
    """A value in full: a float as Python writes it, a string as it is, anything else as JSON."""
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, str):
        return x
    return json.dumps(x)


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


def short(x: Any, limit: int = 160) -> str:
    """`fmt(x)`, cut to `limit` characters."""
    s = fmt(x)
    return s if len(s) <= limit else s[:limit - 3] + "..."


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
