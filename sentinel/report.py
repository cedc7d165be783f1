"""The report: one versioned schema for every run, written atomically.

Shaped like a Great Expectations validation result: `success`, one result per scenario with
its invariants (each with its configuration, result and exception info), and statistics.
Content is deterministic apart from timestamps and durations.
"""

from __future__ import annotations

import json
import os
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import REPORT_SCHEMA_READS, REPORT_SCHEMA_VERSION, __version__, cleanup, verdicts
from .errors import SentinelError
from .reach import BoundaryOptions, FunctionCoverage
from .verdicts import CompareVerdict, DiffVerdict, HuntVerdict, InvariantVerdict, ScenarioVerdict

if TYPE_CHECKING:
    from .spec import Scenario


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class ExceptionInfo(_Model):
    type: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException, limit: int = 4000) -> "ExceptionInfo":
        """The exception's type, message (its repr when empty) and the tail of its traceback."""
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type=type(exc).__name__, message=str(exc) or repr(exc), traceback=tb[-limit:])


class InvariantResult(_Model):
    family: str
    config: dict[str, Any] = Field(description="the invariant as written in the scenario (expectation_config)")
    verdict: InvariantVerdict
    message: str = ""
    observed: Any = None
    expected: Any = None
    difference: Any = None
    positions: list[list[int]] = Field(default_factory=list, description="offending [row, token] indices")
    details: dict[str, Any] = Field(default_factory=dict)
    exception_info: ExceptionInfo | None = None


class FunctionInfo(_Model):
    module: str
    qualname: str
    file: str | None = None
    line: int | None = None
    also: list["FunctionInfo"] = Field(default_factory=list,
                                       description="Other target functions whose results are among the outputs.")

    def text(self, code: str = "") -> str:
        """`module.qualname (file:line)`, then `; also ...` for the others."""
        one = f"{code}{self.module}.{self.qualname}{code} ({self.file}:{self.line})"
        return one + "".join(f"; also {a.text(code)}" for a in self.also)


class Target(_Model):
    name: str
    repo: str | None = None
    commit: str | None = None
    subject: str | None = None
    dirty: bool | None = None
    version: str | None = None
    plant: str | None = None
    device: str = "cpu"
    stubs: list[str] = Field(default_factory=list, description="modules replaced by import shims")
    import_s: float | None = None
    load_error: ExceptionInfo | None = None


class ScenarioResult(_Model):
    id: str
    title: str
    boundary: str
    file: str
    target: str = Field(description="key into Report.targets")
    verdict: ScenarioVerdict
    reason: str = ""
    precondition: str | None = Field(None, description="verdict excluded: the adapter's precondition that "
                                                       "excluded the input (one the trainer never receives)")
    invariants: list[InvariantResult] = Field(default_factory=list)
    inputs: dict[str, Any] = Field(default_factory=dict, description="canonical trigger (base run)")
    config: dict[str, Any] = Field(default_factory=dict)
    observations: dict[str, Any] = Field(default_factory=dict, description="base-run outputs")
    function: FunctionInfo | None = None
    exception_info: ExceptionInfo | None = None
    provenance: list[str] = Field(default_factory=list)
    duration_s: float = 0.0

    @classmethod
    def for_scenario(cls, sc: "Scenario", target: str, verdict: ScenarioVerdict, reason: str = "",
                     **fields: Any) -> "ScenarioResult":
        """A result for scenario `sc` on `target`, naming the scenario as every result does."""
        base = dict(id=sc.id, title=sc.title, boundary=sc.boundary, file=sc.file, provenance=sc.provenance)
        return cls(**{**base, **fields}, target=target, verdict=verdict, reason=reason)


class Comparison(_Model):
    id: str
    verdict: CompareVerdict
    base: ScenarioVerdict
    head: ScenarioVerdict


class Statistics(_Model):
    evaluated: int = 0
    holds: int = 0
    violated: int = 0
    errors: int = 0
    unsupported: int = 0
    excluded: int = 0
    invariants_held: int = 0
    invariants_violated: int = 0
    invariants_errors: int = 0
    invariants_skipped: int = 0


class Environment(_Model):
    tool: str = "rl-sentinel"
    tool_version: str = Field(default_factory=lambda: __version__)  # from git tags: not a schema constant
    python: str | None = None
    torch: str | None = None
    platform: str | None = None
    device: str | None = None
    device_name: str | None = None


class HuntSignature(_Model):
    """What makes two findings one bug (sentinel/hunt/signature.py)."""

    property: str
    observable: str = Field("", description="what fails or differs: an output, grad:OUT/IN, input:IN, exception")
    config: dict[str, list[Any]] = Field(default_factory=dict,
                                         description="config keys that matter, with the choices the failure persists under")
    position: list[str] = Field(default_factory=list, description="masked-head / masked-interior / masked-tail / "
                                "masked-row, group-boundary, non-finite: what the failure needs")


class HuntSide(_Model):
    """One side of a differential finding: its values where the sides differ, and the
    properties it violates on that input."""

    target: str = Field(description="key into Report.targets")
    values: Any = None
    violates: list[str] = Field(default_factory=list, description="properties violated on this input")
    holds: list[str] = Field(default_factory=list, description="properties checked and held on this input")
    error: str | None = Field(None, description="the exception this side raised on the input, if any")


class HuntFinding(_Model):
    """One minimal counterexample `sentinel hunt` found and wrote as a scenario file."""

    property: str = Field(description="boundary.family[.qualifier], e.g. opsm_mask.sequence_uniform; "
                                      "boundary.differential for a difference between two sides")
    boundary: str
    family: str
    scenario_id: str
    file: str | None = Field(None, description="the scenario YAML written for it (sentinel run reproduces it; a "
                                               "differential one is replayed with sentinel compare)")
    rows: int = Field(description="batch size of the shrunk trigger")
    tokens: int = Field(description="sequence length of the shrunk trigger (0 for row-only boundaries)")
    valid_tokens: int = Field(0, description="loss_mask ones in the shrunk trigger")
    examples_to_first: int = Field(description="examples of this property tried before it (all rounds)")
    time_to_first_s: float = Field(description="search seconds of this property before it (all rounds)")
    hunt_elapsed_s: float | None = Field(None, description="search seconds of the whole hunt when it was found")
    shrink_calls: int = 0
    message: str = ""
    reproduced: bool | None = Field(None, description="the written scenario, run as `sentinel run` runs it, "
                                                       "is violated on this target (None: not checked)")
    signature: HuntSignature | None = None
    classification: DiffVerdict | None = Field(None, description="differential findings: fixed, regressed, "
                                               "changed; against the reference bug, changed, reference-bug")
    judged_by: Literal["families", "reference"] | None = Field(
        None, description="differential findings: what decided the classification: the invariant families each "
                          "side violates, or (no family explains it) the reference math on the same input")
    referee: str | None = Field(None, description="judged by the reference: which side agrees with it, or why it "
                                                  "cannot judge (no such config, boundary or observable; a declared "
                                                  "deviation), which leaves the finding `changed`")
    base: HuntSide | None = None
    head: HuntSide | None = None
    config: dict[str, Any] = Field(default_factory=dict, description="the shrunk trigger's config")


class HuntKnown(_Model):
    """A signature excluded from the search: given with --known, or found earlier in this hunt."""

    signature: HuntSignature
    source: str = Field("", description="the report or scenario file it came from; 'this hunt' for its own findings")
    excluded: int = Field(0, description="violations with this signature met and passed over")


class HuntDeviation(_Model):
    """A difference from the reference the target's adapter declares as its documented convention
    (met as a difference against the reference, or as a violated formula property)."""

    name: str
    boundary: str
    reason: str
    link: str = ""
    observables: list[str] = Field(default_factory=list)
    config: dict[str, list[Any]] = Field(default_factory=dict)
    met: int = Field(0, description="differing examples it explained")
    example: dict[str, Any] = Field(default_factory=dict, description="the first such input (config and inputs)")
    source: str = Field("", description="the trainer function it excuses (module:qualname), where declared")
    body: list[str] = Field(default_factory=list, description="the hashes of that function's body it was declared for")
    hash_now: str | None = Field(None, description="the hash of that body at the hunted checkout")
    applies: bool = Field(True, description="false: the code it excuses changed (or the commit is outside its "
                          "range): it explained nothing, what it would have explained is reported")
    skipped: str = Field("", description="why it does not apply here")


class HuntSample(_Model):
    """Where a property stood at one moment of a hunt (at each round's start and end)."""

    s: float = Field(description="search seconds of the whole hunt")
    examples: int = Field(description="examples of this property so far")
    findings: int = Field(description="findings of this property so far")


class HuntProperty(_Model):
    """One property hunted: a generic invariant family on a boundary, over generated inputs."""

    property: str
    boundary: str
    family: str
    doc: str = ""
    status: HuntVerdict = Field(description="holds (its examples ran, none violated) · violated · untested (no "
                                "example ran) · stopped (cut off by the budget or -x before min_examples) · "
                                "unsupported · error")
    reason: str = ""
    examples: int = Field(0, description="examples whose invariant was evaluated (generation phase)")
    rejected: int = Field(0, description="examples not applicable: config unsupported by the target, precondition unmet")
    rejections: dict[str, int] = Field(default_factory=dict, description="rejected examples by reason")
    errors: int = Field(0, description="examples on which the target raised")
    shrink_calls: int = 0
    rounds: int = 0
    duration_s: float = Field(0.0, description="this property's own search seconds (all rounds)")
    share_s: float = Field(0.0, description="the search seconds its rounds were allotted: the time left split "
                           "evenly among the properties still running, each round in turn")
    findings: int = Field(0, description="distinct findings (signatures) on this property")
    progress: list[HuntSample] = Field(default_factory=list, description="examples and findings over the hunt's "
                                       "search seconds (schema 1.1; empty in a 1.0 report)")
    excluded_known: dict[str, int] = Field(default_factory=dict,
                                           description="violations passed over as a known signature, by signature")
    unsupported_reasons: list[str] = Field(default_factory=list)
    preconditions: dict[str, int] = Field(
        default_factory=dict, description="examples not run because an adapter's declared precondition excluded "
                                          "them (an input the trainer never receives), per 'name: reason'")
    excluded_config: dict[str, list[Any]] = Field(
        default_factory=dict, description="config choices not drawn: the target raised Unsupported for them")
    error_sample: ExceptionInfo | None = None


class HuntDifferential(_Model):
    """A differential hunt: the same drawn inputs through two sides."""

    base: str = Field(description="key into Report.targets")
    head: str
    against_reference: bool = False
    atol: float
    rtol: float
    excluded_config: dict[str, dict[str, dict[str, list[Any]]]] = Field(
        default_factory=dict, description="side -> boundary -> config choices that side does not support (not drawn)")
    compared: int = Field(0, description="examples both sides ran and were compared")
    differing: int = Field(0, description="examples whose observations differed (findings, known, deviations)")


class HuntSummary(_Model):
    seed: int | None = None
    max_examples: int = Field(description="per property")
    min_examples: int = Field(0, description="per property: fewer, when cut off, is `stopped`")
    time_budget_s: float
    database: str | None = None
    out_dir: str | None = None
    exit_reason: str = ""
    examples: int = 0
    rejected: int = 0
    shrink_calls: int = 0
    search_s: float = Field(0.0, description="seconds spent in rounds (worker start excluded)")
    startup_s: float = 0.0
    examples_per_s: float = 0.0
    cpu_s: float = Field(0.0, description="CPU seconds of the rounds in the workers (single-target hunts)")
    examples_per_cpu_s: float = Field(0.0, description="examples per CPU second of the workers: throughput that "
                                      "a machine shared with other work does not hide")
    verdicts: dict[str, int] = Field(default_factory=dict, description="properties by verdict")
    invariants_per_boundary: dict[str, list[str]] = Field(default_factory=dict)
    properties: list[HuntProperty] = Field(default_factory=list)
    findings: list[HuntFinding] = Field(default_factory=list)
    known: list[HuntKnown] = Field(default_factory=list)
    deviations: list[HuntDeviation] = Field(default_factory=list, description="differences from the reference the "
                                            "target's adapter declares, met in this hunt: never findings")
    differential: HuntDifferential | None = None
    options: list[BoundaryOptions] = Field(default_factory=list, description="per boundary: the trainer options read, "
                                           "varied, pinned (with reasons) and read but never varied")
    coverage: list[FunctionCoverage] = Field(default_factory=list, description="--coverage: per mapped function, "
                                             "the branches of its body the catalog and the hunt executed")
    coverage_scenarios: int = Field(0, description="--coverage: the catalog scenarios of the hunted boundaries run "
                                    "(measured) before the search")


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under the process
        return None


class Report(_Model):
    schema_version: str = REPORT_SCHEMA_VERSION
    kind: Literal["run", "compare", "hunt", "history", "mutate"] = "run"
    success: bool
    created_at: str
    duration_s: float
    command: list[str] = Field(default_factory=list)
    cwd: str | None = Field(default_factory=lambda: _cwd(), description="the folder the command ran in: its relative "
                            "paths are relative to it, and so are the reproduce commands shown (schema 1.1)")
    environment: Environment
    targets: dict[str, Target]
    results: list[ScenarioResult]
    comparisons: list[Comparison] = Field(default_factory=list)
    statistics: Statistics
    extra: dict[str, Any] = Field(default_factory=dict)
    hunt: HuntSummary | None = Field(None, description="kind hunt: examples, time and findings of `sentinel hunt`")
    history: "HistorySummary | None" = Field(None, description="kind history: verdicts over a commit range and their flips")
    mutate: "MutateSummary | None" = Field(None, description="kind mutate: the mutation score of the catalog and hunt")

    def exit_code(self) -> int:
        """0 all hold, 1 a violation, 3 a target error, 5 nothing ran; a compare report by its
        comparisons (sentinel/verdicts.py decides)."""
        if self.kind == "compare":
            return int(verdicts.compare_exit_code((c.base, c.head, c.verdict) for c in self.comparisons))
        return int(verdicts.exit_code(r.verdict for r in self.results))

    def nothing_ran(self) -> bool:
        """Nothing was decided or failed: every scenario (on every side) unsupported or excluded."""
        return verdicts.exit_code(r.verdict for r in self.results) == verdicts.ExitCode.NOTHING_RAN


def statistics(results: list[ScenarioResult]) -> Statistics:
    s = Statistics(evaluated=len(results))
    scenario_key = {"holds": "holds", "violated": "violated", "error": "errors", "unsupported": "unsupported",
                    "excluded": "excluded"}
    invariant_key = {"held": "invariants_held", "violated": "invariants_violated", "error": "invariants_errors",
                     "skipped": "invariants_skipped"}
    keys = [scenario_key[r.verdict] for r in results] + [invariant_key[i.verdict] for r in results for i in r.invariants]
    for key in keys:
        setattr(s, key, getattr(s, key) + 1)
    return s


def write_atomic(path: str | Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: never a half-written report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in cleanup.stale_tmp_files(path):  # left by a writer that was killed mid-write
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # what open() would give; mkstemp's 0600 hides reports from CI readers
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def dump(report: Report) -> str:
    return report.model_dump_json(indent=2) + "\n"


class ReportError(SentinelError, ValueError):
    """A file that is not a valid report; the message says what is wrong and where."""


_EXPECTED = {"bool_type": "bool", "string_type": "string", "int_type": "integer", "float_type": "number",
             "list_type": "array", "dict_type": "object", "model_type": "object", "model_attributes_type": "object"}


def _field_problem(err: dict[str, Any]) -> str:
    where = "field " + (".".join(map(str, err["loc"])) or "(top level)")
    if err["type"] in _EXPECTED:
        got = json.dumps(err["input"], default=str)
        return f"{where}: expected {_EXPECTED[err['type']]}, got {got if len(got) <= 40 else got[:37] + '...'}"
    if err["type"] == "missing":
        return f"{where}: missing"
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown field"
    return f"{where}: {err['msg']}"


def load(path: str | Path) -> Report:
    """Read a report strictly (no coercion: `success: "yes"` is refused). ReportError names the
    byte where the JSON breaks (or is cut off) and every field that is wrong."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as e:
        raise ReportError(f"not UTF-8 at byte {e.start}") from None
    except json.JSONDecodeError as e:
        at = len(text[:e.pos].encode("utf-8"))
        if not text.strip():
            raise ReportError("an empty file") from None
        if not text[e.pos:].strip() or e.msg.startswith("Unterminated string"):
            raise ReportError(f"truncated at byte {len(raw)} (line {text.count(chr(10)) + 1}): {e.msg}") from None
        raise ReportError(f"invalid JSON at byte {at} (line {e.lineno}, column {e.colno}): {e.msg}") from None
    if isinstance(data, dict) and data.get("schema_version") not in REPORT_SCHEMA_READS:
        # another layout: its fields would be misread, not refused
        got = repr(data["schema_version"])[:40] if "schema_version" in data else "missing"
        raise ReportError(f"field schema_version: {got}, not a report schema this version reads "
                          f"({', '.join(map(repr, REPORT_SCHEMA_READS))})")
    try:
        return Report.model_validate_json(text, strict=True)
    except ValidationError as e:
        errs = e.errors()
        more = f"; and {len(errs) - 5} more" if len(errs) > 5 else ""
        raise ReportError("; ".join(_field_problem(x) for x in errs[:5]) + more) from None


def json_schema() -> dict[str, Any]:
    schema = Report.model_json_schema()
    schema["$id"] = f"https://rl-sentinel/report-{REPORT_SCHEMA_VERSION}.schema.json"
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


# --- kind history: `sentinel history` ----------------------------------------------------

HistoryCell = Literal["holds", "violated", "error", "unsupported", "not-loaded"]


class HistoryCommit(_Model):
    """One first-parent commit of the scanned range (and any commit a bisect probed)."""

    id: str = Field(description="full sha")
    date: str = Field(description="committer date, ISO 8601")
    subject: str
    pr: int | None = Field(None, description="pull request number, when the subject carries one (#123)")
    touches_loss_path: bool = Field(description="changes one of the target's loss-path files (vs its first parent)")
    role: Literal["sample", "probe", "skipped", "between"] = Field(
        description="sample: evaluated on the stride; probe: evaluated by a bisect; skipped: touches no "
                    "loss-path file; between: not evaluated (its verdicts are those of the sample before)")
    load_error: str | None = Field(None, description="why the target does not load here (shown grey, never blamed)")
    verdicts: dict[str, HistoryCell] = Field(default_factory=dict, description="scenario id -> verdict here")


class HistoryFlip(_Model):
    """A scenario whose verdict differs between two neighbouring samples, bisected to a commit."""

    scenario: str
    change: CompareVerdict = Field(description="fixed (violated -> holds) or regressed (holds -> violated)")
    commit: str | None = Field(None, description="the introducing or fixing commit; None when commits that do not "
                                                   "load leave several candidates")
    subject: str = ""
    pr: int | None = None
    date: str = ""
    candidates: list[str] = Field(default_factory=list)
    between: list[str] = Field(description="the two neighbouring samples the flip was found between")
    tried: int = Field(0, description="commits the bisect evaluated (probes, the two samples included)")
    source: Literal["catalog", "hunt"] = "catalog"
    before: ScenarioResult = Field(description="evidence: the scenario at the last commit with the old verdict")
    after: ScenarioResult = Field(description="evidence: the scenario at the flip commit")


class HistoryCost(_Model):
    commits_in_range: int
    skipped_no_loss_path: int = Field(description="commits touching no loss-path file (not evaluated)")
    samples: int
    probes: int = Field(description="commits evaluated by bisects")
    runs: int = Field(description="scenario evaluations the scan needed (cache hits included)")
    exhaustive_runs: int = Field(description="scenario evaluations of an exhaustive walk: commits x scenarios")
    evaluated: int = Field(description="scenario evaluations actually run (cache misses)")
    cached: int = Field(description="scenario evaluations answered from the cache")
    tasks: int = Field(description="commits evaluated through the executor (a commit's scenarios may go in several parts)")
    duration_s: float
    commits_per_minute_per_core: float = Field(0.0, description="commits evaluated per minute per core")


class HistorySummary(_Model):
    target: str
    repo: str
    since: str
    until: str
    first_parent: bool = True
    all_commits: bool = False
    stride: int
    executor: str
    jobs: int
    cache: str | None = None
    loss_path_files: list[str] = Field(default_factory=list)
    scenarios: list[str] = Field(default_factory=list)
    commits: list[HistoryCommit] = Field(default_factory=list, description="oldest first")
    flips: list[HistoryFlip] = Field(default_factory=list)
    hunt: str | None = Field(None, description="what the differential hunt did, or why it did not run")
    cost: HistoryCost


# --- kind mutate: `sentinel mutate` ------------------------------------------------------

MutantVerdict = Literal["killed", "survived", "equivalent", "error"]


class MutantRecord(_Model):
    """One mutant: one small change to one function a boundary maps (sentinel/mutate)."""

    id: str = Field(description="function#operator@key")
    function: str = Field(description="module:qualname")
    operator: str
    key: str = Field(description="stable hash of the change (kept when lines move): equivalent.yaml's key")
    position: str = Field(description="FILE:LINE:COLUMN of the changed node")
    boundaries: list[str] = Field(default_factory=list)
    diff: str = Field(description="unified diff of the function (as unparsed)")
    verdict: MutantVerdict
    killed_by: str | None = Field(None, description="the scenario (catalog) or the hunt's finding that killed it")
    stage: Literal["catalog", "hunt"] | None = None
    reason: str = Field("", description="error: what failed; equivalent: the reason recorded in equivalent.yaml")
    scenarios: int = Field(0, description="catalog scenarios run on it")
    examples: dict[str, int] = Field(default_factory=dict, description="hunt examples compared, per boundary")
    hunted: list[str] = Field(default_factory=list, description="the boundaries its hunt drew on, where fewer than "
                              "`boundaries`: those whose catalog scenarios ran its change (empty: every one)")
    configs: dict[str, dict[str, list[Any]]] = Field(default_factory=dict,
                                                      description="survivors: the config choices the hunt drew")
    reached: bool | None = Field(None, description="whether its change ran in the catalog's scenarios or the "
                                 "hunt's examples (a survivor not reached is reach work, a reached one a missing "
                                 "check); None: unknown (a run that died, a record made before reach was measured)")
    cached: bool = False
    duration_s: float = 0.0


class MutateCount(_Model):
    mutants: int = 0
    killed: int = 0
    survived: int = 0
    survived_reached: int = Field(0, description="survivors whose change ran and was not told apart: a missing check")
    survived_unreached: int = Field(0, description="survivors whose change never ran: reach work")
    equivalent: int = 0
    error: int = 0
    score: float | None = Field(None, description="killed / (mutants - equivalent - error); None with none left")
    score_reached: float | None = Field(None, description="killed / (mutants - equivalent - error - "
                                        "survived_unreached): the score over the mutants whose change could be told apart")


class MutateSummary(_Model):
    target: str = Field(description="key into Report.targets")
    commit: str | None = None
    operators: list[str] = Field(default_factory=list)
    boundaries: list[str] = Field(default_factory=list)
    functions: dict[str, list[str]] = Field(default_factory=dict, description="mutated function -> its boundaries")
    unreadable: dict[str, str] = Field(default_factory=dict, description="mapped calls whose source was not read")
    budget_s: float = Field(description="differential hunt seconds per surviving mutant")
    seed: int
    equivalent_file: str | None = Field(None, description="the equivalence claims read (None: none were)")
    equivalent_claims: int | None = Field(None, description="claims in equivalent_file, every target's (None: a report before 1.3)")
    equivalent_examples: int = Field(description="examples per boundary an equivalence claim needs")
    survivor_examples: int = Field(0, description="examples per hunted boundary a mutant's hunt asked for, past "
                                                  "budget_s if need be, before it was judged survived (at most "
                                                  "--hunt-examples; 0: the budget alone, as before 1.5); a "
                                                  "survivor the cap left short says so in its reason")
    stale_equivalents: list[str] = Field(default_factory=list, description="equivalence claims not honoured, and why")
    executor: str = "local"
    jobs: int = 1
    cache: str | None = None
    cached: int = 0
    totals: MutateCount
    by_boundary: dict[str, MutateCount] = Field(default_factory=dict)
    by_operator: dict[str, MutateCount] = Field(default_factory=dict)
    by_function: dict[str, MutateCount] = Field(default_factory=dict)
    mutants: list[MutantRecord] = Field(default_factory=list, description="survivors first")
    duration_s: float = 0.0
    mutants_per_min_per_core: float = Field(0.0, description="mutants evaluated (cache misses) per minute of wall "
                                            "time per job")


Report.model_rebuild()
