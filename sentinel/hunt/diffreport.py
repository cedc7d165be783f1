"""A differential hunt's outputs: each finding as a two-revision scenario, and the report.

A finding's scenario carries the shrunk input and, as invariants, the properties that tell
the sides apart on it (`fixed`: those base violates and head satisfies; `regressed` the
reverse); for a difference no family explains (`changed`), a `close` that pins base's
observed values, so that `sentinel compare FILE --base B --head H` shows the change (head
violates base's behaviour), and the header says which side is right is for a person to
decide. Against the reference the scenario runs with `sentinel run FILE --target T`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import yaml

from ..boundaries import get as get_boundary
from ..git import WORKTREE
from ..report import (Environment, HuntDifferential, HuntSide, HuntSummary, InvariantResult, Report,
                      ScenarioResult, statistics)
from .. import verdicts
from .findings import _Dumper, _Flow, _tensor, signature_hash, slug
from .summary import _property, deviation_entries, finding, known_entries

if TYPE_CHECKING:
    from .differential import DiffHunter
    from .sides import Side


def _rev(side: "Side") -> str:
    """The revision a side ran, as `sentinel compare` takes it: the resolved commit, or
    WORKTREE for a checkout's working tree (uncommitted changes included)."""
    return WORKTREE if side.spec.repo and side.spec.commit is None else (side.target.commit or WORKTREE)


def _replay_command(sc_file: str, base: "Side", head: "Side", against: bool) -> str:
    if against:
        cmd = f"sentinel run {sc_file} --target {head.spec.name}"
        cmd += f" --plant {head.spec.plant}" if head.spec.plant else ""
        return cmd + (f" --repo {head.spec.repo} --commit {head.target.commit}"
                      if head.spec.repo and head.spec.commit and head.target.commit else
                      f" --repo {head.spec.repo}" if head.spec.repo else "")
    return (f"sentinel compare {sc_file} --target {head.spec.name} --repo {head.spec.repo} "
            f"--base {_rev(base)} --head {_rev(head)}")


def _pin(boundary: str, observable: str, values: Any) -> dict[str, Any]:
    """A `close` invariant holding an observable to `values` (at valid positions)."""
    spec = get_boundary(boundary)
    body: dict[str, Any] = {"output": observable, "expected": _Flow(values) if isinstance(values, list) else values,
                            "atol": 1e-5, "rtol": 1e-4}
    port = spec.output(observable)
    if observable.startswith("grad:") or (port is not None and port.kind == "token"):
        body["where"] = "loss_mask"
    return {"close": body}


def diff_document(boundary: str, f: dict[str, Any], base: "Side", head: "Side", against: bool,
                  seed: int | None, command: list[str] | None = None) -> tuple[str, str]:
    """(scenario id, YAML text) of a differential finding."""
    found_by = " ".join(command) if command else (
        f"sentinel hunt --target {head.spec.name}" + (f" --plant {head.spec.plant}" if head.spec.plant else "")
        + (f" --repo {head.spec.repo}" if head.spec.repo else "")
        + (" --against reference" if against else f" --base {_rev(base)} --head {_rev(head)}") + f" -b {boundary}")
    sig = f["signature"]
    if against:
        who = f"ref-vs-{slug(head.key)}"
    elif base.spec.name == head.spec.name:  # one trainer at two revisions: name it once
        rev = lambda s: _rev(s).lower()[:12]  # noqa: E731
        who = f"diff-{slug(head.spec.name.rsplit(':', 1)[-1])}-{rev(base)}-vs-{rev(head)}"
    else:
        who = f"diff-{slug(base.key)}-vs-{slug(head.key)}"
    sid = f"{who}-{slug(boundary)}-{signature_hash(sig)}"
    verdict = f["classification"]
    if f["invariants"] and verdict != "changed":
        invariants = [{fam: {k: (_Flow(v) if isinstance(v, list) else v) for k, v in body.items()}}
                      for inv in f["invariants"] for fam, body in inv.items()]
    elif f["observable"] != "exception":
        invariants = [_pin(boundary, f["observable"], f["base_values"])]
    else:  # one side raises: replaying it shows the error; nothing to pin
        invariants = [{"unmutated": {}}]
    replay = _replay_command(f"{sid}.yaml", base, head, against)
    doc = {
        "id": sid,
        "title": f"{'against the reference' if against else 'differential'}: {boundary} {f['observable']} {verdict}",
        "description": f["outcome"]["message"],
        "boundary": boundary,
        "targets": ["*"],
        "provenance": [f"found by {found_by} (seed {seed})", f"replay: {replay}"],
        "tags": ["hunt", "differential", verdict],
        "config": dict(f["config"]),
        "inputs": {n: _tensor(n, v, boundary) for n, v in f["inputs"].items()},
        "invariants": invariants,
    }
    head_lines = [f"# Found by a differential hunt: {base.key} (base) vs {head.key} (head), {boundary}: {verdict}.",
                  f"# {f['outcome']['message']}",
                  f"# base {base.key}: {json.dumps(f['base'], default=str)[:300]}",
                  f"# head {head.key}: {json.dumps(f['head'], default=str)[:300]}",
                  f"# Signature: {json.dumps(sig, sort_keys=True, default=str)}",
                  f"# Replay: {replay}"]
    text = "\n".join(head_lines) + "\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                                                    width=120, allow_unicode=True)
    return sid, text


def diff_report(h: "DiffHunter") -> Report:
    base, head = h.sides.base, h.sides.head
    results, properties, findings = [], [], []
    for s in h.states:
        properties.append(_property(s))
        for f in s.found:
            x = f.finding
            # replayed with `sentinel compare`, base -> head: a fix reads `fixed`; any other
            # difference `regressed` (head leaves base's pinned or satisfied behaviour)
            want = "fixed" if x["classification"] in ("fixed", "reference-bug") else "regressed"
            findings.append(finding(s.prop, f, classification=x["classification"],
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
        out_dir=str(h.settings.out_dir) if h.settings.out_dir else None, exit_reason=h.exit_reason, examples=total,
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
