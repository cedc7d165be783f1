"""Everything a trainer's function hands back, as named observables (worker side).

A boundary's outputs are the canonical ports; a trainer's function returns and changes more:
a metrics dict beside the loss, a tuple's other members, a dataclass of statistics, and the
attributes of the args/config object it was given. `returned` flattens a return value into
`returned:<path>` names (`returned:1`, `returned:metrics.clipfrac`); `Watch` snapshots an
args/config object before the call and names what the call changed in it
(`config:<attribute>`). An adapter puts both in `BoundaryResult.extras`; the differential hunt
compares them as it compares outputs (an observable only one side has is not a difference).

An attribute the call left as it was is no change, so a hunt sees nothing of it; a scenario that
names one (`asking`, set by `observe` for a run's named extras) gets it observed all the same:
`config:<attr>` 0.0 and `config:<attr>.value` the value it kept. Only an attribute the watched
object does not have (or a boundary that watches none) stays absent: nothing to observe there.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
from typing import Any, Iterable, Iterator

import torch

MAX_DEPTH = 4
VALUE = ".value"
_ASKED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("sentinel_asked_extras", default=frozenset())


@contextlib.contextmanager
def asking(names: Iterable[str]) -> Iterator[None]:
    """The extras a scenario names, for the calls inside (`Watch.changes` observes those even
    where the call changed nothing)."""
    token = _ASKED.set(frozenset(names))
    try:
        yield
    finally:
        _ASKED.reset(token)


def _numeric(v: Any) -> torch.Tensor | None:
    if isinstance(v, torch.Tensor):
        return v if v.dtype != torch.bool else v.float()
    if isinstance(v, bool):
        return torch.tensor(float(v))
    if isinstance(v, (int, float)):
        return torch.tensor(float(v))
    return None


def _children(v: Any) -> list[tuple[str, Any]] | None:
    if isinstance(v, dict):
        return [(str(k), x) for k, x in v.items()]
    if isinstance(v, (tuple, list)):
        # a list of tensors holds one per sample: one observable; a tuple's members are named apart
        # (verl's (pg_loss, clipfrac, ppo_kl, ...))
        if isinstance(v, list) and v and all(isinstance(x, torch.Tensor) for x in v):
            flat = [x.reshape(-1) for x in v]
            try:  # rows of one length stack into a batch (then masked like one), else one run
                return [("", torch.stack(flat) if len({len(x) for x in flat}) == 1 else torch.cat(flat))]
            except RuntimeError:
                pass
        return [(str(i), x) for i, x in enumerate(v)]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return [(f.name, getattr(v, f.name)) for f in dataclasses.fields(v)]
    return None


def returned(value: Any, prefix: str = "returned") -> dict[str, torch.Tensor]:
    """Every numeric leaf of a return value, by its path (tensors, numbers, bools):
    `returned` for a lone tensor, `returned:1`, `returned:metrics.clipfrac` inside."""
    out: dict[str, torch.Tensor] = {}

    def walk(v: Any, path: list[str]) -> None:
        leaf = _numeric(v)
        if leaf is not None:
            out[f"{prefix}:{'.'.join(path)}" if path else prefix] = leaf
            return
        for name, x in (_children(v) if len(path) < MAX_DEPTH else None) or []:
            walk(x, path + [name] if name else path)
    walk(value, [])
    return out


def _state(obj: Any) -> dict[str, Any]:
    attrs = obj if isinstance(obj, dict) else getattr(obj, "__dict__", {})
    out = {}
    for k, v in attrs.items():
        if isinstance(v, torch.Tensor):
            out[k] = v.detach().clone()
        elif isinstance(v, (bool, int, float, str, type(None), tuple, list, dict)):
            try:
                out[k] = copy.deepcopy(v)
            except Exception:  # noqa: BLE001 - an attribute that cannot be copied is not watched
                pass
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and bool(torch.equal(a, b.detach()))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


class Watch:
    """An args/config object's attributes before a call; `changes()` after it."""

    def __init__(self, obj: Any, name: str = "config"):
        self.obj, self.name, self.before = obj, name, _state(obj)

    def changes(self) -> dict[str, torch.Tensor]:
        """`config:<attr>` -> 1.0 for each attribute the call set, replaced or deleted (and the
        numeric value it now holds as `config:<attr>.value` where it has one)."""
        after = _state(self.obj)
        out: dict[str, torch.Tensor] = {}
        for k in sorted(set(self.before) | set(after)):
            if k in self.before and k in after and _same(self.before[k], after[k]):
                continue
            out[f"{self.name}:{k}"] = torch.tensor(1.0)
            v = _numeric(after.get(k))
            if v is not None:
                out[f"{self.name}:{k}{VALUE}"] = v.detach().clone()
        prefix = f"{self.name}:"
        for name in sorted(n for n in _ASKED.get() if n.startswith(prefix) and n not in out):
            k = name[len(prefix):]
            if k in after:  # unchanged: not set by the call
                out[name] = torch.tensor(0.0)
            elif k.endswith(VALUE) and (v := _numeric(after.get(k[:-len(VALUE)]))) is not None:
                out[name] = v.detach().clone()  # the value it kept
        return out


def extras(value: Any, *watches: Watch) -> dict[str, torch.Tensor]:
    """`BoundaryResult.extras` of one call: what it returned (`returned`) and what it changed in
    each watched args/config object (`Watch.changes`)."""
    out = returned(value)
    for w in watches:
        out.update(w.changes())
    return out
