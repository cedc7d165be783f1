"""What a hunt runs with (`HuntSettings`) and where each property stands (`PropertyState`).

The driver folds each round's result into its property's state (`PropertyState.merge`) and
decides, from the states, when the hunt is over; the property's verdict is then decided by
`sentinel.verdicts.hunt_property_verdict` and the hunt report assembled from the states.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...reach import merge_read
from ...report import write_atomic
from ..properties import SHRINK_TIME, Property


@dataclass(frozen=True)
class HuntSettings:
    """The options of `sentinel hunt` (see `hunt.hunt`)."""

    boundaries: list[str] | None = None
    families: list[str] | None = None
    names: list[str] | None = None
    max_examples: int = 300  # per property: then it is finished
    min_examples: int = 100  # per property: fewer when the search is cut off is `stopped`, not `holds`
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
    config: dict[str, Any] = field(default_factory=dict)  # pinned config choices (--config key=value)
    known: list[dict[str, Any]] = field(default_factory=list)  # signatures excluded from the start
    replay: list[dict[str, Any]] = field(default_factory=list)  # known findings given as examples
    coverage: str | None = None  # --coverage: the folder the rounds write coverage data to

    @property
    def minimum(self) -> int:
        return min(self.min_examples, self.max_examples)


@dataclass
class Found:
    """One finding of a property: the round's finding, when, and its written scenario."""

    finding: dict[str, Any]
    examples_to_first: int
    time_to_first_s: float  # the property's own search seconds
    hunt_elapsed_s: float  # the hunt's search seconds
    shrink_calls: int = 0
    document: tuple[str, str] | None = None  # (scenario id, YAML text)
    verdict: str | None = None  # the written scenario's verdict on the target (None: not verified)
    file: str | None = None


@dataclass
class PropertyState:
    """One property over the rounds of a hunt: counts, status, findings, known signatures."""

    prop: Property
    examples: int = 0
    rejected: int = 0
    errors: int = 0
    shrink_calls: int = 0
    rounds: int = 0
    empty_rounds: int = 0
    secondary_seen: int = 0  # differential: examples passed over that differed on extras only (search.py)
    duration_s: float = 0.0  # this property's own search seconds
    share_s: float = 0.0  # the search seconds its rounds were allotted (`Hunt.share`)
    cpu_s: float = 0.0  # CPU seconds its rounds took in the worker (what a loaded machine does not inflate)
    status: str = "running"  # running | finished | unsupported | error; the verdict comes at the end
    verdict: str | None = None
    reason: str = ""
    reasons: Counter = field(default_factory=Counter)  # rejected examples by reason
    preconditions: Counter = field(default_factory=Counter)  # "name: reason" -> examples a precondition excluded
    error_sample: dict | None = None
    exclude_reasons: dict = field(default_factory=dict)  # "key=value" -> why the target lacks it
    exclude: dict | None = None  # config choices the target does not have (probed in round 1)
    known: list[dict[str, Any]] = field(default_factory=list)  # signatures (with their source) not to report
    excluded: Counter = field(default_factory=Counter)  # known signature text -> violations passed over
    found: list[Found] = field(default_factory=list)
    # (hunt search seconds, examples so far, findings so far) at each round's start and end: the
    # report's progress over time (a round's examples arrive between its two samples)
    progress: list[tuple[float, int, int]] = field(default_factory=list)
    options_read: dict = field(default_factory=dict)  # option -> values the trainer read (reach.merge_read)
    options_pinned: dict = field(default_factory=dict)  # option -> the adapter's reason
    coverage_spans: list = field(default_factory=list)  # --coverage: the mapped functions' files and lines
    unreachable: dict = field(default_factory=dict)  # function -> {condition text -> the adapter's reason}

    def sample(self, hunt_s: float) -> None:
        """Record where this property stands `hunt_s` search seconds into the hunt."""
        self.progress.append((round(hunt_s, 3), self.examples, len(self.found)))

    @property
    def done(self) -> bool:
        """No more rounds: finished, unsupported or an error."""
        return self.status != "running"

    @property
    def decided(self) -> bool:
        """It has an answer (`--until`): a finding, or no more rounds."""
        return self.done or bool(self.found)

    def merge(self, res: dict[str, Any], max_examples: int, search_s: float) -> Found | None:
        """Fold in one round's result (run_round's dict, or an error); `search_s` is the
        hunt's search seconds when the round started. Returns the round's finding, if any."""
        self.rounds += 1
        if res.get("status") == "error":
            e = res.get("error") or {}
            self.status, self.reason = "error", f"{e.get('type', 'Error')}: {e.get('message', '')}"
            self.error_sample = {"type": e.get("type", "Error"), "message": e.get("message", ""),
                                 "traceback": e.get("traceback", "")}
            return None
        if res.get("not_applicable"):
            self.status, self.reason = "unsupported", f"not applicable to this target: {res['not_applicable']}"
            return None
        if self.exclude is None:
            self.exclude = res.get("exclude") or {}
            self.exclude_reasons = res.get("exclude_reasons") or {}
        for k in res.get("learned_known", []):
            if k not in self.known:
                self.known.append(k)
        before, before_s = self.examples, self.duration_s
        self.examples += res.get("examples", 0)
        self.rejected += res.get("rejected", 0)
        self.errors += res.get("errors", 0)
        self.shrink_calls += res.get("shrink_calls", 0)
        self.duration_s += res.get("duration_s", 0.0)
        self.cpu_s += res.get("cpu_s", 0.0)
        self.reasons.update(res.get("reasons") or {})
        self.excluded.update(res.get("excluded_known") or {})
        self.preconditions.update(res.get("preconditions") or {})
        opts = res.get("options") or {}
        merge_read(self.options_read, opts.get("read") or {})
        self.options_pinned.update(opts.get("pinned") or {})
        self.coverage_spans += [c for c in res.get("coverage_spans") or [] if c not in self.coverage_spans]
        self.unreachable.update(res.get("unreachable") or {})
        if res.get("error_sample") and self.error_sample is None:
            self.error_sample = res["error_sample"]
        found = None
        if res.get("finding"):
            f = res["finding"]
            found = Found(f, before + f["examples_to_first"], before_s + f["time_to_first_s"],
                          search_s + f["time_to_first_s"], res.get("shrink_calls", 0))
            self.found.append(found)
            self.known.append({**f["signature"], "source": "this hunt"})
            self.reason = f["outcome"]["message"]
        if not found and res.get("examples", 0) == 0 and not res.get("ran_out_of_time"):
            # nothing applicable was drawn this round (all rejected), or the space is exhausted
            self.empty_rounds += 1
            if self.examples == 0 and (self.empty_rounds >= 2 or res.get("rejected", 0) >= 50):
                if self.errors and self.error_sample:
                    self.status = "error"
                    self.reason = ("the target raised on every drawn example: "
                                   f"{self.error_sample['type']}: {self.error_sample['message'][:300]}")
                else:
                    self.status = "unsupported"
                    self.reason = ("not applicable to this target: "
                                   + ("; ".join(r for r, _ in self.reasons.most_common(3)) or res.get("note", "")))
            elif self.empty_rounds >= 3:
                self.status = "finished"
            return found
        self.empty_rounds = 0
        if self.examples >= max_examples:
            self.status = "finished"
        return found


def write_found(states: list[PropertyState], out: Path | None) -> None:
    """Write every finding's scenario under `out` (nothing when None); each Found learns its file."""
    if out is None:
        return
    for s in states:
        for f in s.found:
            if f.document:
                sid, text = f.document
                f.file = str(Path(out) / f"{sid}.yaml")
                write_atomic(f.file, text)
