"""The hunt report: the states of a finished hunt -> a `Report` of kind "hunt".

One `ScenarioResult` per property (its finding's invariant verdict, or how many examples
held), and a `hunt` section: per-property counts, the findings with their minimal trigger's
size, and the search totals.
"""

from __future__ import annotations

from typing import Any

from ..boundaries import get as get_boundary
from ..report import (Environment, ExceptionInfo, FunctionInfo, HuntFinding, HuntProperty, HuntSummary,
                      InvariantResult, Report, ScenarioResult, Target, statistics)
from ..runner import TargetSpec
from .findings import provenance_of
from .state import HuntSettings, PropertyState


def hunt_report(states: list[PropertyState], settings: HuntSettings, *, spec: TargetSpec, target: Target,
                env: dict[str, Any], search_s: float, startup_s: float, created: str, duration_s: float,
                command: list[str] | None) -> Report:
    provenance = provenance_of(spec, target.commit, settings.seed)
    results, properties, findings = [], [], []
    for s in states:
        result, prop, finding = _property(s, spec.key, provenance)
        results.append(result)
        properties.append(prop)
        if finding is not None:
            findings.append(finding)
    stats = statistics(results)
    return Report(kind="hunt", success=not findings and stats.errors == 0, created_at=created,
                  duration_s=duration_s, command=command or [], environment=Environment(**env),
                  targets={spec.key: target}, results=results, statistics=stats,
                  hunt=_summary(states, settings, properties, findings, search_s, startup_s))


def _property(s: PropertyState, target_key: str,
              provenance: str) -> tuple[ScenarioResult, HuntProperty, HuntFinding | None]:
    p = s.prop
    cfg = {**get_boundary(p.boundary).config}
    res_kw: dict[str, Any] = {}
    finding = None
    if s.finding:
        f = s.finding
        sid, _ = s.document
        o = f["outcome"]
        (family, body), = f["invariant"].items()
        inv = InvariantResult(family=family, config=f["invariant"], verdict="violated", message=o["message"],
                              observed=o["observed"], expected=o["expected"], difference=o["difference"],
                              positions=o["positions"], details=o["details"] or {})
        cfg.update(f["config"])
        rows, tokens, valid = _size(f)
        res_kw = dict(file=s.file or "", reason=f"{family}: {o['message']}", invariants=[inv], inputs=f["inputs"],
                      observations=f["observations"],
                      function=FunctionInfo(**f["function"]) if f.get("function") else None)
        finding = HuntFinding(property=p.name, boundary=p.boundary, family=p.family, scenario_id=sid,
                              file=s.file, rows=rows, tokens=tokens, valid_tokens=valid,
                              examples_to_first=s.examples_to_first or 0,
                              time_to_first_s=round(s.time_to_first_s or 0.0, 4),
                              shrink_calls=s.shrink_calls, message=o["message"],
                              reproduced=None if s.verdict is None else s.verdict == "violated")
    elif s.status == "holds":
        res_kw = dict(reason=f"{s.examples} examples, no violation",
                      invariants=[InvariantResult(family=p.family, config={p.family: {}}, verdict="held",
                                                  message=f"held on {s.examples} generated examples")])
    else:
        res_kw = dict(reason=s.reason)
    err = (ExceptionInfo(**{k: s.error_sample[k] for k in ("type", "message", "traceback")})
           if s.error_sample else None)
    result = ScenarioResult(id=p.name, title=p.doc, boundary=p.boundary, target=target_key,
                            verdict=s.status, config=cfg, provenance=[provenance],
                            duration_s=round(s.duration_s, 4),
                            exception_info=err if s.status == "error" else None,
                            **{"file": "", **res_kw})
    prop = HuntProperty(property=p.name, boundary=p.boundary, family=p.family, doc=p.doc, status=s.status,
                        reason=s.reason, examples=s.examples, rejected=s.rejected, errors=s.errors,
                        shrink_calls=s.shrink_calls, rounds=s.rounds, duration_s=round(s.duration_s, 4),
                        unsupported_reasons=s.reasons[:12], preconditions=dict(s.preconditions),
                        excluded_config=s.exclude or {},
                        error_sample=err)
    return result, prop, finding


def _summary(states: list[PropertyState], settings: HuntSettings, properties: list[HuntProperty],
             findings: list[HuntFinding], search_s: float, startup_s: float) -> HuntSummary:
    per_boundary: dict[str, list[str]] = {}
    for s in states:
        if s.status in ("holds", "violated"):
            per_boundary.setdefault(s.prop.boundary, []).append(s.prop.family)
    total = sum(s.examples for s in states)
    out = settings.out_dir
    return HuntSummary(seed=settings.seed, max_examples=settings.max_examples, time_budget_s=settings.time_budget,
                       database=settings.database, out_dir=str(out) if out else None, examples=total,
                       rejected=sum(s.rejected for s in states),
                       shrink_calls=sum(s.shrink_calls for s in states), search_s=round(search_s, 3),
                       startup_s=round(startup_s, 3),
                       examples_per_s=round(total / search_s, 1) if search_s > 0 else 0.0,
                       invariants_per_boundary={b: sorted(set(v)) for b, v in sorted(per_boundary.items())},
                       properties=properties, findings=findings)


def _size(f: dict[str, Any]) -> tuple[int, int, int]:
    ins = f["inputs"]
    lm = ins.get("loss_mask")
    if lm is not None:
        return len(lm), len(lm[0]) if lm else 0, int(sum(sum(r) for r in lm))
    first = next(iter(ins.values()))
    return len(first), 0, 0
