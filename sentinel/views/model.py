"""The view model of a report: what every format shows of it, decided once per report kind.

A view is built from a report file or from a live command's report (`build`), so
`sentinel report FILE` and the command that wrote FILE show the same thing. Kinds:

- run: `sentinel run`; gate: `sentinel gate` (a run report whose command is `gate`);
  matrix: `sentinel matrix` (a run report carrying its table in `extra.matrix`);
- compare, hunt, history, mutate: the report's own `kind`;
- bisect: the bisect log of `sentinel bisect -o` (plain JSON, not a run report).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ..report import HistoryCommit, HistoryFlip, InvariantResult, Report, ReportError, ScenarioResult, load as load_report
from .palette import COMPARE_ORDER, SCENARIO_ORDER

KINDS = ("run", "gate", "compare", "bisect", "matrix", "hunt", "history", "mutate")


@dataclass
class View:
    kind: ClassVar[str]
    report: Report
    source: str | None = None  # the file it was read from, when it was

    def exit_code(self) -> int:
        return self.report.exit_code()

    @property
    def success(self) -> bool:
        return self.report.success


# --- run, gate, compare, matrix ---------------------------------------------------------

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


@dataclass
class RunView(View):
    kind = "run"

    def headline(self, code: Callable[[str], str] = str) -> str:
        return headline(self.report, code)

    def groups(self) -> tuple[list[list[ScenarioResult]], list[list[ScenarioResult]]]:
        return ordered(self.report)

    def violations(self) -> list[ScenarioResult]:
        return [r for rs in self.groups()[0] for r in rs if r.verdict == "violated"]


class GateView(RunView):
    kind = "gate"


class CompareView(RunView):
    kind = "compare"

    def comparisons(self):
        return sorted(self.report.comparisons, key=lambda c: COMPARE_ORDER[c.verdict])

    def side_counts(self, side: str) -> str:
        """`1 violated · 2 hold` for the base or the head."""
        rs = [r for r in self.report.results if r.target == side]
        counts = {v: sum(r.verdict == v for r in rs) for v in SCENARIO_ORDER}
        return " · ".join(f"{n} {'hold' if v == 'holds' else v}" for v, n in counts.items() if n) or "nothing"


class MatrixView(RunView):
    kind = "matrix"

    @property
    def table(self) -> dict[str, Any]:
        return self.report.extra["matrix"]


# --- hunt, history, mutate ---------------------------------------------------------------

class HuntView(RunView):
    kind = "hunt"

    @property
    def hunt(self):
        return self.report.hunt

    def word(self) -> str:
        code = self.exit_code()
        return "FOUND" if self.hunt.findings else {3: "TARGET ERROR", 5: "NOTHING RAN"}.get(code, "NOTHING FOUND")

    def headline(self, code: Callable[[str], str] = str) -> str:
        h = self.hunt
        v = h.verdicts
        counts = [f"{v[w]} {w}" for w in ("holds", "untested", "stopped", "unsupported", "error") if v.get(w)]
        found = [code(f.property) for f in h.findings][:3] + ([f"{len(h.findings) - 3} more"] if len(h.findings) > 3 else [])
        return f"hunt {self.word()}: " + " · ".join([f"{len(h.findings)} finding(s)" + (f" ({', '.join(found)})" if found else ""),
                                                     *counts])


@dataclass
class HistoryView(View):
    kind = "history"

    @property
    def history(self):
        return self.report.history

    def evaluated(self) -> list[HistoryCommit]:
        return [c for c in self.history.commits if c.role in ("sample", "probe")]

    def scenario_order(self) -> list[str]:
        """Scenarios that flip first (in the order their first flip happened), then the rest."""
        flipped = list(dict.fromkeys(f.scenario for f in self.history.flips))
        return flipped + [s for s in self.history.scenarios if s not in flipped]

    def summary_line(self) -> str:
        h, c = self.history, self.history.cost
        grey = sum(1 for x in self.evaluated() if x.load_error)
        return (f"{c.commits_in_range} commits: {c.samples} sampled (every {h.stride}), {c.probes} probed by bisects, "
                f"{c.skipped_no_loss_path} skipped (no loss-path change), {grey} not loading; {len(h.flips)} flip(s); "
                f"{c.runs} runs vs {c.exhaustive_runs} exhaustive ({c.cached} from cache), {c.duration_s:.1f} s "
                f"on {h.executor} x{h.jobs}")

    @staticmethod
    def focus(r: ScenarioResult, f: HistoryFlip) -> list[InvariantResult]:
        """The invariants that decided a flip: those violated on either side, on side `r`."""
        other = f.after if r is f.before else f.before
        bad = {i for i, inv in enumerate(r.invariants) if inv.verdict != "held"}
        bad |= {i for i, inv in enumerate(other.invariants) if inv.verdict != "held"}
        return [inv for i, inv in enumerate(r.invariants) if i in bad]

    def headline(self, code: Callable[[str], str] = str) -> str:
        h = self.history
        flips = [f"{code(f.scenario)} {f.change} at {f.commit[:10] if f.commit else '?'}" for f in h.flips[:3]]
        more = [f"{len(h.flips) - 3} more flip(s)"] if len(h.flips) > 3 else []
        return (f"history {h.target} {h.since}..{h.until}: " + (" · ".join(flips + more) if flips else "no flip"))

    def exit_code(self) -> int:
        from ..history import exit_code
        return int(exit_code(self.report))


MUTATE_HEAD = ["", "mutants", "killed", "survived", "not reached", "equivalent", "error", "score"]
# survivors by whether their change ran (MutantRecord.reached), in the order the views list them
REACH_GROUPS = ((True, "reached, not told apart: a missing check"), (None, "reach unknown"),
                (False, "not reached: reach work"))


def pct(c, field: str = "score") -> str:
    """A mutation score (c's `field`) as a percentage (n/a when every mutant was equivalent or an error)."""
    score = getattr(c, field)
    return "n/a" if score is None else f"{100 * score:.1f}%"


@dataclass
class MutateView(View):
    kind = "mutate"

    def tables(self) -> list[tuple[str, list[list[str]]]]:
        """The score tables, by target, boundary and operator: rows under MUTATE_HEAD."""
        s = self.mutate

        def rows(table) -> list[list[str]]:
            return [[name, str(c.mutants), str(c.killed), str(c.survived), str(c.survived_unreached), str(c.equivalent),
                     str(c.error), pct(c)] for name, c in table.items()]
        return [("target", rows({s.target: s.totals})), ("boundary", rows(s.by_boundary)), ("operator", rows(s.by_operator))]

    def survivor_groups(self) -> list[tuple[str, list]]:
        """The survivors as (title, records) by reach (REACH_GROUPS), empty groups left out."""
        survivors = [m for m in self.mutate.mutants if m.verdict == "survived"]
        groups = [(title, [m for m in survivors if m.reached is r]) for r, title in REACH_GROUPS]
        return [(t, g) for t, g in groups if g]

    @staticmethod
    def hunt_examples(m) -> str:
        """A mutant's hunt examples per boundary, where probes stopped some, where it was hunted on, and a
        survivor's reason (a hunt the cap left short of its floor or claim, a failed hunt)."""
        out = f"hunt examples {', '.join(f'{b} {n}' for b, n in m.examples.items()) or 'none'}"
        out += f" (hunted past the probe on {', '.join(m.hunted)} only)" if m.hunted else ""
        return out + (f"; {m.reason}" if m.verdict == "survived" and m.reason else "")

    def hunt_line(self) -> str:
        """The hunt each mutant the catalog left alive had: its budget, and a survivor's floor."""
        s = self.mutate
        floor = (f", a survivor's at least {s.survivor_examples} examples on each boundary it hunts"
                 if s.survivor_examples and s.budget_s else "")
        return f"hunt {s.budget_s:g} s per mutant the catalog leaves alive{floor} (seed {s.seed})"

    def reach_line(self) -> str:
        """The survivors by reach, and the score over the mutants whose change ran ('' with none unreached)."""
        c = self.mutate.totals
        if not c.survived_unreached:
            return ""
        return (f"{c.survived_unreached} of {c.survived} survivors never ran their change (reach work), "
                f"{c.survived_reached} ran it (a missing check); score over the mutants not proven unreached "
                f"{pct(c, 'score_reached')} = killed {c.killed} / (mutants - equivalent - error - not reached "
                f"{c.survived_unreached})")

    def claims_line(self) -> str:
        """Which equivalence claims were read: a run that read none scores every survivor against the target."""
        s = self.mutate
        if not s.equivalent_file:
            return ("equivalence claims: none read (no --equivalent, and no equivalent.yaml in the working folder): "
                    "every survivor counts against the score")
        read = "" if s.equivalent_claims is None else f"{s.equivalent_claims} in the file, "
        return (f"equivalence claims: {s.equivalent_file} ({read}{s.totals.equivalent} honoured, "
                f"{len(s.stale_equivalents)} stale for this target)")

    @property
    def mutate(self):
        return self.report.mutate

    def exit_code(self) -> int:
        return 0 if self.report.success else 1

    def headline(self, code: Callable[[str], str] = str) -> str:
        s = self.mutate
        return f"mutation score {s.target}: {pct(s.totals)} ({s.totals.killed} killed, {s.totals.survived} survived)"


# --- bisect ----------------------------------------------------------------------------

class BisectProbe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    commit: str
    subject: str
    verdict: str
    reason: str = ""


class BisectLog(BaseModel):
    """The file `sentinel bisect -o` writes (sentinel/compare.py: bisect_report)."""
    model_config = ConfigDict(extra="forbid")
    kind: str = "bisect"
    scenario: str
    target: str
    repo: str
    created_at: str
    good_verdict: str
    bad_verdict: str
    first: BisectProbe | None
    candidates: list[str] = []
    commits_in_range: int
    tried: int
    probes: list[BisectProbe] = []
    duration_s: float
    command: list[str] = []


@dataclass
class BisectView:
    log: BisectLog
    source: str | None = None
    report: None = field(default=None, init=False)
    kind: ClassVar[str] = "bisect"

    @property
    def success(self) -> bool:
        return self.log.first is not None

    def exit_code(self) -> int:
        return 0 if self.log.first else 3

    def headline(self, code: Callable[[str], str] = str) -> str:
        b = self.log
        if b.first:
            return (f"bisect: {code(b.first.commit[:10])} is the first commit where {code(b.scenario)} is "
                    f"{b.bad_verdict} (was {b.good_verdict})")
        return f"bisect: skipped commits leave {len(b.candidates)} candidates for {code(b.scenario)}"


AnyView = View | BisectView


def build(data: Report | dict | BisectLog, source: str | None = None) -> AnyView:
    """The view of a report (or of a bisect log, as a dict or a model)."""
    if isinstance(data, dict):
        data = BisectLog.model_validate(data)
    if isinstance(data, BisectLog):
        return BisectView(data, source)
    r = data
    if r.kind == "run":
        cls = MatrixView if "matrix" in r.extra else GateView if r.command[1:2] == ["gate"] else RunView
    else:
        cls = {"compare": CompareView, "hunt": HuntView, "history": HistoryView, "mutate": MutateView}[r.kind]
    return cls(r, source)


def load(path: str | Path) -> AnyView:
    """The view of a report file; ReportError says what is wrong with it."""
    try:
        data = json.loads(Path(path).read_bytes())
    except (ValueError, UnicodeDecodeError):
        data = None  # report.load names the byte
    if isinstance(data, dict) and data.get("kind") == "bisect":
        try:
            return BisectView(BisectLog.model_validate(data), str(path))
        except ValidationError as e:
            raise ReportError("a bisect log: " + "; ".join(f"field {'.'.join(map(str, x['loc']))}: {x['msg']}"
                                                         for x in e.errors()[:5])) from None
    return build(load_report(path), str(path))
