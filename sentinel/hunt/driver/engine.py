"""The phases every hunt runs, in the CLI's process: `Hunt.run` = start, search, document,
write, then the report. The single-target hunt (`single.Hunter`) and the differential hunt
(`differential.DiffHunter`) each say how to start their workers, run a round, and document
a finding; when a hunt is over (`ExitReason`) and each property's verdict are decided here.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Callable

from ... import git, verdicts
from ...report import Report
from ...runner import TargetSpec
from .state import PropertyState, write_found


class ExitReason(Enum):
    """Why the search stopped."""

    finished = "every property has a verdict"
    time_budget = "the search time budget is spent"
    first_finding = "a finding, and the hunt stops at the first"
    until = "every property it was told to wait for has a verdict"
    target_error = "the target could not be loaded or run"


def resolved(spec: TargetSpec) -> TargetSpec:
    """`spec` with its commit resolved to the full hash that runs: labels, file names and
    headers name that commit (`--commit X^` must not be labelled with X's hash)."""
    if spec.repo and spec.commit and spec.commit != git.WORKTREE:
        try:
            sha, _ = git.resolve(Path(spec.repo), spec.commit)
        except git.GitError:
            return spec  # the checkout reports it as the target's load error
        return dataclasses.replace(spec, commit=sha)
    return spec


class Hunt:
    """One hunt: its settings, a `PropertyState` per property, and the phases `run` calls."""

    states: list[PropertyState]
    until: list[str] | None = None  # stop once these properties are decided

    def __init__(self, settings: Any, *, command: list[str] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None):
        self.settings, self.command = settings, command
        self.emit = on_event or (lambda e: None)
        self.t_start = time.perf_counter()
        self.created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.exit_reason: ExitReason | None = None
        self.t_search = self.search_s = 0.0
        self.deviations: dict[str, dict[str, Any]] = {}  # declared deviations met: name -> declaration, met, example

    def run(self) -> Report:
        """Hunt; the report of kind "hunt" (findings written as scenario YAML under out_dir)."""
        with ExitStack() as stack:  # checkouts and workers live until every finding is documented
            self.start(stack)
            self.search()
            self.document()
        self.write()
        return self.report()

    # --- the phases ----------------------------------------------------------------------

    def start(self, stack: ExitStack) -> None:
        """Check the targets out and start the workers; a target that cannot load sets
        `exit_reason` (target_error) and an error on every property."""
        raise NotImplementedError

    def search(self) -> None:
        """Rounds until the hunt is over (`rounds`); then every property has a verdict."""
        self.t_search = time.perf_counter()
        if self.exit_reason is None:
            self.rounds()
        self.search_s = time.perf_counter() - self.t_search
        for s in self.states:
            self.settle(s)

    def document(self) -> None:
        """Each finding as a scenario YAML (`Found.document`), loaded back and, with verify,
        run on the target(s) as `sentinel run` / `sentinel compare` would."""
        raise NotImplementedError

    def write(self) -> None:
        """Every finding's scenario under out_dir (none when it is None)."""
        write_found(self.states, self.settings.out_dir)

    def report(self) -> Report:
        raise NotImplementedError

    # --- what the phases share -----------------------------------------------------------

    def rounds(self) -> None:
        raise NotImplementedError

    def over(self) -> ExitReason | None:
        """Why the search stops now (None: it goes on)."""
        st, states = self.settings, self.states
        if time.perf_counter() - self.t_search >= st.time_budget:
            return ExitReason.time_budget
        if st.first and any(x.found for x in states):
            return ExitReason.first_finding
        if self.until and all(x.decided for x in states if x.prop.name in self.until):
            return ExitReason.until
        if all(x.done for x in states):
            return ExitReason.finished
        return None

    def share(self, s: PropertyState, left: float, lanes: int = 1) -> float:
        """The search seconds a round of `s` may take: the time left, split evenly among the
        running properties that have not had their turn in this cycle of rounds (`rounds` at
        most `s`'s; rounds go to the fewest first): no round takes another property's turn, and
        a round that ends early (its example quota) leaves its time to the rest. Lanes running
        side by side each spend the time left at once."""
        waiting = sum(1 for x in self.states if not x.done and x.rounds <= s.rounds) or 1
        return max(0.0, min(left, left * lanes / waiting))

    def settle(self, s: PropertyState) -> None:
        """A property's verdict once the search is over (`verdicts.hunt_property_verdict`)."""
        s.verdict = verdicts.hunt_property_verdict(s.status, s.examples, len(s.found), self.settings.minimum)
        if s.verdict == "stopped":
            s.reason = self.cut_off(s)
        elif s.verdict == "untested":
            s.reason = s.reason or self.untested

    untested = "no example ran before the hunt ended"

    def cut_off(self, s: PropertyState) -> str:
        return (f"cut off ({(self.exit_reason or ExitReason.time_budget).value}) after {s.examples} "
                f"example(s), before the minimum of {self.settings.minimum}")

    def merge_deviations(self, met: dict[str, dict[str, Any]]) -> None:
        """Fold a round's declared deviations (name -> declaration, met, first example) in."""
        for name, d in met.items():
            seen = self.deviations.setdefault(name, {**d, "met": 0})
            seen["met"] += d["met"]
            seen["example"] = seen.get("example") or d.get("example") or {}
