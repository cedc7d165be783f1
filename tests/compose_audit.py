"""Run every catalog scenario of one target through its adapter under `composing.Audit`.

`audit(adapter, target)` -> {"findings": [...], "declared": [...], "calls": n, "trainer_ops": n,
"by_boundary": {...}, "errors": {...}, "blind": {...}}: each finding an op the adapter's own code
applied to a value the trainer returned (a reduction, normalisation or scaling) outside a step the
boundary declares; `declared`, the steps that did run inside one; `blind`, each boundary whose every
call crashed (not unsupported, not excluded by a precondition) with its first error: the spy saw
nothing there, so no finding is no evidence. Run as a script
(``python tests/compose_audit.py TARGET [ROOT]``) it prints that as JSON: a slime checkout
needs an interpreter of its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from sentinel import spec, targets
from sentinel.adapters.composing import Audit, adapter_roots
from sentinel.catalog import catalog_path
from sentinel.errors import PreconditionUnmet, Unsupported
from sentinel.observe import observe
from sentinel.runner import plan


def audit(adapter: Any, target: str, scenarios: list | None = None) -> dict[str, Any]:
    scenarios = scenarios if scenarios is not None else [
        s for s in spec.load_paths([catalog_path()]) if s.applies_to(target)]
    table = type(adapter)._implemented
    mode = Audit(adapter.trainer_roots(), adapter_roots(adapter))
    calls, by_boundary, errors, crashed = 0, {}, {}, {}
    for sc in scenarios:
        impl = table.get(sc.boundary)
        if impl is None:
            continue
        for run in plan(sc):
            if run.casts:  # the precision axis casts inputs; the chain is the same
                continue
            mode.boundary(sc.boundary, impl.steps)
            before = mode.trainer_ops
            try:
                with mode:
                    observe(adapter, torch.device("cpu"), sc.boundary, run.inputs, run.config, run.grads)
            except Exception as e:  # noqa: BLE001 - unsupported / excluded calls: what ran is still audited
                errors.setdefault(sc.boundary, f"{type(e).__name__}: {e}"[:200])
                if not isinstance(e, (Unsupported, PreconditionUnmet)):
                    crashed.setdefault(sc.boundary, errors[sc.boundary])
                continue
            calls += 1
            seen = by_boundary.setdefault(sc.boundary, {"calls": 0, "trainer_ops": 0})
            seen["calls"] += 1
            seen["trainer_ops"] += mode.trainer_ops - before
    findings = sorted({str(f) for f in mode.findings})
    declared = sorted({f"{f.boundary}: {f.function} ({f.op})" for f in mode.declared})
    blind = {b: e for b, e in crashed.items() if b not in by_boundary}
    return {"findings": findings, "declared": declared, "calls": calls, "trainer_ops": mode.trainer_ops, "by_boundary": by_boundary,
            "errors": errors, "blind": blind}


def load(target: str, root: str | None) -> Any:
    torch.set_num_threads(1)
    cls = targets.adapter_class(target)
    adapter = cls(Path(root) if root else None, torch.device("cpu"), {})
    adapter.facts = adapter.load() or {}
    return adapter


if __name__ == "__main__":
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    name, root = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps(audit(load(name, root), name)))
