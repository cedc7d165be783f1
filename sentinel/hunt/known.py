"""Known findings (`sentinel hunt --known FILE|DIR`): signatures the search passes over.

A known finding comes as
- a hunt report (JSON): each finding's signature, as the hunt that found it recorded it;
- a scenario file, or a folder of them (`scenarios/findings/`, a hunt's `reports/hunt/`):
  its inputs and config are *replayed* on the target in each property's first round, for
  the properties of its boundary whose family the scenario names; each violation's
  signature, found on this target as a finding's would be, is known from then on.

So a known open bug cannot hide a new one: its examples are counted and passed over, and
the search goes on for failures with any other signature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import strategies as S
from ..boundaries import get as get_boundary
from ..errors import KnownError
from ..runner import plan
from ..spec import load_paths


@dataclass
class Known:
    signatures: list[dict[str, Any]] = field(default_factory=list)  # Signature.as_dict() + "source"
    examples: list[dict[str, Any]] = field(default_factory=list)  # findings to replay on the target
    sources: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.signatures or self.examples)

    def extend(self, other: "Known") -> None:
        self.signatures += other.signatures
        self.examples += other.examples
        self.sources += other.sources


def encode_arrays(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """numpy arrays as plain data for a job (exact: float32 values survive JSON)."""
    return {n: {"dtype": str(a.dtype), "data": a.tolist()} for n, a in arrays.items()}


def decode_arrays(data: dict[str, Any]) -> dict[str, np.ndarray]:
    return {n: np.asarray(d["data"], dtype=d["dtype"]) for n, d in data.items()}


def _from_report(path: Path, data: dict[str, Any]) -> Known:
    hunt = data.get("hunt") or {}
    out = Known(sources=[str(path)])
    for f in hunt.get("findings", []):
        if f.get("signature"):
            out.signatures.append({**f["signature"], "source": f"{path}: {f.get('scenario_id', '')}"})
        elif f.get("file") and Path(f["file"]).is_file():  # a report from before signatures: replay its finding
            out.extend(_from_scenarios(Path(f["file"])))
    for k in hunt.get("known", []):
        if k.get("source") == "this hunt":
            continue
        out.signatures.append({**k["signature"], "source": k.get("source") or str(path)})
    return out


def _from_scenarios(path: Path) -> Known:
    out = Known(sources=[str(path)])
    for sc in load_paths([path]):
        out.examples.append({
            "boundary": sc.boundary, "config": sc.full_config(), "inputs": encode_arrays(sc.inputs),
            # every input the scenario's invariants run it on (NaN at masked positions, ...): a
            # differential hunt compares the sides on each
            "runs": [{"inputs": encode_arrays(r.inputs), "config": r.config} for r in plan(sc)],
            "variants": {n: encode_arrays({k: a for k, a in ins.items() if not np.array_equal(a, sc.inputs.get(k))})
                         for n, (ins, cfg) in sc.variants.items() if not cfg},
            "families": sorted({inv.family for inv in sc.invariants}), "source": f"{sc.file or path}: {sc.id}"})
    return out


def load(paths: list[Path]) -> Known:
    """The known findings of each path: a hunt report (.json), a scenario file, or a folder of
    scenario files. KnownError (or the loader's SpecError) says what is wrong."""
    out = Known()
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise KnownError(f"--known {path}: no such file or folder")
        if path.is_file() and path.suffix == ".json":
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise KnownError(f"--known {path}: not a JSON report: {e}") from None
            if not isinstance(data, dict) or data.get("kind") != "hunt":
                raise KnownError(f"--known {path}: a JSON file must be a hunt report (kind hunt)")
            out.extend(_from_report(path, data))
        else:
            out.extend(_from_scenarios(path))
    return out


def runs_of(k: dict[str, Any]) -> list[dict[str, Any]]:
    """The known example once per input its scenario runs (itself when it names none)."""
    return [{**k, "inputs": r["inputs"], "config": r["config"], "variants": {}} for r in k.get("runs") or []] or [k]


def fitted(k: dict[str, Any], boundary: str) -> S.Example | None:
    """A known example (known.py) as an example of `boundary`: its inputs that the boundary
    takes, its config keys that the boundary has over the boundary's defaults (None: it lacks
    an input the boundary requires, or has an input the boundary does not take)."""
    spec = get_boundary(boundary)
    inputs = decode_arrays(k["inputs"])
    if k["boundary"] != boundary:
        if any(spec.input(n) is None for n in inputs) or any(p.required and p.name not in inputs for p in spec.inputs):
            return None
        config = {**spec.config, **{c: v for c, v in k["config"].items() if c in spec.config}}
    else:
        config = dict(k["config"])
    variants = {n: decode_arrays(v) for n, v in (k.get("variants") or {}).items()}
    return S.Example(boundary, config, inputs, variants)
