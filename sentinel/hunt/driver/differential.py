"""Differential hunt: the same drawn inputs through two sides; a finding is where they differ.

The sides are two revisions of a target (`--base REV --head REV|WORKTREE`) or the reference
math and a target (`--against reference`). Each side runs in its own worker (checked out
in a temporary worktree) and serves a session (`hunt.worker.session.serve`). Hypothesis runs
here, in the driver: every batch it draws goes to both sides at once (one round trip each), so
both see exactly the same examples, whatever the seed; the search is the one both hunts share
(`hunt.search.Search`), with `DiffJudge` as its judge. A difference (`differences`: outputs
at valid positions, gradients, inputs after the call, beyond atol/rtol) whose signature is
not known is shrunk, its signature found (`signature`, the sides' answers as the probe),
classified by the properties each side violates on it (`verdicts.differential_verdict`:
fixed / regressed / changed; against the reference bug / changed), written as a scenario
that `sentinel compare` replays on the two revisions (or `sentinel run` on the target), and
the search goes on with the signature excluded. A difference the target's adapter declares
(`Adapter.deviations`) is a `deviation`, counted with its first example, never a finding.
Config choices a side raises Unsupported for are probed per boundary (alone, beside one other
change, then in whole configs: `hunt.probe`) and not drawn where none runs them.

`DiffHunter` runs the phases of `engine.Hunt`; the rounds take turns over the boundaries like
a hunt's properties (`PropertyState`, one per boundary, as `BOUNDARY.differential`).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, find, settings as hsettings
from hypothesis.errors import Flaky, NoSuchExample

from ... import strategies as S, verdicts
from ...adapters.options import is_trainer
from ...boundaries import BOUNDARIES
from ...errors import ADAPTER_DEFECT, NOT_THE_TARGETS, SideDied, UsageError
from ...invariants import REGISTRY
from ...invariants.base import is_extra
from ...report import Report, Target
from ...runner import TargetSpec
from ...spec import load_text
from ..differences import (ATOL, RTOL, Difference, describe, deviation_for, differences, grads_for, not_run,
                           skipped_note, values_at)
from ..known import Known, fitted, runs_of
from ..probe import beside, simplest
from ..properties import PROPERTIES, SHRINK_TIME, Property, select
from ..search import SECONDARY_PATIENCE, Answer, RoundOver, Search, replayable
from ..signature import (DIFFERENTIAL, Signature, _key, fill_masked_rows, known_match, layout, neutralise, perturbs,
                         signature)
from .engine import ExitReason, Hunt, resolved
from .findings import diff_document
from .referee import Referee, rule
from .report import diff_report
from .sides import Side, Sides
from .state import Found, PropertyState

FAMILY = DIFFERENTIAL
BATCH = 16
FIRST_ROUND = 100  # examples in a boundary's first round; each later round doubles
MIN_ROUND = 0.3  # seconds: the shortest round (at least one batch of BATCH examples gets compared)
PROBE = 8  # examples in the first round of a boundary outside `focus`: enough that an option drawn in half the
# examples is drawn (1 - 2**-8), few enough that four such probes leave most of a short budget


@dataclasses.dataclass(frozen=True)
class DiffSettings:
    """The options of a differential hunt (see `differential`)."""

    boundaries: list[str] | None = None
    time_budget: float = 60.0
    max_examples: int = 100_000  # per boundary
    min_examples: int = 100
    seed: int | None = None
    out_dir: Path | None = None
    timeout: float = 60.0
    shrink_time: float = SHRINK_TIME
    first: bool = False
    verify: bool = True
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    known: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    replay: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    atol: float = ATOL
    rtol: float = RTOL
    min_valid: int = 1  # valid tokens in every drawn batch (see `_round`)
    # both sides one trainer's code and one adapter (a mutant): a value on one side only differs, and so does an
    # adapter defect on the head alone (`DiffJudge._answer`)
    one_sided: bool = False
    # compared examples per boundary a mutant's hunt needs (its equivalence claim's, or a survivor's floor): past
    # the time budget the boundaries below it run on, evidence_cap_s more seconds at most
    evidence: int = 0
    evidence_cap_s: float = 0.0
    # boundaries known to run the head's change (a mutant's: its catalog scenarios ran it). Where any is
    # named, every other boundary is probed: one round of PROBE examples, after which it stops unless the
    # change ran there (the head's reach marker), so the time goes where the change runs
    focus: tuple[str, ...] = ()

    @property
    def minimum(self) -> int:
        return min(self.min_examples, self.max_examples)


def _prop(boundary: str) -> Property:
    return Property(f"{boundary}.{FAMILY}", boundary, FAMILY, "both sides give the same observations", {}, lambda ex: {})


class DiffHunter(Hunt):
    """One differential hunt of `base` against `head` (runner.TargetSpecs). `sides`: both
    already started (sentinel mutate's warm workers), so `start` only reads them."""

    def __init__(self, base: TargetSpec, head: TargetSpec, settings: DiffSettings, *, against: bool = False,
                 command: list[str] | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
                 sides: Sides | None = None):
        super().__init__(settings, command=command, on_event=on_event)
        base, head = resolved(base), resolved(head)
        if base.key == head.key:
            base, head = dataclasses.replace(base, label=f"base:{base.key}"), dataclasses.replace(head, label=f"head:{head.key}")
        names = settings.boundaries or sorted(BOUNDARIES)
        self.against = against
        mk = lambda n, s: Side(n, s, Target(name=s.name, repo=s.repo, device=s.device, plant=s.plant), settings.timeout)  # noqa: E731
        self.started = sides is not None
        self.sides = sides or Sides(mk("base", base), mk("head", head))
        self.states = [PropertyState(_prop(b), known=[k for k in settings.known if k["property"] == f"{b}.{FAMILY}"])
                       for b in names]
        self.excluded: dict[str, dict[str, list[Any]]] = {"base": {}, "head": {}}
        self.compared = self.differing = 0
        self.evidence_capped = False  # the cap past the budget ended the hunt short of `evidence`
        self.probed_out: list[str] = []  # boundaries stopped after a probe round that did not run the change
        # a difference no family explains is judged by the reference (against it, it is a side)
        self.referee = None if against else Referee(settings.timeout, settings.time_budget + 600)

    # --- phases ------------------------------------------------------------------------

    def start(self, stack: ExitStack | None = None) -> None:
        """Both sides checked out, their workers and sessions started (unless given started);
        a boundary a side lacks is unsupported, a side that did not load an error everywhere."""
        if not self.started:
            session_s = self.settings.time_budget + 40 * self.settings.shrink_time + 600
            self.sides.start(stack, session_s)
            stack.callback(self.sides.stop)  # before the checkouts go: the workers run in them
        if stack is not None and self.referee is not None:
            stack.callback(self.referee.stop)
        sides = (self.sides.base, self.sides.head)
        broken = [s for s in sides if not s.ok]
        for s in self.states:
            if broken:
                s.status = "error"
                s.reason = "; ".join(f"{x.name} {x.key} could not be loaded: {x.target.load_error.message}"
                                     for x in broken if x.target.load_error)
            else:
                lacking = [x for x in sides if s.prop.boundary not in x.info.get("boundaries", [])]
                if lacking:
                    s.status = "unsupported"
                    s.reason = f"{' and '.join(x.key for x in lacking)} has no {s.prop.boundary!r} boundary"
        if broken:
            self.exit_reason = ExitReason.target_error
        if self.against:
            for name, d in self.sides.head.info.get("deviations", {}).items():
                self.deviations[name] = {**d, "met": 0, "example": {}}
        self.emit({"event": "start", "properties": len(self.states), "target": f"{self.sides.base.key} -> "
                   f"{self.sides.head.key}", "jobs": 2, "startup_s": max(x.startup_s for x in sides)})

    def rounds(self) -> None:
        """One boundary's round at a time, the one with the fewest rounds first, each its fair
        share of the time left (`Hunt.share`). Every boundary gets its first round, even where
        the time is spent before its turn (workers slow to answer): a short one (MIN_ROUND s).
        With `evidence`, the boundaries that compared fewer examples run on past the budget
        (`short_of_evidence`), each round asking only for what they lack."""
        st = self.settings
        while True:
            reason = self.over()
            running = [s for s in self.states if not s.done]
            if reason is ExitReason.time_budget and any(x.rounds == 0 for x in running):
                reason = None
            short = self.short_of_evidence(running) if reason is ExitReason.time_budget else []
            if short:
                reason = None
            if reason is not None:
                self.exit_reason = reason
                return
            s = min(short or running, key=lambda x: (x.rounds, self.states.index(x)))
            elapsed = time.perf_counter() - self.t_search
            probe = bool(st.focus) and s.prop.boundary not in st.focus and s.rounds == 0
            try:
                if probe:
                    self.sides.head_reached()  # cleared: what the rounds before it ran
                self._round(s, st.time_budget + (st.evidence_cap_s if short else 0) - elapsed,
                            need=st.evidence - s.examples if short else None, probe=probe)
                if probe and not s.done and not s.found and self.sides.head_reached() is False:
                    s.status = "finished"
                    s.reason = f"the head's change did not run in a probe of {s.examples} example(s): not hunted further"
                    self.probed_out.append(s.prop.boundary)
            except SideDied as e:
                s.status, s.reason = "error", str(e)
                self.exit_reason = ExitReason.target_error
                return

    def short_of_evidence(self, running: list[PropertyState]) -> list[PropertyState]:
        """The running boundaries below `evidence` compared examples, while the cap past the time
        budget lasts and no finding ends the hunt (`first`); `evidence_capped` once the cap ends it."""
        st = self.settings
        if not st.evidence or (st.first and any(x.found for x in self.states)):
            return []
        short = [x for x in running if x.examples < st.evidence]
        if short and time.perf_counter() - self.t_search >= st.time_budget + st.evidence_cap_s:
            self.evidence_capped = True
            return []
        return short

    def cut_off(self, s: PropertyState) -> str:
        return f"cut off ({self.exit_reason.name if self.exit_reason else ''}) after {s.examples} compared example(s)"

    untested = "no example was compared before the hunt ended"

    def document(self) -> None:
        """The sessions ended; each finding as a scenario (loaded back) and, with verify, replayed
        on both sides."""
        base, head = self.sides.base, self.sides.head
        for side in (base, head):
            side.close()
        if self.referee is not None:
            self.referee.stop()
        for s in self.states:
            for f in s.found:
                f.document = diff_document(s.prop.boundary, f.finding, base, head, self.against, self.settings.seed,
                                           self.command)
                sc, = load_text(f.document[1], f"<differential finding {f.document[0]}>")
                if self.settings.verify:
                    vb, vh = base.verify(sc), head.verify(sc)
                    f.finding["replayed"] = {"base": vb, "head": vh}
                    f.verdict = None if None in (vb, vh) else verdicts.compare_verdict(vb, vh)

    def report(self) -> Report:
        return diff_report(self)

    # --- one round -----------------------------------------------------------------------

    def choices(self, b: str) -> dict[str, list[Any]]:
        """The config choices drawn on boundary `b`: both sides' option_domains added (a trainer
        option too: options.TRAINER), pinned, less those a side lacks."""
        pins = {k: v for k, v in self.settings.config.items() if k in BOUNDARIES[b].config}
        table = {k: list(vs) for k, vs in S.CONFIG_CHOICES[b].items()}
        for side in (self.sides.base, self.sides.head):
            for k, vs in (side.info.get("domains", {}).get(b) or {}).items():
                have = table.setdefault(k, [] if is_trainer(k) else [BOUNDARIES[b].config[k]])
                have += [v for v in vs if v not in have]
        out = {}
        for k, vs in table.items():
            gone = self.excluded["base"].get(b, {}).get(k, []) + self.excluded["head"].get(b, {}).get(k, [])
            out[k] = [pins[k]] if k in pins else [v for v in vs if v not in gone]
        out.update({k: [v] for k, v in pins.items() if k not in out})
        return out

    def _round(self, s: PropertyState, left: float, need: int | None = None, probe: bool = False) -> None:
        """One round of boundary `b`'s search, `left` seconds of the hunt left; `need`: the examples
        the boundary lacks for its evidence (a round past the budget asks for no more); `probe`: a
        round of PROBE examples (see DiffSettings.focus)."""
        st, b = self.settings, s.prop.boundary
        t0 = time.perf_counter()
        before_s = time.perf_counter() - self.t_search
        s.sample(before_s)
        if s.exclude is None:
            s.exclude = self._probe_config(b)
            self._replay(s)
        n = min(st.max_examples - s.examples, PROBE if probe else FIRST_ROUND * 2 ** s.rounds)
        quota = min(n, need) if need else n  # stops at what the evidence lacks, draws as any round (n)
        limit = max(MIN_ROUND, self.share(s, left))
        s.share_s += limit
        rnd = random.Random(f"{st.seed}:{b}:{s.rounds}") if st.seed is not None else None
        # extras-only differences wait for one on an output (search.SECONDARY_PATIENCE), never past
        # half of what is left of the example budget; a round with none on an output takes one
        patience = max(0, min(SECONDARY_PATIENCE - s.secondary_seen, (st.max_examples - s.examples) // 2))
        search = Search(DiffJudge(self, s), quota, time.monotonic() + limit, st.shrink_time, patience=patience,
                        end_shrink=True)  # the finding is search.best: find's own answer is not read
        # a batch with no valid token has no training signal: what a side returns there is its convention
        # (a mutant's hunt draws them, min_valid 0: both sides are one trainer's code, so there a change
        # is the mutant's); every input on its own, and the relations / edges of relations.RELATIONS among them
        strategy = S.batches(S.examples(b, config=self.choices(b), junk="wild", row_mask=True, min_valid=st.min_valid,
                                        relations=S.RELATIONS), PROBE if probe else BATCH)
        try:
            find(strategy, replayable(search.condition, search.best), random=rnd, settings=hsettings(
                max_examples=max(1, math.ceil(n / 5)), database=None, deadline=None,
                phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck)))
        except (NoSuchExample, RoundOver):  # RoundOver: its time or quota spent (ShrinkOver: its shrinking)
            pass
        except Flaky:  # replayable answers a replay as before; should Hypothesis still object, the
            pass       # difference seen (search.best) is kept, as a single-target round keeps its best
        finally:  # a side that died mid-round: what was compared still counts
            self.compared += search.st["examples"]
            self.differing += search.violating
        search.take_passed()
        s.rounds += 1
        s.examples += search.st["examples"]
        s.rejected += search.st["rejected"]
        s.errors += search.st["errors"]
        s.shrink_calls += search.st["shrink_calls"]
        s.secondary_seen += search.secondary_seen
        s.reasons.update(search.reasons)
        s.excluded.update(search.excluded)
        s.error_sample = s.error_sample or search.error_sample
        self.merge_deviations(search.deviations)
        if search.best:
            self._found(s, search, before_s)
        s.duration_s += time.perf_counter() - t0
        s.sample(time.perf_counter() - self.t_search)
        if s.examples >= st.max_examples:
            s.status = "finished"
        elif search.st["examples"] == 0 and not search.st["timed_out"]:
            s.empty_rounds += 1
            if s.empty_rounds >= 2:
                s.status = "finished" if s.examples else "unsupported"
                if not s.examples and s.errors and s.error_sample:
                    # every example rejected on a side's error (an adapter defect, a missing dependency):
                    # nothing was compared, and the option exists: an error, never `unsupported`
                    s.status = "error"
                    s.reason = ("no example compared: a side raised on every drawn example: "
                                f"{s.error_sample['type']}: {s.error_sample['message'][:300]}")
                elif not s.examples:
                    s.reason = "no example both sides run: " + "; ".join(r for r, _ in s.reasons.most_common(3))
        self.emit({"event": "round", "property": s.prop.name, "status": s.status, "examples": s.examples,
                   "hunt_elapsed_s": time.perf_counter() - self.t_search, "round": s.rounds,
                   "found": s.found[-1].finding["signature"] if search.best else None, "findings": len(s.found)})

    def observe(self, b: str, examples: list) -> tuple[list, list]:
        return self.sides.ask({"op": "observe", "boundary": b, "examples": examples,
                               "grads": grads_for(b, graph=not self.against)})

    def unexplained(self, b: str, ex, ra: dict, rb: dict) -> tuple[list[Difference], list[str]]:
        """The differences no declared deviation explains, and the deviations that explain the rest."""
        diffs = differences(b, ex, ra, rb, self.settings.atol, self.settings.rtol, masked=not self.against,
                            one_sided=self.settings.one_sided)
        devs, left = [], []
        for d in diffs:
            # a convention changes values; it does not make them NaN: a non-finite difference is never one
            name = deviation_for(self.deviations, b, d.observable, ex.config) \
                if self.deviations and not d.non_finite else None
            (devs.append(name) if name else left.append(d))
        return left, devs

    def probe(self, b: str) -> Callable:
        def probe(ex, overrides: dict[str, Any]) -> tuple[str, Any]:
            (ra,), (rb,) = self.observe(b, [ex])
            if not_run(ra, rb):
                return "n/a", None
            left, _ = self.unexplained(b, ex, ra, rb)
            return ("violated", tuple(d.observable for d in left)) if left else ("held", None)
        return probe

    def _probe_config(self, b: str) -> dict[str, list[Any]]:
        """Config choices a side raises Unsupported for, from the simplest example both run."""
        choices = {k: vs for k, vs in self.choices(b).items()}
        default = {k: v[0] for k, v in choices.items() if not is_trainer(k)}  # a trainer option's default: unset
        ex = simplest(b, default)
        if ex is None:
            return {}
        variants = [(k, v) for k, vs in choices.items() for v in vs[1:]]
        ra, rb = self.observe(b, [ex] + [dataclasses.replace(ex, config={**default, k: v}) for k, v in variants])
        # the defaults themselves refused (slime has no is_correction method off_policy_is): where
        # another choice of one key only runs on both sides, that key's default is the refused one
        # (Hypothesis draws a first choice most: 131 of 143 slime is_correction examples were rejected)
        runs = {k for (k, _), a, b2 in zip(variants, ra[1:], rb[1:]) if "unsupported" not in (a["status"], b2["status"])}
        default_refused = {side: runs if answers[0]["status"] == "unsupported" and len(runs) == 1 else set()
                           for side, answers in (("base", ra), ("head", rb))}
        # a choice refused beside the defaults may run beside another key's choice (GSPO needs its
        # sequence-mean loss_agg): tried with each other key changed before it is excluded
        refused = [i for i in range(len(variants)) if "unsupported" in (ra[i + 1]["status"], rb[i + 1]["status"])]
        pairs = [(i, {**default, variants[i][0]: variants[i][1], k2: v2}) for i in refused for k2, v2 in variants
                 if k2 != variants[i][0]]  # by index: a value may be a dict (reward_norm)
        if pairs:
            pa, pb = self.observe(b, [dataclasses.replace(ex, config=c) for _, c in pairs])
            for i in {i for (i, _), x, y in zip(pairs, pa, pb) if x["status"] != "unsupported" != y["status"]}:
                ra[i + 1] = rb[i + 1] = {"status": "ok"}  # runs beside another choice: drawn, its refusals rejected
        # still refused: it may need several other keys changed at once (slime's group std needs the group mean
        # and eps 1e-6), and inputs that fit them (group ids): tried in whole configs, each with its own example
        left = [i for i in refused if "unsupported" in (ra[i + 1]["status"], rb[i + 1]["status"])]
        tries = [(i, e) for i in left for c in beside(b, choices, *variants[i]) if (e := simplest(b, c)) is not None]
        if tries:
            ta, tb = self.observe(b, [e for _, e in tries])
            for i in {i for (i, _), x, y in zip(tries, ta, tb) if x["status"] != "unsupported" != y["status"]}:
                ra[i + 1] = rb[i + 1] = {"status": "ok"}
        out: dict[str, list[Any]] = {}
        for side, keys in default_refused.items():
            for k in keys:
                self.excluded[side].setdefault(b, {}).setdefault(k, []).append(choices[k][0])
                if choices[k][0] not in out.setdefault(k, []):
                    out[k].append(choices[k][0])
        for side, answers in (("base", ra), ("head", rb)):
            for (k, v), a in zip(variants, answers[1:]):
                if a["status"] == "unsupported":
                    self.excluded[side].setdefault(b, {}).setdefault(k, []).append(v)
                    if v not in out.setdefault(k, []):  # both sides may lack it: listed once
                        out[k].append(v)
        return out

    def _replay(self, s: PropertyState) -> None:
        """Known findings given as scenarios: their signature where the sides differ on them."""
        b = s.prop.boundary
        for k in self.settings.replay:
            examples = [ex for run in runs_of(k) if (ex := fitted(run, b)) is not None]
            if not examples:
                continue
            ra, rb = self.observe(b, examples)
            for ex, a, r in zip(examples, ra, rb):
                left, _ = self.unexplained(b, ex, a, r)
                if left:  # the first input the sides differ on stands for the known finding
                    sig = signature(s.prop.name, FAMILY, ex, left[0].observable, left[0].non_finite,
                                    self.choices(b), self.probe(b))
                    s.known.append({**sig.as_dict(), "source": k.get("source", "")})
                    break

    def _classify(self, b: str, ex, sig: Signature) -> tuple[Any, str, dict, dict, list, Difference]:
        """Which properties each side violates where they differ: on the example, else on the
        first variant of its config that keeps the same difference (a key that does not
        matter to the signature, or another choice it persists under) where a family tells
        the sides apart. (example, verdict, violated by side, held by side, the explaining
        invariants, the difference)."""
        # the input as drawn, then cleaner ones the same difference survives on: masked rows
        # made valid, masked junk zeroed (another bug there must not blur the verdict)
        inputs = [ex] + [x for x in [fill_masked_rows(ex), *(neutralise(ex, c) for c in layout(ex))] if x is not None]
        configs = [dict(ex.config)] + [{**ex.config, k: v} for k, vs in self.choices(b).items()
                                       for v in sig.choices(k, vs) if _key(v) != _key(ex.config.get(k))]
        cands = [dataclasses.replace(x, config=c) for x in inputs for c in configs]
        ra, rb = self.observe(b, cands)
        kept = []
        for c, a, r in zip(cands, ra, rb):
            if not_run(a, r):
                continue
            left, _ = self.unexplained(b, c, a, r)
            d = next((x for x in left if x.observable == sig.observable), None)
            if d is not None:
                kept.append((c, d))
        names = [[p.name for p in select([b]) if p.admits(c.config)] for c, _ in kept]
        origins = {n: PROPERTIES[n].origin for ns in names for n in ns}
        pa, pb = self.sides.ask({"op": "properties", "examples": [c for c, _ in kept], "names": names, "origins": origins})
        out = None
        for (c, d), xa, xb in zip(kept, pa, pb):
            checked = set(xa) & set(xb)
            viol = {side: sorted(n for n in checked if x[n]["verdict"] == "violated") for side, x in (("base", xa), ("head", xb))}
            held = {side: sorted(n for n in checked if x[n]["verdict"] == "held") for side, x in (("base", xa), ("head", xb))}
            # only properties that fail on what differs explain it (or on the output a differing
            # gradient is of); a masking family's own NaN perturbation only explains a NaN difference
            related = set(_related(b, d.observable))
            relevant = {n for n in checked if (xa.get(n, {}).get("observable") in related or
                                               xb.get(n, {}).get("observable") in related)
                        and (not perturbs(PROPERTIES[n].family) or d.non_finite)
                        and not REGISTRY[PROPERTIES[n].family].judges_other_calls}
            viol = {side: [n for n in v if n in relevant] for side, v in viol.items()}
            verdict = verdicts.differential_verdict(viol["base"], viol["head"], self.against)
            explain = sorted(set(viol["base"]) ^ set(viol["head"]))
            invariants = [(xa if n in viol["base"] else xb)[n]["invariant"] for n in explain]
            if out is None or (out[1] == "changed" and verdict != "changed"):
                out = (c, verdict, viol, held, invariants, d)
            if verdict != "changed":
                break
        return out

    def _referee(self, b: str, ex, d: Difference):
        """The reference's ruling on a difference no family explains (None: against the reference)."""
        if self.referee is None:
            return None
        (ra,), (rb,) = self.observe(b, [ex])
        declared = {**self.sides.base.info.get("deviations", {}), **self.sides.head.info.get("deviations", {})}
        return rule(b, ex, d, ra, rb, self.referee.ask(b, ex), declared, self.settings.atol, self.settings.rtol)

    def _found(self, s: PropertyState, search: Search, before_s: float) -> None:
        b, best = s.prop.boundary, search.best
        ex, left = best["ex"], best["answer"].detail["left"]
        d = next(x for x in left if x.observable == best["observable"])
        sig = signature(s.prop.name, FAMILY, ex, d.observable, d.non_finite, self.choices(b), self.probe(b))
        ex, verdict, viol, held, invariants, d = self._classify(b, ex, sig) or (ex, "changed", {"base": [], "head": []},
                                                                               {"base": [], "head": []}, [], d)
        ruling = self._referee(b, ex, d) if verdict == "changed" else None
        if ruling is not None:
            verdict = ruling.verdict
        finding = {"config": ex.config, "inputs": {n: a.tolist() for n, a in ex.inputs.items()},
                   "variants": {}, "observable": d.observable, "positions": d.positions, "signature": sig.as_dict(),
                   "classification": verdict, "violates": viol, "holds": held, "invariants": invariants,
                   "base": values_at(d.base, d.positions), "head": values_at(d.head, d.positions), "base_values": d.base,
                   "differing": [x.observable for x in left], "judged_by": "reference" if ruling else "families",
                   "referee": ruling.as_dict() if ruling else None,
                   "outcome": {"message": describe(d, verdict, viol, self.sides.base.key, self.sides.head.key, ruling)}}
        skipped = deviation_for(self.deviations, b, d.observable, ex.config, skipped=True) if self.deviations else None
        if skipped:  # excused at the code it was declared for, not at this one: reported, and why
            finding["deviation_skipped"] = {"name": skipped, "why": self.deviations[skipped]["skipped"]}
            finding["outcome"]["message"] += "; " + skipped_note(self.deviations, skipped)
        t = search.first["t"] - search.t0
        s.found.append(Found(finding, s.examples - search.st["examples"] + search.first["examples"],
                             s.duration_s + t, before_s + t, search.st["shrink_calls"]))
        s.known.append({**sig.as_dict(), "source": "this hunt"})
        s.reason = finding["outcome"]["message"]


class DiffJudge:
    """What each example comes to on the two sides (`Search`'s judge in a differential round):
    a whole batch per round trip, so the round's budget is checked once per batch."""

    one_by_one = False

    def __init__(self, hunter: DiffHunter, s: PropertyState):
        self.h, self.s, self.b = hunter, s, s.prop.boundary
        self.known_sigs = [Signature.from_dict(k) for k in s.known]
        self.probe = hunter.probe(self.b)

    def answers(self, batch: list) -> list[Answer]:
        ra, rb = self.h.observe(self.b, batch)  # SideDied ends the hunt: the search cannot go on with one side
        return [self._answer(ex, a, b) for ex, a, b in zip(batch, ra, rb)]

    def _answer(self, ex, a: dict, b: dict) -> Answer:
        skip = not_run(a, b)
        if skip:
            who = "both sides" if a["status"] == b["status"] else "base" if skip is a else "head"
            return Answer(rejected=f"{skip['status']} by {who}: {skip['reason']}")
        defect = next((r for r in (a, b) if r["status"] == "error" and r["type"] in NOT_THE_TARGETS), None)
        if defect is b and a["status"] != "error" and defect["type"] == ADAPTER_DEFECT and self.h.settings.one_sided:
            # one adapter on both sides, at one commit: what it could not make of the head (an output the
            # mutant left the wrong shape) is the head's change, an `exception` difference
            defect = None
        if defect is not None:  # the adapter or the environment failed a side: no answer of the target's
            what = "adapter defect" if defect["type"] == ADAPTER_DEFECT else "not loadable here"
            return Answer(rejected=f"{what}: {defect['message']}", error={
                "type": defect["type"], "message": defect["message"], "traceback": "", "example": repr(ex)[:4000]})
        if a["status"] == "error" and b["status"] == "error":
            return Answer(rejected=f"both sides raised {a['type']}", error={
                "type": a["type"], "message": a["message"], "traceback": "", "example": repr(ex)[:4000]})
        left, devs = self.h.unexplained(self.b, ex, a, b)
        return Answer(violations=[x.observable for x in left], deviations=devs, detail={"left": left},
                      secondary=bool(left) and all(is_extra(x.observable) for x in left))

    def deviation(self, ex, a: Answer, observable: str) -> None:
        return None  # what a declared deviation explains is no violation (`unexplained`)

    def known(self, ex, a: Answer) -> Signature | None:
        # one bug moves a loss and its gradient together: any differing observable (or the
        # output a differing gradient is of, or a gradient of a differing output) that is
        # known makes the example the known bug's
        return next((k for x in a.detail["left"] for name in _related(self.b, x.observable)
                     if (k := known_match(self.known_sigs, self.s.prop.name, FAMILY, ex, name, x.non_finite,
                                          _aliased(self.probe, name, x.observable), self.h.choices(self.b)))), None)

    def declared(self, name: str) -> dict[str, Any]:
        return {k: v for k, v in self.h.deviations[name].items() if k not in ("met", "example")}


def _related(boundary: str, observable: str) -> list[str]:
    """The observable, then the output it is the gradient of, or the gradients of it."""
    if observable.startswith("grad:"):
        return [observable, observable[5:].split("/", 1)[0]]
    return [observable] + [f"grad:{o}/{w}" for o, w in grads_for(boundary) if o == observable]


def _aliased(probe: Callable, name: str, observable: str) -> Callable:
    """A probe that reports `name` as differing whenever `observable` does (the two are one
    bug's: see _related)."""
    if name == observable:
        return probe

    def aliased(ex, overrides):
        verdict, names = probe(ex, overrides)
        if verdict == "violated" and observable in (names or ()):
            names = tuple(names) + (name,)
        return verdict, names
    return aliased


def differential(spec_base: TargetSpec, spec_head: TargetSpec, boundaries: list[str] | None = None,
                 seconds: float = 60.0, seed: int | None = None, *, against: bool = False,
                 out_dir: str | Path | None = None, known: Known | None = None, config: dict[str, Any] | None = None,
                 first: bool = False, verify: bool = True, shrink_time: float = SHRINK_TIME, timeout: float = 60.0,
                 atol: float = ATOL, rtol: float = RTOL, max_examples: int = 100_000, min_examples: int = 100,
                 command: list[str] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> Report:
    """Hunt for inputs where `spec_base` and `spec_head` disagree; the hunt Report (findings
    in report.hunt.findings, each with its classification and signature; the scenarios under
    `out_dir`, none written when None). See the module docstring."""
    if boundaries:
        unknown = [b for b in boundaries if b not in BOUNDARIES]
        if unknown:
            raise UsageError(f"unknown boundary {unknown[0]!r} (known: {', '.join(sorted(BOUNDARIES))})")
    if seed is None:  # one drawn and recorded: a finding's provenance names the seed that found it
        seed = random.SystemRandom().randrange(2 ** 31)
    settings = DiffSettings(boundaries=boundaries, time_budget=seconds, seed=seed,
                            out_dir=Path(out_dir) if out_dir else None, known=list(known.signatures) if known else [],
                            replay=list(known.examples) if known else [], config=dict(config or {}), first=first,
                            verify=verify, shrink_time=shrink_time, timeout=timeout, atol=atol, rtol=rtol,
                            max_examples=max_examples, min_examples=min_examples)
    return DiffHunter(spec_base, spec_head, settings, against=against, command=command, on_event=on_event).run()

