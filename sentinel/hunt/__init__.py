"""Hunt: find invariant violations with no hand-made trigger, shrink them to minimal scenarios.

A *property* is one generic invariant family instantiated on a boundary, over inputs and
configs drawn from `sentinel.strategies` (plus the perturbed copies the family needs: a
row permutation, a variant that changes only the no-EOS rows' rewards, ...). No property
knows a trigger; each says what must hold for every input.

How a hunt runs
- The parent (`driver.single.Hunter`, in the CLI's process) checks the target out, starts one
  worker (`sentinel.worker`, the only process that imports torch and the target) and
  schedules *rounds*: one property, up to N examples or S seconds. Properties take turns
  (round robin, each round up to twice the last one's examples within its fair share of the
  time left, `Hunt.share`), so a cheap bug anywhere
  is found early and a long hunt spreads evenly.
- A round is one `{"type": "hunt"}` job (`worker.round.run_round`): the worker forks (on CPU), and
  the child runs Hypothesis itself (`hypothesis.find`) with the adapter in-process, so each
  round trip carries many examples; a crash, exit or hang costs that round, not the hunt.
  The child streams `{"event": "progress"}` lines and returns one result.
- Hypothesis draws examples, evaluates the property (`worker.check`: the same plan, boundary
  calls and pure invariant code `sentinel run` uses) and, on a violation, shrinks it to a
  minimal counterexample. Its example database (default `.sentinel/hunt-db`) is keyed by
  (target, commit, plant, property): a known failure is replayed first.
- Each finding becomes a ready-to-run scenario YAML (`driver.findings`; `--out`, default
  `reports/hunt/`); `sentinel run` on it reproduces the violation. The report (kind "hunt",
  `driver.report`) has one result per property and a `hunt` section: examples, time, invariants
  per boundary, findings.

Not applicable is not a finding: a config the target raises `Unsupported` for, an output it
does not produce, or an unmet precondition (no masked position to perturb) rejects the
example; Hypothesis then draws another.

Many bugs per property: every finding has a signature (`signature`); the search goes on with
it excluded, and `--known` (`known`) excludes signatures from the start. A property's verdict
is decided once, by `sentinel.verdicts.hunt_property_verdict` (holds / violated / untested /
stopped / unsupported / error).

Differential hunts (`driver.differential`): the same drawn inputs through two sides (two
revisions, or the reference and a target), each in its own worker serving a session
(`worker.session`, `driver.sides`); a finding is where their observations differ
(`differences`), classified fixed / regressed / changed, written as a two-revision scenario.
The function API, for callers such as `sentinel history`:

    from sentinel.hunt import differential
    from sentinel.runner import TargetSpec
    rep = differential(TargetSpec("slime", repo, "045310b2b^"), TargetSpec("slime", repo, "045310b2b"),
                       ["advantages"], seconds=60, seed=0)      # a Report of kind "hunt"
    for f in rep.hunt.findings:    # HuntFinding: classification, signature, base / head sides, file
        print(f.classification, f.property, f.signature.observable, f.time_to_first_s)

Keyword options: against (the base is the reference: deviations apply), out_dir (write the
finding scenarios), known (`load_known(paths)`), config (pinned choices), first, atol, rtol.

Both hunts run the phases of one engine (`driver.engine.Hunt`: start, search, document,
write) and one search (`search.Search`, with a judge per hunt). Modules, by the process they
run in:
- `driver/` (the CLI's process; never torch): `engine`, `single`, `differential`, `sides`,
  `state` (settings, per-property standing), `findings` (scenario YAML), `report`;
- `worker/` (the worker's forked child; torch through the adapter): `round`, `check`, `session`;
- both: `properties` (the property table), `search`, `signature`, `known`, `differences`.
"""

from .driver.differential import DiffHunter, DiffSettings, differential
from .driver.engine import ExitReason, Hunt
from .driver.findings import finding_document
from .driver.single import Hunter, hunt
from .driver.state import HuntSettings
from .known import Known, load as load_known
from .properties import PROPERTIES, Property, select

__all__ = ["DiffHunter", "DiffSettings", "ExitReason", "Hunt", "HuntSettings", "Hunter", "Known", "PROPERTIES", "Property",
           "differential", "finding_document", "hunt", "load_known", "select"]
