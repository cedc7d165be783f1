"""Findings as scenario YAML: a minimal counterexample written as a ready-to-run scenario.

`sentinel run` on the file reproduces the violation: the inputs are written so they load
back bit for bit (the shortest decimal of each float32, masks as integers, non-finite
values as strings), tensors inline, with the hunt's command line as provenance.

A differential finding's scenario (`diff_document`) carries the shrunk input and, as
invariants, the properties that tell the sides apart on it (`fixed`: those base violates and
head satisfies; `regressed` the reverse); for a difference no family explains that the reference
judged (`referee.py`), a `close` that pins the reference's values; for one left `changed`, a
`close` that pins base's observed values, so that `sentinel compare FILE --base B --head H`
shows the change, and the header says which side is right is for a person to decide.
Against the reference the scenario runs with `sentinel run FILE --target T`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from ...boundaries import get as get_boundary
from ...git import WORKTREE
from ...invariants.base import is_extra
from ...runner import TargetSpec
from ..properties import Property

if TYPE_CHECKING:
    from .sides import Side


class _Flow(list):
    """A tensor: written inline, [[0.0, 1.0], ...]."""


class _Dumper(yaml.SafeDumper):
    """Writes a _Flow inline."""


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def _num(v: Any, mask: bool) -> Any:
    if isinstance(v, list):
        return [_num(x, mask) for x in v]
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    f = float(v)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if mask:
        return int(f)
    # the shortest decimal that parses back to the same float32 (the loader's dtype)
    return float(np.format_float_positional(np.float32(f), unique=True, trim="0")) if f == float(np.float32(f)) else f


def _tensor(name: str, values: list, boundary: str) -> Any:
    port = get_boundary(boundary).input(name)
    mask = port is not None and port.dtype == "mask"
    v = _num(values, mask)
    return _Flow(v) if isinstance(v, list) else v


def slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9.]+", "-", text.lower())).strip("-.") or "x"


def finding_document(prop: Property, finding: dict[str, Any], target_key: str, provenance: str,
                     stats: dict[str, Any]) -> tuple[str, str]:
    """(scenario id, YAML text) of a ready-to-run scenario reproducing the finding. The id
    names the target (its resolved commit), the property and the finding's signature, so two
    bugs on one property, or one bug at two commits, are two files."""
    sig = finding.get("signature")
    sid = f"hunt-{slug(target_key)}-{slug(prop.name)}" + (f"-{signature_hash(sig)}" if sig else "")
    b = prop.boundary
    (family, body), = finding["invariant"].items()
    body = {k: (_Flow(v) if isinstance(v, list) else v) for k, v in body.items()}
    doc: dict[str, Any] = {
        "id": sid,
        "title": f"hunt: {prop.doc}",
        "description": (f"Minimal counterexample found by `sentinel hunt` on {target_key} and shrunk by Hypothesis "
                        f"({stats['examples_to_first']} examples, {stats['time_to_first_s']:.2f} s to the first "
                        f"violation; {stats['shrink_calls']} shrink calls). Property {prop.name}: "
                        f"{finding['outcome']['message']}"),
        "boundary": b,
        "targets": ["*"],
        "provenance": [provenance],
        "tags": ["hunt", family],
        "config": {k: v for k, v in finding["config"].items()},
        "inputs": {n: _tensor(n, v, b) for n, v in finding["inputs"].items()},
    }
    if finding["variants"]:
        doc["variants"] = {n: {"description": _variant_doc(n), "inputs": {k: _tensor(k, v, b) for k, v in ov.items()}}
                           for n, ov in finding["variants"].items()}
    doc["invariants"] = [{family: body}]
    head = f"# Found by `sentinel hunt` on {target_key}: property {prop.name} ({family}).\n"
    if sig:
        head += f"# Signature: {json.dumps(sig, sort_keys=True)}\n"
    text = head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120,
                            allow_unicode=True)
    return sid, text


def signature_hash(sig: dict[str, Any]) -> str:
    """Eight hex digits naming a signature in file names."""
    return hashlib.sha1(json.dumps(sig, sort_keys=True, default=str).encode()).hexdigest()[:8]


def _variant_doc(name: str) -> str:
    return {"no_eos_rewards": "only the rewards of rows without EOS change",
            "masked_row_rewards": "only the rewards of rows with mask 0 change"}.get(name, name)


def provenance_of(spec: TargetSpec, commit: str | None, seed: int | None) -> str:
    """A finding's provenance: the command line that finds it again, the commit and the seed."""
    cmd = f"sentinel hunt --target {spec.name}"
    if spec.repo:
        cmd += f" --repo {spec.repo}"
    if spec.commit:
        cmd += f" --commit {spec.commit}"
    if spec.plant:
        cmd += f" --plant {spec.plant}"
    return f"{cmd} (commit {commit or 'n/a'}, seed {seed if seed is not None else 'random'})"


# --- a differential finding: a two-revision scenario ------------------------------------------

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


def _pin(boundary: str, observable: str, values: Any, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `close` invariant holding an observable to `values` (at valid positions: for an extra,
    where it is shaped like the loss mask, as the differential hunt compared it)."""
    spec = get_boundary(boundary)
    body: dict[str, Any] = {"output": observable, "expected": _Flow(values) if isinstance(values, list) else values,
                            "atol": 1e-5, "rtol": 1e-4}
    port = spec.output(observable)
    mask = (inputs or {}).get("loss_mask")
    if observable.startswith("grad:") or (port is not None and port.kind == "token") or (
            is_extra(observable) and mask is not None and np.shape(values) == np.shape(mask)):
        body["where"] = "loss_mask"
    return {"close": body}


def _pinnable(observable: str) -> bool:
    """An observable both sides have, so that base's values can be pinned: an output, a gradient,
    a returned value or a config attribute's new value; not `config:<attr>` itself, which
    marks an attribute one side set and the other has no value for."""
    return not observable.startswith("config:") or observable.endswith(".value")


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
    ruling = f.get("referee") or {}
    if ruling.get("verdict") in ("fixed", "regressed") and ruling.get("reference") is not None \
            and f["observable"] != "exception" and not is_extra(f["observable"]):  # the reference's values are what is right
        invariants = [_pin(boundary, f["observable"], ruling["reference"])]
    elif f["invariants"] and verdict != "changed":
        invariants = [{fam: {k: (_Flow(v) if isinstance(v, list) else v) for k, v in body.items()}}
                      for inv in f["invariants"] for fam, body in inv.items()]
    elif f["observable"] != "exception" and _pinnable(f["observable"]):
        invariants = [_pin(boundary, f["observable"], f["base_values"], f["inputs"])]
    else:  # one side raises, or sets a config attribute the other leaves: the header says what differs
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
