"""The part of every validate.py that is not the call: turning what the trainer's function
returned into the scenario's [B, T] / [B] / scalar layout, and the check itself.

This module is copied verbatim into each generated validate.py (it imports only numpy and,
lazily, torch), and the exporter imports it to pick the layout, so the bundle and the
exporter read a trainer's values the same way. Keep it standalone.
"""

import math

import numpy as np


def as_array(v):
    """A tensor, a number or a list of them as a float64 numpy array."""
    try:
        import torch
        if isinstance(v, torch.Tensor):
            return v.detach().double().cpu().numpy()
        if isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
            return [t.detach().double().cpu().numpy() for t in v]
    except ImportError:  # pragma: no cover - torch is always there where a trainer runs
        pass
    if isinstance(v, (int, float, bool)):
        return np.asarray(float(v))
    return np.asarray(v, dtype=np.float64)


def canonical(v, layout, shape):
    """What the trainer returned, in the scenario's layout (see LAYOUTS)."""
    a = as_array(v)
    if layout == "same":
        return np.asarray(a).reshape(shape)
    if layout == "rows":  # one tensor per sample, each the whole row (slime's per-sample lists)
        return np.stack([np.asarray(r).reshape(-1) for r in a]).reshape(shape)
    if layout == "flat":  # the rows concatenated (slime's packed micro-batch)
        return np.concatenate([np.asarray(r).reshape(-1) for r in a]).reshape(shape) if isinstance(a, list) \
            else np.asarray(a).reshape(shape)
    if layout == "drop_first":  # a prompt column in front (AReaL rolls the loss mask by one)
        return np.asarray(a)[..., 1:].reshape(shape)
    if layout == "drop_last":
        return np.asarray(a)[..., :-1].reshape(shape)
    raise ValueError("unknown layout " + repr(layout))


LAYOUTS = ("same", "rows", "flat", "drop_first", "drop_last")


def same_values(a, b, where=None, atol=1e-6, rtol=1e-5):
    """NaN-aware elementwise closeness of two arrays of one shape, at `where` (None: all)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    with np.errstate(invalid="ignore"):
        ok = np.isclose(a, b, atol=atol, rtol=rtol, equal_nan=True) | (a == b)
    if where is not None:
        ok |= ~np.broadcast_to(np.asarray(where, bool), a.shape)
    return bool(ok.all())


def offending(check, observed, expected=None, where=None, atol=0.0, rtol=0.0):
    """Positions (as index lists) where `observed` breaks `check`:
    "values": differs from `expected`; "finite": not finite; "uniform": a row's values (where
    `where`) are not all one value."""
    o = np.asarray(observed, np.float64)
    w = np.ones(o.shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), o.shape)
    if check == "finite":
        bad = ~np.isfinite(o) & w
    elif check == "uniform":
        bad = np.zeros(o.shape, bool)
        for i in range(o.shape[0]):
            vals = o[i][w[i]]
            if vals.size:
                bad[i] = w[i] & ~np.isclose(o[i], vals[0], atol=atol, rtol=rtol, equal_nan=True)
    else:
        e = np.broadcast_to(np.asarray(expected, np.float64), o.shape)
        with np.errstate(invalid="ignore"):
            ok = np.isclose(o, e, atol=atol, rtol=rtol, equal_nan=True) | (o == e)
        bad = ~ok & w
    return np.argwhere(bad).tolist()


def plain(x):
    """JSON-ready values: NaN and infinities as strings, numpy as lists."""
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else str(x)
    if isinstance(x, np.integer):
        return int(x)
    return x
