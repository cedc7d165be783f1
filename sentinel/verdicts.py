"""The verdict rules, in one place: what the words mean and how they combine.

- invariant: held | violated | error | skipped
- scenario on a target: holds | violated | error | unsupported | excluded
  (unsupported: the function or config value does not exist at that version; excluded: the
  input is one the trainer's real data path never produces, by a precondition its adapter
  declares, so no call is made. Neither settles the question, neither fails a run.)
- compare base -> head: fixed | regressed | still-violated | holds-both | inconclusive
- hunt property: holds | violated | untested | stopped | unsupported | error
- differential finding: fixed | regressed | changed | deviation (against the reference:
  bug | changed | deviation | reference-bug)
- exit codes: 0 all hold, 1 a violation, 2 bad usage or spec, 3 a target error and no violation,
  5 nothing ran (every scenario unsupported or excluded, every hunted property untested or
  stopped: as pytest's 5, "no tests collected", a green run that checked nothing is not a pass)

Pure functions over verdict words: the runner, compare, matrix, the hunt, gate and the
renderers ask here instead of deciding for themselves.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Iterable, Literal

InvariantVerdict = Literal["held", "violated", "error", "skipped"]
ScenarioVerdict = Literal["holds", "violated", "error", "unsupported", "excluded"]
CompareVerdict = Literal["fixed", "regressed", "still-violated", "holds-both", "inconclusive"]
HuntVerdict = Literal["holds", "violated", "untested", "stopped", "unsupported", "error"]
DiffVerdict = Literal["fixed", "regressed", "changed", "deviation", "bug", "reference-bug"]

# a scenario verdict that settles the question either way (error / unsupported do not)
DECIDED = ("holds", "violated")


class ExitCode(IntEnum):
    OK = 0
    VIOLATED = 1
    USAGE = 2  # bad usage or a bad scenario file (no report is written)
    TARGET_ERROR = 3  # a target could not be loaded or run, and nothing was violated
    NOTHING_RAN = 5  # no error, and nothing decided either way (pytest's 5: no tests collected)


def scenario_verdict(invariants: Iterable[tuple[str, str, str]]) -> tuple[ScenarioVerdict, str]:
    """A scenario's verdict and reason from its invariants' (family, verdict, message).

    Any violation makes it violated; else any invariant error makes it an error; only
    skipped invariants (nothing could be checked at this version) make it unsupported."""
    invariants = list(invariants)
    verdicts = {v for _, v, _ in invariants}
    if "violated" in verdicts:
        return "violated", "; ".join(f"{f}: {m}" for f, v, m in invariants if v == "violated")
    if "error" in verdicts:
        return "error", "an invariant could not be evaluated"
    if verdicts == {"skipped"}:
        return "unsupported", "; ".join(m for _, _, m in invariants)
    return "holds", ""


def nothing_ran(scenario_verdicts: Iterable[str]) -> bool:
    """No scenario was decided or failed: each was unsupported or excluded, or there were none
    (a hunt's untested and stopped properties carry no scenario result)."""
    return set(scenario_verdicts) <= {"unsupported", "excluded"}


def exit_code(scenario_verdicts: Iterable[str]) -> ExitCode:
    """0 all hold, 1 a violation, 3 a target error (a violation outranks an error), 5 nothing ran."""
    verdicts = set(scenario_verdicts)
    if "violated" in verdicts:
        return ExitCode.VIOLATED
    if "error" in verdicts:
        return ExitCode.TARGET_ERROR
    if nothing_ran(verdicts):
        return ExitCode.NOTHING_RAN
    return ExitCode.OK


def gate_exit_code(scenario_verdicts: Iterable[str], target: str) -> tuple[ExitCode, str]:
    """`sentinel gate`: as exit_code, and the reference must support every catalog scenario."""
    verdicts = list(scenario_verdicts)
    code = exit_code(verdicts)
    if code in (ExitCode.OK, ExitCode.NOTHING_RAN) and target == "reference" and "unsupported" in verdicts:
        return ExitCode.TARGET_ERROR, "the reference must support every catalog scenario"
    return code, ""


def compare_verdict(base: str, head: str) -> CompareVerdict:
    """fixed | regressed | still-violated | holds-both | inconclusive (an error or unsupported side)."""
    if base not in DECIDED or head not in DECIDED:
        return "inconclusive"
    return {("violated", "holds"): "fixed", ("holds", "violated"): "regressed",
            ("violated", "violated"): "still-violated", ("holds", "holds"): "holds-both"}[(base, head)]


def compare_success(compare_verdicts: Iterable[str]) -> bool:
    return all(v in ("fixed", "holds-both") for v in compare_verdicts)


def compare_exit_code(comparisons: Iterable[tuple[str, str, str]]) -> ExitCode:
    """From each scenario's (base, head, compare verdict): 1 something regressed or is still
    violated, 5 nothing ran on either side, 3 something else inconclusive, else 0."""
    comparisons = list(comparisons)
    verdicts = {v for _, _, v in comparisons}
    if verdicts & {"regressed", "still-violated"}:
        return ExitCode.VIOLATED
    if nothing_ran(side for b, h, _ in comparisons for side in (b, h)):
        return ExitCode.NOTHING_RAN
    if "inconclusive" in verdicts:
        return ExitCode.TARGET_ERROR
    return ExitCode.OK


def bisect_verdict(scenario: str) -> str:
    """A bisect probe: the scenario verdict, or `skip` where the target cannot decide."""
    return scenario if scenario in DECIDED else "skip"


def matrix_cell(scenario: str, invariant: str | None) -> str:
    """A matrix cell: the invariant's verdict, or the scenario's where it did not run."""
    return scenario if scenario in ("unsupported", "excluded", "error") or invariant is None else invariant


def run_success(statistics_violated: int, statistics_errors: int) -> bool:
    return statistics_violated == 0 and statistics_errors == 0


# --- hunts ------------------------------------------------------------------------------

def hunt_property_verdict(status: str, examples: int, findings: int, min_examples: int) -> HuntVerdict:
    """A hunted property's verdict once the search is over.

    status: where the search left it: `finished` (its examples reached the maximum, or the
    search space ran out), `running` (cut off by the budget or by -x), `unsupported`, `error`.
    A finding makes it violated whatever else happened; `holds` needs examples that ran:
    none is `untested`, fewer than `min_examples` when cut off is `stopped`."""
    if findings:
        return "violated"
    if status in ("unsupported", "error"):
        return status  # type: ignore[return-value]
    if examples == 0:
        return "untested"
    if status == "finished" or examples >= min_examples:
        return "holds"
    return "stopped"


def hunt_scenario_verdict(verdict: str) -> ScenarioVerdict | None:
    """The scenario verdict a hunt report's result carries for a property (None: the property
    has no result, only its hunt entry: untested and stopped properties decided nothing)."""
    return verdict if verdict in ("holds", "violated", "unsupported", "error") else None  # type: ignore[return-value]


def differential_verdict(base_violates: Iterable[str], head_violates: Iterable[str], against: bool = False) -> DiffVerdict:
    """A difference between two sides on one input, by the invariant families (properties)
    each side violates there: `fixed` when base violates one head satisfies and head none
    base satisfies, `regressed` the reverse, `changed` when no family explains it (or both
    ways). Against the reference (base = the reference, head = the target): `bug` (the
    target violates what the reference satisfies), `reference-bug` (the reverse)."""
    base, head = set(base_violates), set(head_violates)
    only_base, only_head = base - head, head - base
    if only_base and not only_head:
        return "reference-bug" if against else "fixed"
    if only_head and not only_base:
        return "bug" if against else "regressed"
    return "changed"


def referee_verdict(base_agrees: bool, head_agrees: bool) -> DiffVerdict:
    """A difference no family explains, judged by the reference on the same input: `fixed`
    when head agrees with the reference and base does not, `regressed` the reverse, else
    `changed` (hunt/driver/referee.py says when the reference cannot judge at all)."""
    if head_agrees and not base_agrees:
        return "fixed"
    if base_agrees and not head_agrees:
        return "regressed"
    return "changed"
