"""What a hunt runs with (`HuntSettings`) and where each property stands (`PropertyState`).

The driver folds each round's result into its property's state (`PropertyState.merge`) and
decides, from the states, when the hunt is over; the hunt report is assembled from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .properties import SHRINK_TIME, Property


@dataclass(frozen=True)
class HuntSettings:
    """The options of `sentinel hunt` (see `hunt.hunt`)."""

    boundaries: list[str] | None = None
    families: list[str] | None = None
    names: list[str] | None = None
    max_examples: int = 300  # per property, before it is declared to hold
    time_budget: float = 60.0  # seconds of search in all
    seed: int | None = None
    database: str | None = None  # the example database's folder, resolved; None: no database
    out_dir: Path | None = None  # where findings are written as scenario YAML; None: not written
    timeout: float = 60.0
    shrink_time: float = SHRINK_TIME
    first: bool = False
    verify: bool = True
    jobs: int = 1
    until: list[str] | None = None


@dataclass
class PropertyState:
    """One property over the rounds of a hunt: counts, status, and its finding if any."""

    prop: Property
    examples: int = 0
    rejected: int = 0
    errors: int = 0
    shrink_calls: int = 0
    rounds: int = 0
    empty_rounds: int = 0
    duration_s: float = 0.0
    search_before: float = 0.0  # search seconds of the hunt before this property's current round
    status: str = "running"
    reason: str = ""
    reasons: list[str] = field(default_factory=list)
    preconditions: dict[str, int] = field(default_factory=dict)  # "name: reason" -> examples it excluded
    error_sample: dict | None = None
    exclude: dict | None = None  # config choices the target does not have (probed in round 1)
    finding: dict | None = None
    examples_to_first: int | None = None
    time_to_first_s: float | None = None
    document: tuple[str, str] | None = None  # the finding as (scenario id, YAML text)
    verdict: str | None = None  # the written scenario's verdict on the target (None: not verified)
    file: str | None = None  # where the YAML was written

    @property
    def done(self) -> bool:
        return self.status != "running"

    def merge(self, res: dict[str, Any], max_examples: int) -> None:
        """Fold in one round's result (run_round's dict, or an error)."""
        self.rounds += 1
        if res.get("status") == "error":
            e = res.get("error") or {}
            self.status, self.reason = "error", f"{e.get('type', 'Error')}: {e.get('message', '')}"
            self.error_sample = {"type": e.get("type", "Error"), "message": e.get("message", ""),
                                 "traceback": e.get("traceback", "")}
            return
        if res.get("not_applicable"):
            self.status, self.reason = "unsupported", f"not applicable to this target: {res['not_applicable']}"
            return
        if self.exclude is None:
            self.exclude = res.get("exclude") or {}
        before = self.examples
        self.examples += res.get("examples", 0)
        self.rejected += res.get("rejected", 0)
        self.errors += res.get("errors", 0)
        self.shrink_calls += res.get("shrink_calls", 0)
        self.duration_s += res.get("duration_s", 0.0)
        for r, n in (res.get("preconditions") or {}).items():
            self.preconditions[r] = self.preconditions.get(r, 0) + n
        for r in res.get("unsupported_reasons", []):
            if r not in self.reasons:
                self.reasons.append(r)
        if res.get("error_sample") and self.error_sample is None:
            self.error_sample = res["error_sample"]
        if res.get("finding"):
            f = res["finding"]
            self.finding = f
            self.status = "violated"
            self.examples_to_first = before + f["examples_to_first"]
            self.time_to_first_s = self.search_before + f["time_to_first_s"]
            self.reason = f["outcome"]["message"]
            return
        if res.get("examples", 0) == 0 and not res.get("ran_out_of_time"):
            # nothing applicable was drawn this round (all rejected), or the space is exhausted
            self.empty_rounds += 1
            if self.examples == 0 and (self.empty_rounds >= 2 or res.get("rejected", 0) >= 50):
                if self.errors and self.error_sample:
                    self.status = "error"
                    self.reason = ("the target raised on every drawn example: "
                                   f"{self.error_sample['type']}: {self.error_sample['message'][:300]}")
                else:
                    self.status = "unsupported"
                    why = self.reasons[:3] + [f"excluded by precondition {p}" for p in self.preconditions][:3]
                    self.reason = "not applicable to this target: " + ("; ".join(why) or res.get("note", ""))
            elif self.empty_rounds >= 3:
                self.status = "holds"
            return
        self.empty_rounds = 0
        if self.examples >= max_examples:
            self.status = "holds"
