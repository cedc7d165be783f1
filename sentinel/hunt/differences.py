"""Where two sides' observations of one input differ (pure numpy; no torch, no target).

Compared, in this order: each gradient at its input's valid positions (what trains the
model; all V values of a vocab tensor's valid position), each output at the positions its boundary's output contract makes valid (token
outputs where loss_mask is 1, row outputs in rows whose row mask is 1, scalars always; masked
positions too where one side zeroes them and the other does not: `masked_matters`), then
each input's state after the call, everywhere (a mutation of a masked position is a mutation),
then the extras (`returned:...` values the function returned beyond the outputs, `config:...`
changes it made to its args/config object; sentinel/adapters/observables.py). An output only one side
produces is not a difference (an optional output; two commits log different metrics), unless both
sides are one trainer's code (`one_sided`: sentinel mutate), where an output or returned value (a
logged metric) on one side only is the change; a config attribute only one side changed always is.
A side that raises where the other answers differs on `exception`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..boundaries import get as get_boundary
from .signature import _key

ATOL, RTOL = 1e-5, 1e-4


@dataclass
class Difference:
    observable: str
    positions: list[list[int]] = field(default_factory=list)
    base: Any = None  # base's values (the whole observable), or its exception text
    head: Any = None
    non_finite: bool = False  # a differing value is NaN / Inf on either side


def grads_for(boundary: str, graph: bool = True) -> list[tuple[str, str]]:
    """The gradients a differential hunt observes: of each scalar output (else each token
    output, summed) with respect to each input that takes a gradient, and (`graph`) each input a
    trainer may hand over still in the graph (`Boundary.graph_inputs`: a gradient there that one
    revision has and the other not is a difference). Against the reference `graph` is off: how
    a function differentiates through an input the canonical data path never attaches is a
    trainer's own convention, judged only against the same trainer's other revision."""
    spec = get_boundary(boundary)
    outs = [p.name for p in spec.outputs if p.kind == "scalar"] or [p.name for p in spec.outputs if p.kind == "token"]
    return [(o, w) for o in outs for w in (*spec.grad_inputs, *(spec.graph_inputs if graph else ()))]


def _valid(boundary: str, name: str, ex, shape: tuple[int, ...]) -> np.ndarray | None:
    """Where an observable's values matter (None: everywhere)."""
    spec = get_boundary(boundary)
    if name.startswith("grad:"):
        wrt = name.split("/", 1)[1]
        port = spec.input(wrt)
        mask = ex.inputs.get(port.mask) if port is not None and port.mask else None
        if mask is None or mask.shape != shape[:mask.ndim]:
            return None
        # a vocab tensor's gradient ([B, T, V]): its V values at each valid position
        return np.broadcast_to(mask.astype(bool).reshape(mask.shape + (1,) * (len(shape) - mask.ndim)), shape)
    port = spec.output(name)
    if port is None:
        return None
    if port.kind == "token":
        m = ex.inputs.get(port.mask or "loss_mask")
        return m.astype(bool) if m is not None and m.shape == shape else None
    if port.kind == "row":
        row_masks = [p.name for p in spec.inputs if p.kind == "row" and p.dtype == "mask"]
        m = ex.inputs.get(row_masks[0]) if row_masks else None
        return m.astype(bool) if m is not None and m.shape == shape else None
    return None


def _extra_valid(ex, shape: tuple[int, ...]) -> np.ndarray | None:
    """A returned value or config change (`returned:...`, `config:...`) shaped like the loss
    mask matters at its valid positions; any other shape everywhere."""
    m = ex.inputs.get("loss_mask")
    return m.astype(bool) if m is not None and m.shape == shape else None


def masked_matters(a, b, where: np.ndarray | None) -> np.ndarray | None:
    """Where a per-token observable's values matter, masked positions included when they do.

    The rule (its one home): a value at a masked position is harmless when the trainer masks it
    downstream, and neither side can be blamed for junk there; but a side whose value is exactly
    0 at every masked position masks it itself, so its callers may sum or log it unmasked, and
    the other side leaving anything else there (a whitened advantage on padding, a loss
    gradient into a padded token) is a real difference: then masked positions are compared too.
    Where both sides zero them, or neither does, only the valid positions count. Applied between
    two revisions of one trainer, to outputs, per-token extras and gradients of a loss."""
    if where is None or where.all():
        return where
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a64.shape != where.shape or b64.shape != where.shape:
        return where
    masked = ~where
    zero_a, zero_b = bool((a64[masked] == 0).all()), bool((b64[masked] == 0).all())
    return None if zero_a != zero_b else where


def _of_scalar(boundary: str, grad: str) -> bool:
    """A gradient of a scalar output (a loss: what trains), not of a token output summed by the
    hunt (its masked positions are the sum's, not the trainer's)."""
    port = get_boundary(boundary).output(grad.split("/", 1)[0])
    return port is not None and port.kind == "scalar"


def _differs(a: np.ndarray, b: np.ndarray, where: np.ndarray | None, atol: float, rtol: float
             ) -> tuple[bool, list[list[int]], bool]:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a64.shape != b64.shape:
        return True, [], False
    with np.errstate(invalid="ignore", over="ignore"):
        same = np.isclose(a64, b64, atol=atol, rtol=rtol, equal_nan=True) | (a64 == b64)
    if where is not None:
        same |= ~where
    bad = ~same
    if not bad.any():
        return False, [], False
    nonfin = bool((~np.isfinite(a64[bad])).any() or (~np.isfinite(b64[bad])).any())
    return True, np.argwhere(bad)[:64].tolist(), nonfin


NOT_RUN = ("unsupported", "excluded")  # answers with nothing to compare: no option, or a precondition unmet


def not_run(*answers: dict[str, Any]) -> dict[str, Any] | None:
    """The first answer that ran nothing (Unsupported, or an adapter's precondition unmet)."""
    return next((a for a in answers if a["status"] in NOT_RUN), None)


def differences(boundary: str, ex, a: dict[str, Any], b: dict[str, Any], atol: float = ATOL,
                rtol: float = RTOL, masked: bool = True, one_sided: bool = False) -> list[Difference]:
    """Every observable on which answers `a` (base) and `b` (head) to example `ex` differ (none
    where a side does not support the example: nothing to compare). `masked`: apply
    `masked_matters` (off against the reference, which zeroes every masked position as its own
    convention). `one_sided`: an output or extra only one side has is a difference (see above)."""
    if not_run(a, b):
        return []
    if a["status"] == "error" or b["status"] == "error":
        text = lambda r: f"{r['type']}: {r['message']}" if r["status"] == "error" else "answered"  # noqa: E731
        return [] if a["status"] == b["status"] else [Difference("exception", [], text(a), text(b))]
    out = []
    for kind in ("grads", "outputs", "inputs_after", "extras"):  # the gradient first: it is what trains
        if kind == "extras":  # a config attribute one side changed and the other left as it was
            ea, eb = a.get(kind, {}), b.get(kind, {})
            out += [Difference(n, [], float(n in ea), float(n in eb))
                    for n in sorted(set(ea) ^ set(eb)) if one_sided or n.startswith("config:") and not n.endswith(".value")]
        elif kind == "outputs" and one_sided:
            oa, ob = a.get(kind) or {}, b.get(kind) or {}
            out += [Difference(n, [], float(n in oa), float(n in ob)) for n in sorted(set(oa) ^ set(ob))]
        for name in a.get(kind, {}):
            if name not in b.get(kind, {}):
                continue
            x, y = a[kind][name], b[kind][name]
            label = f"grad:{name}" if kind == "grads" else f"input:{name}" if kind == "inputs_after" else name
            if kind == "extras" and np.shape(x) != np.shape(y):
                out.append(Difference(label, [], np.asarray(x).tolist(), np.asarray(y).tolist()))
                continue
            if x is None or y is None:  # no gradient path on a side: zeros, as the gradient families read it
                shape = ex.inputs[name.split("/", 1)[1]].shape if kind == "grads" else ()
                x = np.zeros(shape, np.float32) if x is None else x
                y = np.zeros(shape, np.float32) if y is None else y
            where = None if kind == "inputs_after" else _extra_valid(ex, np.shape(x)) if kind == "extras" \
                else _valid(boundary, label, ex, np.shape(x))
            if masked and (kind != "grads" or _of_scalar(boundary, name)):
                where = masked_matters(x, y, where)
            tol = (0.0, 0.0) if kind == "inputs_after" else (atol, rtol)
            bad, pos, nonfin = _differs(x, y, where, *tol)
            if bad:
                out.append(Difference(label, pos, np.asarray(x).tolist(), np.asarray(y).tolist(), nonfin))
    return out


def deviation_for(deviations: dict[str, dict[str, Any]], boundary: str, observable: str,
                  config: dict[str, Any], skipped: bool = False) -> str | None:
    """The name of the declared deviation that explains a difference (None: none does). One
    that does not apply at the checkout (`excuses.standing`) explains nothing; `skipped`: the
    name of such a one that would have (the report says why it was skipped)."""
    for name, d in deviations.items():
        if d["boundary"] != boundary or d.get("applies", True) == skipped:
            continue
        if d["observables"] and observable not in d["observables"]:
            continue
        if all(_key(config.get(k)) in {_key(v) for v in vs} for k, vs in d["when"].items()):
            return name
    return None


def skipped_note(deviations: dict[str, dict[str, Any]], name: str) -> str:
    """What a finding says of the declared deviation that would have explained it, skipped here."""
    return f"declared deviation {name!r} is skipped here: {deviations[name]['skipped']}"


def values_at(values: Any, positions: list[list[int]]) -> Any:
    """The values at the differing positions (all of them for a scalar or an exception)."""
    if not positions or not isinstance(values, list):
        return values
    out = []
    for p in positions[:16]:
        v = values
        for i in p:
            v = v[i]
        out.append(v)
    return out


def describe(d: Difference, verdict: str, viol: dict[str, list[str]], base: str, head: str, ruling=None) -> str:
    """A difference in one line: where, both sides' values there, and why it is a finding (`verdict`)."""
    where = f" at {d.positions[:4]}" if d.positions else ""
    if ruling is not None:  # no family explains it: the reference on the same input says
        return (f"{d.observable} differs{where}: {base} {values_at(d.base, d.positions[:4])} vs "
                f"{head} {values_at(d.head, d.positions[:4])} ({verdict}: no invariant family explains it; "
                f"{ruling.reason})")
    why = {"fixed": f"base violates {', '.join(sorted(set(viol['base']) - set(viol['head'])))}",
           "regressed": f"head violates {', '.join(sorted(set(viol['head']) - set(viol['base'])))}",
           "bug": f"the target violates {', '.join(sorted(set(viol['head']) - set(viol['base'])))}",
           "reference-bug": f"the reference violates {', '.join(sorted(set(viol['base']) - set(viol['head'])))}",
           }.get(verdict, "no invariant family explains it")
    return (f"{d.observable} differs{where}: {base} {values_at(d.base, d.positions[:4])} vs "
            f"{head} {values_at(d.head, d.positions[:4])} ({verdict}: {why})")
