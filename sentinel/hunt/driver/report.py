"""The hunt report: the states of a finished hunt -> a `Report` of kind "hunt".

One `ScenarioResult` per property that decided something (its first finding's invariant
verdict, or how many examples held; an error or unsupported property with its reason) and a
`hunt` section: every property with its verdict (untested and stopped ones included, which
have no result), each distinct finding with its signature and minimal trigger's size, the
known signatures passed over, and the search totals. A differential hunt's report
(`diff_report`) has one result per boundary and, for each finding, what each side violates.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ... import verdicts
from ...boundaries import get as get_boundary
from ...report import (Environment, ExceptionInfo, FunctionInfo, HuntDeviation, HuntDifferential, HuntFinding, HuntKnown,
                       HuntProperty, HuntSample, HuntSide, HuntSignature,
                      HuntSummary, InvariantResult, Report, ScenarioResult, Target, statistics)
from ...reach import BoundaryOptions, boundary_options, merge_read
from ...runner import TargetSpec
from ...coverage import analyse
from ..signature import Signature
from .findings import provenance_of
from .state import Found, HuntSettings, PropertyState

if TYPE_CHECKING:
    from .differential import DiffHunter


def hunt_report(states: list[PropertyState], settings: HuntSettings, *, spec: TargetSpec, target: Target,
                env: dict[str, Any], search_s: float, startup_s: float, created: str, duration_s: float,
                command: list[str] | None, exit_reason: str = "",
                deviations: dict[str, dict[str, Any]] | None = None) -> Report:
    provenance = provenance_of(spec, target.commit, settings.seed)
    results, properties, findings = [], [], []
    for s in states:
        result = _result(s, spec.key, provenance)
        if result is not None:
            results.append(result)
        properties.append(_property(s))
        findings += [finding(s.prop, f) for f in s.found]
    stats = statistics(results)
    summary = _summary(states, settings, properties, findings, search_s, startup_s)
    summary.exit_reason = exit_reason
    summary.deviations = deviation_entries(deviations or {})
    summary.options = options_entries(states)
    if settings.coverage:
        unreachable = {k: v for s in states for k, v in s.unreachable.items()}
        summary.coverage = analyse(settings.coverage, [c for s in states for c in s.coverage_spans], unreachable)
    return Report(kind="hunt", success=not findings and stats.errors == 0, created_at=created,
                  duration_s=duration_s, command=command or [], environment=Environment(**env),
                  targets={spec.key: target}, results=results, statistics=stats, hunt=summary)


def finding(p, f: Found, **extra: Any) -> HuntFinding:
    """The report entry of one finding."""
    x = f.finding
    rows, tokens, valid = size(x["inputs"])
    sid = f.document[0] if f.document else ""
    fields = dict(property=p.name, boundary=p.boundary, family=p.family, scenario_id=sid, file=f.file,
                  rows=rows, tokens=tokens, valid_tokens=valid, examples_to_first=f.examples_to_first,
                  time_to_first_s=round(f.time_to_first_s, 4), hunt_elapsed_s=round(f.hunt_elapsed_s, 4),
                  shrink_calls=f.shrink_calls, message=x["outcome"]["message"],
                  reproduced=None if f.verdict is None else f.verdict == "violated",
                  signature=HuntSignature(**x["signature"]) if x.get("signature") else None, config=x["config"])
    return HuntFinding(**{**fields, **extra})


def _result(s: PropertyState, target_key: str, provenance: str) -> ScenarioResult | None:
    verdict = verdicts.hunt_scenario_verdict(s.verdict or "")
    if verdict is None:  # untested / stopped: decided nothing; its hunt entry says so
        return None
    p = s.prop
    cfg = {**get_boundary(p.boundary).config}
    res_kw: dict[str, Any] = {}
    if s.found:
        f = s.found[0]
        x = f.finding
        (family, _), = x["invariant"].items()
        messages = "; ".join(g.finding["outcome"]["message"] for g in s.found)
        invs = [InvariantResult(family=family, config=g.finding["invariant"], verdict="violated",
                                message=g.finding["outcome"]["message"], observed=g.finding["outcome"]["observed"],
                                expected=g.finding["outcome"]["expected"], difference=g.finding["outcome"]["difference"],
                                positions=g.finding["outcome"]["positions"], details=g.finding["outcome"]["details"] or {})
                for g in s.found]
        cfg.update(x["config"])
        res_kw = dict(file=f.file or "", reason=f"{family}: {messages}", invariants=invs, inputs=x["inputs"],
                      observations=x["observations"],
                      function=FunctionInfo(**x["function"]) if x.get("function") else None)
    elif verdict == "holds":
        res_kw = dict(reason=f"{s.examples} examples, no violation",
                      invariants=[InvariantResult(family=p.family, config={p.family: {}}, verdict="held",
                                                  message=f"held on {s.examples} generated examples")])
    else:
        res_kw = dict(reason=s.reason)
    return ScenarioResult(id=p.name, title=p.doc, boundary=p.boundary, target=target_key, verdict=verdict,
                          config=cfg, provenance=[provenance], duration_s=round(s.duration_s, 4),
                          exception_info=_error(s) if verdict == "error" else None, **{"file": "", **res_kw})


def _error(s: PropertyState) -> ExceptionInfo | None:
    return (ExceptionInfo(**{k: s.error_sample[k] for k in ("type", "message", "traceback")})
            if s.error_sample else None)


def _property(s: PropertyState) -> HuntProperty:
    p = s.prop
    return HuntProperty(property=p.name, boundary=p.boundary, family=p.family, doc=p.doc, status=s.verdict or "untested",
                        reason=s.reason, examples=s.examples, rejected=s.rejected, rejections=dict(s.reasons.most_common(20)),
                        errors=s.errors, shrink_calls=s.shrink_calls, rounds=s.rounds,
                        duration_s=round(s.duration_s, 4), share_s=round(s.share_s, 4), findings=len(s.found),
                        progress=[HuntSample(s=t, examples=n, findings=f) for t, n, f in s.progress], excluded_known=dict(s.excluded),
                        preconditions=dict(s.preconditions),
                        unsupported_reasons=[f"config {k} excluded: {r}" for k, r in s.exclude_reasons.items()]
                        + [f"{r} (x{n})" for r, n in s.reasons.most_common(5)],
                        excluded_config=s.exclude or {}, error_sample=_error(s))


def known_entries(states: list[PropertyState]) -> list[HuntKnown]:
    """Every signature a property's search passed over, with where it came from and how often."""
    out: dict[str, HuntKnown] = {}
    for s in states:
        for k in s.known:
            sig = Signature.from_dict(k)
            key = sig.text()
            if key not in out:
                out[key] = HuntKnown(signature=HuntSignature(**sig.as_dict()), source=k.get("source", ""))
            out[key].excluded += s.excluded.get(key, 0)
    return list(out.values())


def options_entries(states: list[PropertyState]) -> list[BoundaryOptions]:
    """Per boundary, the trainer options its properties' rounds read, varied and pinned."""
    read: dict[str, dict[str, list[Any]]] = {}
    pinned: dict[str, dict[str, str]] = {}
    for s in states:
        if s.options_read:
            merge_read(read.setdefault(s.prop.boundary, {}), s.options_read)
            pinned.setdefault(s.prop.boundary, {}).update(s.options_pinned)
    return boundary_options(read, pinned)


def deviation_entries(deviations: dict[str, dict[str, Any]]) -> list[HuntDeviation]:
    """The declared deviations (name -> declaration, met, example), as the report lists them."""
    return [HuntDeviation(name=n, boundary=d["boundary"], reason=d["reason"], link=d["link"],
                          observables=d["observables"], config=d["when"], met=d.get("met", 0),
                          example=d.get("example") or {}, source=d.get("source", ""), body=list(d.get("body") or []),
                          hash_now=d.get("hash_now"), applies=d.get("applies", True), skipped=d.get("skipped", ""))
            for n, d in deviations.items()]


def _summary(states: list[PropertyState], settings: HuntSettings, properties: list[HuntProperty],
             findings: list[HuntFinding], search_s: float, startup_s: float) -> HuntSummary:
    per_boundary: dict[str, list[str]] = {}
    for s in states:
        if s.verdict in ("holds", "violated"):
            per_boundary.setdefault(s.prop.boundary, []).append(s.prop.family)
    total = sum(s.examples for s in states)
    cpu = sum(s.cpu_s for s in states)
    out = settings.out_dir
    return HuntSummary(seed=settings.seed, max_examples=settings.max_examples, min_examples=settings.minimum,
                       time_budget_s=settings.time_budget, database=settings.database,
                       out_dir=str(out) if out else None, examples=total, rejected=sum(s.rejected for s in states),
                       shrink_calls=sum(s.shrink_calls for s in states), search_s=round(search_s, 3),
                       startup_s=round(startup_s, 3),
                       examples_per_s=round(total / search_s, 1) if search_s > 0 else 0.0,
                       cpu_s=round(cpu, 3), examples_per_cpu_s=round(total / cpu, 1) if cpu > 0 else 0.0,
                       verdicts=dict(Counter(p.status for p in properties)),
                       invariants_per_boundary={b: sorted(set(v)) for b, v in sorted(per_boundary.items())},
                       properties=properties, findings=findings, known=known_entries(states))


def size(ins: dict[str, Any]) -> tuple[int, int, int]:
    """(rows, tokens, valid tokens) of a trigger's inputs."""
    lm = ins.get("loss_mask")
    if lm is not None:
        return len(lm), len(lm[0]) if lm else 0, int(sum(sum(r) for r in lm))
    first = next(iter(ins.values()))
    return len(first), 0, 0


def diff_report(h: "DiffHunter") -> Report:
    """The report of a differential hunt: one result per boundary, each finding with both sides."""
    base, head = h.sides.base, h.sides.head
    results, properties, findings = [], [], []
    for s in h.states:
        properties.append(_property(s))
        for f in s.found:
            x = f.finding
            # replayed with `sentinel compare`, base -> head: a fix reads `fixed`; any other
            # difference `regressed` (head leaves base's pinned or satisfied behaviour)
            want = "fixed" if x["classification"] in ("fixed", "reference-bug") else "regressed"
            findings.append(finding(s.prop, f, classification=x["classification"], judged_by=x.get("judged_by"),
                                    referee=(x.get("referee") or {}).get("reason"),
                                    reproduced=None if f.verdict is None else f.verdict == want,
                                    base=HuntSide(target=base.key, values=x["base"], violates=x["violates"]["base"],
                                                  holds=x["holds"]["base"]),
                                    head=HuntSide(target=head.key, values=x["head"], violates=x["violates"]["head"],
                                                  holds=x["holds"]["head"])))
        verdict = verdicts.hunt_scenario_verdict(s.verdict or "")
        if verdict is None:
            continue
        invs = [InvariantResult(family="differential", config={"differential": f.finding["signature"]},
                                verdict="violated", message=f.finding["outcome"]["message"],
                                observed=f.finding["head"], expected=f.finding["base"],
                                positions=f.finding["positions"][:64]) for f in s.found]
        if verdict == "holds":
            invs = [InvariantResult(family="differential", config={"differential": {}}, verdict="held",
                                    message=f"both sides agreed on {s.examples} generated examples")]
        results.append(ScenarioResult(id=s.prop.name, title=s.prop.doc, boundary=s.prop.boundary, file="",
                                      target=head.key, verdict=verdict, reason=s.reason, invariants=invs,
                                      config={**get_boundary(s.prop.boundary).config},
                                      duration_s=round(s.duration_s, 4)))
    stats = statistics(results)
    total = sum(s.examples for s in h.states)
    summary = HuntSummary(
        seed=h.settings.seed, max_examples=h.settings.max_examples,
        min_examples=min(h.settings.min_examples, h.settings.max_examples), time_budget_s=h.settings.time_budget,
        out_dir=str(h.settings.out_dir) if h.settings.out_dir else None, exit_reason=h.exit_reason.name if h.exit_reason else "", examples=total,
        rejected=sum(s.rejected for s in h.states), shrink_calls=sum(s.shrink_calls for s in h.states),
        search_s=round(h.search_s, 3), startup_s=round(max(base.startup_s, head.startup_s), 3),
        examples_per_s=round(total / h.search_s, 1) if h.search_s > 0 else 0.0,
        verdicts=dict(Counter(p.status for p in properties)), properties=properties, findings=findings,
        known=known_entries(h.states), deviations=deviation_entries(h.deviations),
        differential=HuntDifferential(
            base=base.key, head=head.key, against_reference=h.against, atol=h.settings.atol, rtol=h.settings.rtol,
            excluded_config=h.excluded, compared=h.compared, differing=h.differing))
    env = base.env or head.env
    return Report(kind="hunt", success=not findings and stats.errors == 0, created_at=h.created,
                  duration_s=round(time.perf_counter() - h.t_start, 3), command=h.command or [],
                  environment=Environment(**env), targets={base.key: base.target, head.key: head.target},
                  results=results, statistics=stats, hunt=summary)
