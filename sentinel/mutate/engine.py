"""One shard of `sentinel mutate`: a batch of mutants of one target, judged by the catalog,
then (for survivors) a seeded differential hunt, with warm workers serving every mutant.

A shard runs where an executor puts it (a local process, a Ray task), like a history task:
it starts one head worker (and, at the first survivor, a base worker for the hunt), and
sends each mutant along with its jobs; the worker's forked child puts it in place
(`apply.apply`), so no mutant needs a checkout or a new worker.

- Catalog: each scenario of the mutant's boundaries whose verdict on the unmutated target is
  decided (holds / violated) runs on the mutant, 1, then 2, 4, 8 at a time, those that
  killed most mutants of the shard first, until one kills it. A verdict that changes kills it; an error
  where the target held kills it too (a crash on some input), unless every scenario errs
  with the same exception type: then the hunt asks whether the mutant answers on some drawn
  input (a config or shape no scenario has); only if it raises on every input the hunt
  compared too is it an `error` (no test told it apart), else it is killed.
- Hunt: the unmutated target as base, the mutant as head (`hunt.driver.differential.DiffHunter`,
  seeded, stopped at its first finding): any difference no declared deviation explains
  kills it. Survivors keep the examples compared per boundary and the config choices drawn.
  A mutant with an equivalence claim (`Shard.claimed`) is hunted until every boundary it maps
  compared the claim's `evidence` examples, past the budget if need be, for at most
  `equivalent.EVIDENCE_CAP_S` more seconds (a boundary that draws few valid examples must not hang the
  shard); a record the cap left short says so in its reason.
- Floor: any other mutant the hunt leaves alive is hunted, the same way, until each boundary it
  hunts compared `Shard.floor` examples (--survivor-examples): under load a 2 s budget compared a
  handful, so a survivor's verdict said more about the machine than about the checks.
- Reach: every child that runs the mutant says whether its change ran (`reach`); a record's
  `reached` is True when any did, False when all said no, None when one could not say.
- Focus: where the catalog's scenarios ran the change on some boundaries, the hunt probes each
  other one with a few examples (`DiffSettings.focus`) and stops it unless the change ran there
  (a trainer option only the hunt draws may reach it), so the budget goes where the change runs:
  a change on one branch (GSPO's) that five boundaries map, one reaches, got a fifth of it. A
  record's `hunted` lists the boundaries hunted past their probe where fewer than all; a claimed
  mutant (its evidence is per boundary) hunts every boundary in full.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

from ..hunt.driver.differential import DiffHunter, DiffSettings
from ..hunt.driver.sides import Side, Sides
from ..process import WorkerDied
from ..report import Target
from ..runner import TargetSpec, evaluate, job, plan
from ..spec import Scenario
from .equivalent import EVIDENCE_CAP_S

SHRINK_S = 0.5  # a kill needs a difference, not its smallest example
DECIDED = ("holds", "violated")
CRASH = "mutant-crash:"  # the deviation a crash the catalog saw everywhere stands for in its hunt
CHUNKS = (1, 2, 4, 8)  # catalog jobs sent at a time: the likeliest killer alone first, then more per round


@dataclass
class Shard:
    target: str
    repo: str | None
    commit: str | None
    device: str
    mutants: list[dict[str, Any]]  # Mutant.as_dict()
    scenarios: list[Scenario] = field(default_factory=list)
    base: dict[str, str] = field(default_factory=dict)  # scenario id -> verdict on the unmutated target
    budget: float = 5.0
    seed: int = 0
    timeout: float = 30.0
    examples: int = 100_000  # per boundary: a hunt ends at this many compared examples, or at its budget
    claimed: list[str] = field(default_factory=list)  # ids of the mutants with an equivalence claim
    evidence: int = 0  # compared examples per boundary a claim needs (--equivalent-examples)
    evidence_cap_s: float = EVIDENCE_CAP_S
    floor: int = 0  # compared examples per hunted boundary before an unclaimed mutant survives (driver.floor)


class _Workers:
    """The shard's head worker (catalog jobs, and hunt sessions with the mutant) and base
    worker (hunt sessions of the unmutated target), restarted when one dies."""

    def __init__(self, shard: Shard, stack: ExitStack):
        self.shard, self.stack = shard, stack
        self.spec = TargetSpec(shard.target, shard.repo, shard.commit, shard.device)
        self.head = self._side("head", session=False)
        self.base: Side | None = None
        self.kills: Counter[str] = Counter()  # scenario id -> mutants it killed in this shard

    def _side(self, name: str, session: bool) -> Side:
        s = Side(name, self.spec, Target(name=self.spec.name, repo=self.spec.repo, device=self.spec.device),
                 self.shard.timeout)
        s.start(self.stack, 10 ** 6, session=session)
        if s.target.load_error is not None:
            raise WorkerDied(f"the target could not be loaded: {s.target.load_error.message}")
        return s

    def restart(self, which: str) -> None:
        old = getattr(self, which)
        if old is not None:
            old.stop()
        setattr(self, which, None if which == "base" else self._side("head", session=False))

    def base_side(self) -> Side:
        if self.base is None or self.base.conn is None:
            if self.base is not None:
                self.base.stop()
            self.base = self._side("base", session=True)
        return self.base

    def stop(self) -> None:
        for s in (self.head, self.base):
            if s is not None:
                s.stop()


def _job(m: dict[str, Any]) -> dict[str, Any]:
    """What the worker's child needs to put mutant `m` in place (`apply.apply`)."""
    return {k: m.get(k) for k in ("function", "source", "line", "swap")}


def _either(a: bool | None, b: bool | None) -> bool | None:
    """Reached in either run: True if one says so, else None if one could not say."""
    return True if a or b else None if a is None or b is None else False


@dataclass
class _Reach:
    """Where the catalog's scenarios ran a mutant's change: per boundary, True if one did,
    False if all said no, None if one could not say (`_either`)."""

    on: dict[str, bool | None] = field(default_factory=dict)

    def add(self, boundary: str, reached: bool | None) -> None:
        self.on[boundary] = _either(self.on.get(boundary, False), reached)

    @property
    def any(self) -> bool | None:
        return _either(any(v is True for v in self.on.values()), None if None in self.on.values() else False)

    def focus(self, boundaries: list[str]) -> tuple[str, ...]:
        """The boundaries where a scenario ran the change (see the module's docstring: Focus); ()
        where that is none or all of them (nothing to probe: the hunt's settings as before)."""
        ran = tuple(b for b in boundaries if self.on.get(b) is True)
        return () if len(ran) == len(boundaries) else ran


def _catalog(w: _Workers, m: dict[str, Any], planned: list) -> tuple[dict[str, Any] | None, int, _Reach]:
    """The catalog's judgement of mutant `m`: a record update (killed / error), or None when
    it survives; how many scenarios ran; where its change was reached in them."""
    mine = [(sc, runs) for sc, runs in planned if sc.boundary in m["boundaries"] and w.shard.base.get(sc.id) in DECIDED]
    reach = _Reach()
    if not mine:
        return None, 0, reach
    mutant = _job(m)
    mine.sort(key=lambda x: -w.kills[x[0].id])  # the scenarios that killed most so far first
    changed, errors, ran = [], [], 0
    i, rounds = 0, 0
    while i < len(mine):  # a few at a time: the first verdict that changes ends it
        chunk = mine[i:i + CHUNKS[min(rounds, len(CHUNKS) - 1)]]
        i, rounds = i + len(chunk), rounds + 1
        w.head.worker.send_all([{**job(sc, runs), "mutant": mutant} for sc, runs in chunk])
        for sc, runs in chunk:
            msg = w.head.worker.receive(w.shard.timeout + 30)
            reach.add(sc.boundary, msg.get("reached"))
            r = evaluate(sc, runs, msg, "head")
            before = w.shard.base[sc.id]
            if r.verdict == "error":
                errors.append((sc.id, before, r.reason))
            elif r.verdict in DECIDED and r.verdict != before:
                changed.append(f"{sc.id}: {before} -> {r.verdict}")
                w.kills[sc.id] += 1
        ran += len(chunk)
        if changed or len(errors) not in (0, ran):  # a change, or a crash where another scenario ran: killed
            break
    if errors and len(errors) == len(mine) and len({e[2].split(":")[0] for e in errors}) == 1:
        return {"verdict": "error", "reason": f"fails the same way on every scenario ({errors[0][2][:300]})"}, ran, reach
    if changed:
        return {"verdict": "killed", "stage": "catalog", "killed_by": changed[0]}, ran, reach
    if errors:
        sid, before, reason = errors[0]
        w.kills[sid] += 1
        return {"verdict": "killed", "stage": "catalog", "killed_by": f"{sid}: {before} -> error ({reason[:200]})"}, ran, reach
    return None, ran, reach


def _hunt(w: _Workers, m: dict[str, Any], crash: str | None = None, reach: _Reach | None = None) -> dict[str, Any]:
    """The differential hunt of the unmutated target (base) against the mutant (head). `crash`:
    the catalog saw the mutant fail the same way on every scenario; the hunt asks whether it does
    on every drawn input too (its crash then explains nothing: an input where it answers does).
    `reach`: where the catalog ran the change (the hunt's focus)."""
    sh = w.shard
    claimed = m["id"] in sh.claimed
    # the rest: the same draws as a claimed one, to their floor (see the module's docstring)
    evidence = sh.evidence if claimed else sh.floor
    focus = () if claimed or reach is None else reach.focus(m["boundaries"])
    cap = sh.evidence_cap_s if evidence else 0.0
    base = w.base_side()
    w.head.job_extra = {"mutant": _job(m)}
    w.head.open(sh.budget + cap + 60)
    if w.head.conn is None:
        w.restart("head")
        return {"verdict": "killed", "stage": "hunt", "killed_by": "hunt: the mutant's session did not start",
                "reached": None}
    settings = DiffSettings(boundaries=list(m["boundaries"]), time_budget=sh.budget, seed=sh.seed, first=True,
                            verify=False, shrink_time=SHRINK_S, timeout=sh.timeout,
                            max_examples=max(sh.examples, evidence), min_examples=min(100, sh.examples), min_valid=0,
                            one_sided=True,  # a metric the mutant adds or drops is its change
                            evidence=evidence, evidence_cap_s=cap, focus=focus)
    hunter = DiffHunter(w.spec, w.spec, settings, sides=Sides(base, w.head))
    try:
        hunter.start()
        if crash:  # the head raising where the base answers is the crash already seen: not a finding
            for b in m["boundaries"]:
                hunter.deviations[f"{CRASH}{b}"] = {"boundary": b, "observables": ["exception"], "when": {},
                                                    "met": 0, "example": {}}
        hunter.search()
    finally:
        # the referee's worker starts with the first difference it rules on; a hunt stops it in
        # `document`, which a mutant's never reaches: a whole run kept one idle worker per such kill
        if hunter.referee is not None:
            hunter.referee.stop()
    died = [s.reason for s in hunter.states if s.status == "error"]
    reached = None  # a session that died cannot say
    if died:  # a side's session ended mid-hunt: start both afresh for the next mutant
        w.restart("head")
        w.restart("base")
    else:
        reached = (w.head.close() or {}).get("reached")
    out = _hunted(hunter, m, died, evidence, f"{sh.budget:g} s budget + {cap:g} s",
                  "the claim's" if claimed else "a survivor's")
    if crash and out["verdict"] == "survived":
        out = _crashed(hunter, m, crash, out)
    if hunter.probed_out:
        out["hunted"] = [b for b in m["boundaries"] if b not in hunter.probed_out]
    return {**out, "reached": reached}


def _crashed(hunter: DiffHunter, m: dict[str, Any], crash: str, out: dict[str, Any]) -> dict[str, Any]:
    """A mutant that failed the same way on every scenario, hunted without a finding: an `error` if
    it raised on every input compared too, else killed (it answers on some inputs and raises
    where the base answers on others: told apart)."""
    answered = {b: n - hunter.deviations.get(f"{CRASH}{b}", {}).get("met", 0)
                for b, n in out["examples"].items()}
    if not any(out["examples"].values()):
        return {"verdict": "error", "reason": f"{crash}; the hunt compared no input"}
    if not any(answered.values()):
        return {"verdict": "error", "examples": out["examples"],
                "reason": f"{crash}, and on every input the hunt compared ({sum(out['examples'].values())})"}
    b = next(b for b, n in answered.items() if n)
    return {"verdict": "killed", "stage": "hunt", "examples": out["examples"],
            "killed_by": f"hunt {b}: answers on {answered[b]} of {out['examples'][b]} drawn inputs, "
                         f"raises where the base answers on the rest ({crash})"}


def _hunted(hunter: DiffHunter, m: dict[str, Any], died: list[str], evidence: int, cap: str,
            whose: str = "the claim's") -> dict[str, Any]:
    """The hunt's judgement of mutant `m`: killed (by its first finding, or a crash of the mutant's
    side), or survived with the examples compared and the config choices drawn (and, for a mutant
    short of its `evidence` on a boundary it hunted, why: `cap` says the hunt's limit, `whose`
    whose number it is)."""
    examples = {s.prop.boundary: s.examples for s in hunter.states}
    found = [(s.prop.boundary, f.finding) for s in hunter.states for f in s.found]
    if found:
        b, f = found[0]
        return {"verdict": "killed", "stage": "hunt", "examples": examples,
                "killed_by": f"hunt {b}.differential ({f['classification']}): {f['outcome']['message'][:300]}"}
    if died and any(r.startswith("head") for r in died):
        # the mutant's child ended (crash, hang past its limit) on a drawn input the base ran
        return {"verdict": "killed", "stage": "hunt", "examples": examples, "killed_by": f"hunt: {died[0][:300]}"}
    if died:
        return {"verdict": "survived", "examples": examples, "transient": True, "reason": f"hunt failed: {died[0][:300]}"}
    out = {"verdict": "survived", "examples": examples,
           "configs": {b: hunter.choices(b) for b in m["boundaries"] if examples.get(b)}}
    short = {s.prop.boundary: s for s in hunter.states
             if s.examples < evidence and s.prop.boundary not in hunter.probed_out}
    if short:  # why the evidence is still missing: the cap, or a boundary that drew no more
        why = (f"the evidence cap ({cap}) ended the hunt" if hunter.evidence_capped
               else "the hunt ended")
        out["reason"] = f"{why} short of {whose} {evidence} examples: " + "; ".join(
            f"{b} compared {s.examples} ({s.status}{': ' + s.reason[:200] if s.reason else ''})" for b, s in short.items())
    return out


def _judge(w: _Workers, m: dict[str, Any], planned: list) -> dict[str, Any]:
    if m.get("compile_error"):
        # reach None (nothing ran): the cache serves a record that says whether reach was measured
        return {"verdict": "error", "reason": f"does not compile: {m['compile_error']}", "reached": None}
    out, ran, reach = _catalog(w, m, planned)
    reached = reach.any
    crash = out["reason"] if out and out["verdict"] == "error" else None
    if (out is None or crash) and w.shard.budget > 0:
        out = _hunt(w, m, crash, reach)
        reached = _either(reached, out.pop("reached"))
    return {"scenarios": ran, **(out or {"verdict": "survived"}), "reached": reached}


def run_shard(shard: Shard, on_record: Callable[[dict[str, Any]], None] | None = None) -> str:
    """Judge every mutant of the shard; JSON: {"records": [...]} or {"load_error": ...}.
    `on_record` hears each record as it is made (progress, when run in this process)."""
    records: list[dict[str, Any]] = []
    planned = []
    for sc in shard.scenarios:
        try:
            planned.append((sc, plan(sc)))
        except Exception:  # noqa: BLE001 - a scenario that cannot be planned judges nothing
            pass
    with ExitStack() as stack:
        try:
            w = _Workers(shard, stack)
        except WorkerDied as e:
            return json.dumps({"load_error": str(e)})
        try:
            for m in shard.mutants:
                t0 = time.perf_counter()
                try:
                    rec = _judge(w, m, planned)
                except WorkerDied as e:  # the worker itself died: this mutant is not judged, the next gets a new one
                    rec = {"verdict": "survived", "transient": True, "reason": f"worker died: {e}"}
                    w.restart("head")
                    w.restart("base")
                rec.update(id=m["id"], duration_s=round(time.perf_counter() - t0, 3))
                records.append(rec)
                if on_record:
                    on_record(rec)
        finally:
            w.stop()
    return json.dumps({"records": records})

