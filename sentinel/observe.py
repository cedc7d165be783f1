"""The torch side of a boundary call: numpy inputs in, one adapter call, numpy observations out.

Runs in the worker process only (the worker and a hunt round import it; the CLI never does).
Every call is checked against the boundary's output contract (sentinel/contracts.py) before
anything is compared: a wrong-shaped or missing output is a ContractError, never a pass.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import torch

from . import boundaries, contracts
from .adapters import observables, options
from .errors import ContractError

# The dtypes a precision run may hand the trainer (sentinel/invariants/precision.py).
CAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
               "float64": torch.float64}


def observe(adapter, device, boundary: str, inputs: dict[str, np.ndarray], config: dict[str, Any],
            grads, casts: dict[str, list[str]] | None = None,
            extras: Iterable[str] = ()) -> tuple[dict[str, dict[str, Any]], dict | None]:
    """One boundary call, observed: the torch side of both `sentinel run` (Worker._run, which
    encodes the result for the protocol) and `sentinel hunt` (hunt.worker.check, in-process).

    Integer inputs become int64 tensors, float inputs keep their dtype; each `wrt` of
    `grads` ((of, wrt) pairs) requires grad. Returns ({"outputs", "requires_grad", "grads",
    "inputs_after", "extras"} as numpy (float64 stays float64, other floats become float32); a grad is
    None where the output has no gradient path to the input), the function ref as a dict or None).
    `casts` (input -> dtypes, applied in order) is the precision axis: `["bfloat16"]` hands the
    trainer a bf16 tensor, `["bfloat16", "float64"]` the same rounded values in float64. `extras`: those
    a scenario names, observed even where the call left them as they were (`observables.asking`)."""
    tensors = {n: _tensor(a, device) for n, a in inputs.items()}
    for n, chain in (casts or {}).items():
        for dtype in chain:
            tensors[n] = tensors[n].to(CAST_DTYPES[dtype])
    for _, w in grads:
        if w in tensors:
            tensors[w].requires_grad_(True)
    roots = adapter.trainer_roots() if hasattr(adapter, "trainer_roots") else []
    with options.recording(boundary, roots), observables.asking(extras):  # the options the trainer reads
        res = adapter.call(boundary, tensors, config)
    returned = {n: _returned(v) for n, v in res.outputs.items()}
    bad = contracts.problems(boundary, returned, contracts.batch_shape(boundary, {n: a.shape for n, a in inputs.items()}),
                             boundaries.get(boundary).normalise(config))
    if bad:
        raise ContractError("; ".join(bad))
    outputs, rg, gr = {}, {}, {}
    for name, v in res.outputs.items():
        t = v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
        rg[name] = bool(t.requires_grad)
        outputs[name] = _numpy(t)
    for of, w in grads:
        out = res.outputs.get(of)
        if out is None or w not in tensors:
            continue
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            gr[f"{of}/{w}"] = None
            continue
        g = torch.autograd.grad(out.sum() if out.dim() else out, tensors[w], retain_graph=True, allow_unused=True)[0]
        gr[f"{of}/{w}"] = None if g is None else _numpy(g)
    after = {n: _numpy(res.inputs_after.get(n, t)) for n, t in tensors.items()}
    extras = {n: _numpy(v if isinstance(v, torch.Tensor) else torch.as_tensor(v)) for n, v in res.extras.items()}
    obs = {"outputs": outputs, "requires_grad": rg, "grads": gr, "inputs_after": after, "extras": extras}
    return obs, (res.function.as_dict() if res.function else None)


def _tensor(a: np.ndarray, device) -> torch.Tensor:
    """The trainer's own copy of an input (it may write into it; the drawn array stays as drawn),
    integers as int64. `from_numpy` of a copy: a quarter of `torch.tensor`'s time on the small
    arrays a hunt draws, which it converts a dozen times an example."""
    t = torch.from_numpy(np.array(a, order="C"))
    if a.dtype.kind in "iu" and t.dtype != torch.int64:
        t = t.long()
    return t.to(device)


def _numpy(t: torch.Tensor) -> np.ndarray:
    """An observation in its own precision: float64 (and int64, beyond float32's 2**24) stays
    64-bit, so a difference of 1e-10 is not rounded away before it is compared."""
    wide = t.dtype in (torch.float64, torch.int64)
    return (t.detach().double() if wide else t.detach().float()).cpu().numpy()


def _returned(v: Any) -> contracts.Returned:
    """An output described for the contract check, without torch on the checking side."""
    if isinstance(v, torch.Tensor):
        kind = "c" if v.is_complex() else "b" if v.dtype == torch.bool else "f" if v.is_floating_point() else "i"
        return contracts.Returned("tensor", kind, tuple(v.shape))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return contracts.Returned("number", "f", ())
    return contracts.Returned(type(v).__name__, "", ())
