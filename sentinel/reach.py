"""Reach: what a hunt made the trainer's code do (torch-free, in the CLI's process).

Options: per boundary, the options the trainer's code read during the hunt (recorded in the
worker's child by `sentinel.adapters.options`), which of them took more than one value
(varied), which the adapter pins on purpose (with its reason), and the rest: read but never
varied, the options whose branches the hunt cannot have explored.

Coverage (`sentinel hunt --coverage`): per mapped function, the branches of its body the
hunt executed (`sentinel.coverage` measures them).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class BoundaryOptions(_Model):
    """The options of one boundary's trainer config, as the hunt met them."""

    boundary: str
    options_read: dict[str, list[Any]] = Field(default_factory=dict, description="option -> the values the trainer read")
    options_varied: list[str] = Field(default_factory=list, description="read with more than one value")
    options_pinned: dict[str, str] = Field(default_factory=dict, description="read at one value, pinned by the "
                                           "adapter: option -> its declared reason")
    options_read_not_varied: list[str] = Field(default_factory=list, description="read at one value with no "
                                               "declared reason: branches on them were not explored")


class Branch(_Model):
    line: int
    condition: str = Field("", description="the source text of the line that branches")
    missing: list[int] = Field(default_factory=list, description="destination lines never reached (-n: exit)")
    reason: str = Field("", description="unreachable: the adapter's declared reason")


class FunctionCoverage(_Model):
    """The branch coverage of one mapped function's body."""

    function: str = Field(description="module:qualname")
    file: str = ""
    lines: list[int] = Field(default_factory=list, description="first and last line of the body")
    branches_total: int = 0
    branches_covered: int = 0
    branches_unreachable: list[Branch] = Field(default_factory=list)
    uncovered: list[Branch] = Field(default_factory=list, description="reachable branches never taken")
    lines_missing: list[int] = Field(default_factory=list)

    @property
    def reachable(self) -> int:
        return self.branches_total - sum(len(b.missing) for b in self.branches_unreachable)


def boundary_options(read: dict[str, dict[str, list[Any]]], pinned: dict[str, dict[str, str]]) -> list[BoundaryOptions]:
    """From boundary -> option -> values read (merged over rounds) and boundary -> the
    adapter's pins, the report's entries."""
    out = []
    for b in sorted(read):
        opts = read[b]
        varied = sorted(n for n, vs in opts.items() if len(vs) > 1)
        pins = {n: r for n, r in (pinned.get(b) or {}).items() if n in opts and n not in varied}
        rest = sorted(n for n in opts if n not in varied and n not in pins)
        out.append(BoundaryOptions(boundary=b, options_read={n: opts[n] for n in sorted(opts)}, options_varied=varied,
                                   options_pinned=dict(sorted(pins.items())), options_read_not_varied=rest))
    return out


def merge_read(mine: dict[str, list[Any]], read: dict[str, list[Any]]) -> None:
    """Fold reads (option -> values) into `mine`, values kept distinct."""
    for name, values in read.items():
        have = mine.setdefault(name, [])
        seen = {repr(h) for h in have}  # repr: 1, 1.0 and True are three values read
        have += [v for v in values if repr(v) not in seen]
