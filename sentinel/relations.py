"""Relations between a drawn example's inputs (`strategies.examples(relations=...)`).

Every tensor is drawn on its own (strategies.py). A relation is one more choice, drawn per
example: the relations trainers' data paths usually carry (equal old, behaviour and current
log-probs), and edges the value grids never reach (a ratio exactly at a clip edge, a far
log-ratio, an empty row, one log-ratio along a whole row), or the optional inputs left out.
Applied in place to the drawn numpy arrays; the first, "independent", changes nothing and is
what a shrunk example keeps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .boundaries import get as get_boundary

F32 = np.float32

LOG_PROB_PAIRS = (("log_probs", "old_log_probs"), ("log_probs", "ref_log_probs"), ("log_probs", "rollout_log_probs"),
                  ("old_log_probs", "rollout_log_probs"))
FAR_LOG_RATIOS = (12.0, 25.0)  # past the clamps trainers put on a log-ratio or a KL (10, 20)


def _pair(inputs: dict[str, np.ndarray]) -> tuple[str, str] | None:
    return next(((a, b) for a, b in LOG_PROB_PAIRS if a in inputs and b in inputs), None)


def _edge_log_prob(old: np.ndarray, edge: float) -> np.ndarray:
    """log-probs whose float32 ratio exp(lp - old) to `old` is float32(edge) where a few ulps
    of searching find one (else the nearest: the edge to within an ulp)."""
    target = F32(edge)
    lp = (old + F32(np.log(edge))).astype(F32)
    for _ in range(4):
        r = np.exp((lp - old).astype(F32)).astype(F32)
        lp = np.where(r > target, np.nextafter(lp, F32(-np.inf)), np.where(r < target, np.nextafter(lp, F32(np.inf)), lp))
    return lp.astype(F32)


def absent_inputs(boundary: str, cfg: dict[str, Any]) -> tuple[str, ...]:
    """The optional inputs the "absent" relation leaves out of a `boundary` example drawn with
    `cfg`: those a trainer reads only when its batch holds them (`Port.absent_drawn`), except
    where a set option requires one (`use_decoupled_loss` needs the rollout log-probs)."""
    spec = get_boundary(boundary)
    needed = {n for o in spec.options if cfg.get(o.name) for n in o.requires}
    return tuple(p.name for p in spec.inputs if p.absent_drawn and p.name not in needed)


def relate(name: str, inputs: dict[str, np.ndarray], cfg: dict[str, Any], signs: list[int], pick: int,
           boundary: str = "") -> None:
    """Apply relation `name` in place (a relation whose tensors the boundary lacks changes nothing).
    signs: a +-1 per position (which clip edge, which direction of a far ratio); pick: a small
    int (which far log-ratio, which row to empty)."""
    if name == "absent":  # the batch without its optional keys: the trainer's path for a missing one
        for n in absent_inputs(boundary, cfg) if boundary else ():
            inputs.pop(n, None)
        return
    valid = inputs["loss_mask"].astype(bool) if "loss_mask" in inputs else None
    pair = _pair(inputs)
    if valid is None or pair is None and name != "empty_row":
        return
    sign = np.resize(np.asarray(signs or [1], np.int64), valid.shape) > 0
    if name == "on_policy":  # one update per rollout: every log-prob tensor equals the policy's
        for n in ("old_log_probs", "rollout_log_probs", "ref_log_probs"):
            if n in inputs and "log_probs" in inputs:
                inputs[n] = inputs["log_probs"].copy()
    elif name == "behaviour_is_old" and "old_log_probs" in inputs and "rollout_log_probs" in inputs:
        inputs["rollout_log_probs"] = inputs["old_log_probs"].copy()
    elif name == "clip_edge" and "old_log_probs" in inputs:  # ratio exactly at 1 - eps or 1 + eps_high
        lo = float(cfg.get("eps_clip") if cfg.get("eps_clip") is not None else 0.2)
        hi = float(cfg.get("eps_clip_high") if cfg.get("eps_clip_high") is not None else lo)
        old = inputs["old_log_probs"]
        edge = np.where(sign, _edge_log_prob(old, 1.0 + hi), _edge_log_prob(old, max(1.0 - lo, 1e-3)))
        inputs["log_probs"] = np.where(valid, np.minimum(edge, F32(0)), inputs["log_probs"]).astype(F32)
    elif name == "far":  # |log-ratio| past a trainer's clamps, either way, log-probs kept <= 0
        a, b = pair
        k = F32(FAR_LOG_RATIOS[pick % len(FAR_LOG_RATIOS)])
        x, y = inputs[a], inputs[b]
        inputs[a] = np.where(valid & ~sign, y - k, x).astype(F32)
        inputs[b] = np.where(valid & sign, x - k, y).astype(F32)
    elif name == "flat":  # one log-ratio per row: every valid token of a row drifted alike
        _flatten(inputs, valid)
    elif name == "empty_row" and valid.shape[0] > 1:  # one row with no valid token, the others kept
        row = pick % valid.shape[0]
        if valid.sum() > valid[row].sum():
            inputs["loss_mask"] = inputs["loss_mask"].copy()
            inputs["loss_mask"][row] = 0


def _flatten(inputs: dict[str, np.ndarray], valid: np.ndarray) -> None:
    """Every log-prob tensor's difference to log_probs made constant along each row's valid
    tokens (its drawn difference at the row's first valid token), so a sequence's mean and
    maximum of a per-token divergence land on the values a token's does (its sum too, in a row of
    one valid token): a trainer's threshold on such a sequence statistic is met with equality
    where one on a token is (a `<=` against `<`).
    A row whose values would pass 0 is shifted down as a whole (differences kept, still on the grid)."""
    names = [n for n in LOG_PROBS if n in inputs]
    if len(names) < 2 or not valid.any():
        return
    lp = inputs[names[0]]
    first = valid.argmax(axis=1)[:, None]
    new = {n: lp + (np.take_along_axis(inputs[n], first, 1) - np.take_along_axis(lp, first, 1)) for n in names[1:]}
    new[names[0]] = lp
    top = np.max([np.where(valid, a, -np.inf).max(axis=1) for a in new.values()], axis=0)
    shift = np.maximum(np.where(np.isfinite(top), top, 0.0), 0.0)[:, None]
    for n, a in new.items():
        inputs[n] = np.where(valid, a - shift, inputs[n]).astype(F32)


LOG_PROBS = ("log_probs", "old_log_probs", "ref_log_probs", "rollout_log_probs")
RELATIONS = ("independent", "on_policy", "behaviour_is_old", "clip_edge", "far", "empty_row", "absent", "flat")
