"""The trainer composes, not the adapter: where an adapter runs a step of the trainer's chain.

A boundary's value is often made by a chain inside the trainer (per-token loss -> reducer ->
normaliser -> scaling). The adapter calls the outermost function of that chain that runs on
one CPU process. A step that cannot run there (Megatron divides slime's loss by the normaliser
after ``loss_function`` returns; a gradient all-reduce) the adapter runs itself, in a
module-level function marked `trainer_step` (the reason beside the code) and named by the
boundary's ``@implements(..., steps=(fn,))`` (`sentinel list boundaries --target T` shows it).

`Audit` is the check: a `TorchFunctionMode` that, while boundaries run, sees every torch op with
its caller. A tensor made by the trainer's code (a frame under the trainer's roots) is the
trainer's, and so is what the adapter's code derives from it; a reduction, normalisation or
scaling op (`STEP_OPS`; a product with a 0/1 mask is masking, not scaling) that the adapter's
code applies to such a tensor outside a declared step of the running boundary is a finding.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch.overrides import TorchFunctionMode

STEPS: dict[Any, Callable] = {}  # code object -> the marked function (`trainer_step`)

REDUCING = frozenset({"sum", "mean", "nansum", "nanmean", "prod", "std", "var", "std_mean", "var_mean", "norm",
                      "logsumexp", "cumsum", "softmax", "log_softmax", "sum_to_size"})
SCALING = frozenset({"div", "div_", "divide", "true_divide", "__truediv__", "__rtruediv__", "__itruediv__",
                     "__floordiv__", "floor_divide", "mul", "mul_", "multiply", "__mul__", "__rmul__", "__imul__"})
STEP_OPS = REDUCING | SCALING
_MUL = frozenset({"mul", "mul_", "multiply", "__mul__", "__rmul__", "__imul__"})

_HERE = str(Path(__file__).resolve())
_TORCH = str(Path(torch.__file__).resolve().parent)
_FRAMEWORK = str(Path(__file__).resolve().parent)  # sentinel/adapters: layout helpers run as adapter code


def trainer_step(reason: str) -> Callable[[Callable], Callable]:
    """Mark a module-level adapter function as a step of the trainer's chain that the adapter
    runs because the trainer's own runs beyond one CPU process (`reason` says where and why)."""
    if not str(reason).strip():
        raise TypeError("a trainer step needs a reason")

    def mark(fn: Callable) -> Callable:
        fn.__sentinel_step__ = str(reason)  # type: ignore[attr-defined]
        STEPS[fn.__code__] = fn
        return fn
    return mark


def step_reason(fn: Callable) -> str | None:
    return getattr(fn, "__sentinel_step__", None)


@dataclasses.dataclass(frozen=True)
class Finding:
    """An adapter's own reduction / normalisation / scaling of a value the trainer returned."""

    boundary: str
    op: str
    where: str  # file:line of the adapter's frame
    function: str  # the adapter function that ran it

    def __str__(self) -> str:
        return f"{self.boundary}: {self.function} applies {self.op} to a trainer value at {self.where}"


def _is_mask(x: Any) -> bool:
    if isinstance(x, bool) or (isinstance(x, (int, float)) and x == 1):
        return True
    if not isinstance(x, torch.Tensor):
        return False
    if x.dtype == torch.bool:
        return True
    with torch._C.DisableTorchFunction():
        return bool(((x == 0) | (x == 1)).all())


def _tensors(xs: Iterable[Any]) -> Iterable[torch.Tensor]:
    for x in xs:
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            yield from _tensors(x)
        elif isinstance(x, dict):
            yield from _tensors(x.values())


class Audit(TorchFunctionMode):
    """While active, every torch op is classified by its first caller outside torch: the trainer
    (`trainer_roots`), the adapter (`adapter_roots`, plus sentinel/adapters), or neither.
    `boundary(name, allowed)` sets what runs now and the declared steps it may run; `findings`
    collects what the adapter did outside them, `declared` what it did inside them."""

    def __init__(self, trainer_roots: Iterable[str], adapter_roots: Iterable[str]):
        super().__init__()
        self.trainer = tuple(str(Path(r).resolve()) for r in trainer_roots if r)
        self.adapter = (*(str(Path(r).resolve()) for r in adapter_roots if r), _FRAMEWORK)
        # id -> weak reference of each tensor the trainer made, or the adapter derived from one (a
        # WeakSet compares tensors with ==)
        self.theirs: dict[int, weakref.ref] = {}
        self.findings: list[Finding] = []
        self.declared: list[Finding] = []  # the same ops, run in a declared step (what the adapter composes)
        self.trainer_ops = 0  # ops seen from the trainer's code (a run that saw none watched nothing)
        self.running, self.allowed = "?", frozenset()
        self._kind: dict[str, str] = {}

    def boundary(self, name: str, allowed: Iterable[Callable] = ()) -> None:
        self.running, self.allowed = name, frozenset(f.__code__ for f in allowed)

    def _classify(self, filename: str) -> str:
        kind = self._kind.get(filename)
        if kind is None:
            path = str(Path(filename).resolve()) if not filename.startswith("<") else filename
            if path.startswith(_TORCH) or path == _HERE or filename.startswith("<"):
                kind = "skip"
            elif any(path.startswith(r) for r in self.trainer):
                kind = "trainer"
            elif any(path.startswith(r) for r in self.adapter):
                kind = "adapter"
            else:
                kind = "other"
            self._kind[filename] = kind
        return kind

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        frame = sys._getframe(1)
        caller, kind = None, "skip"
        while frame is not None:
            kind = self._classify(frame.f_code.co_filename)
            if kind != "skip":
                caller = frame
                break
            frame = frame.f_back
        if kind == "trainer":
            self.trainer_ops += 1
            self._mark(out)
        elif kind == "adapter":
            given = list(_tensors((*args, *kwargs.values())))
            if any(self._theirs(t) for t in given):
                self._mark(out)
                name = getattr(func, "__name__", str(func))
                if name in STEP_OPS and not self._masking(name, args, kwargs):
                    seen = Finding(self.running, name, f"{caller.f_code.co_filename}:{caller.f_lineno}",
                                   getattr(caller.f_code, "co_qualname", caller.f_code.co_name))
                    (self.declared if self._declared(caller) else self.findings).append(seen)
        return out

    def _theirs(self, t: torch.Tensor) -> bool:
        ref = self.theirs.get(id(t))
        return ref is not None and ref() is t

    def _mark(self, out: Any) -> None:
        for t in _tensors([out]):
            self.theirs[id(t)] = weakref.ref(t)

    def _masking(self, name: str, args: tuple, kwargs: dict) -> bool:
        if name not in _MUL:
            return False
        operands = [*args[:2], *kwargs.values()]
        return any(_is_mask(x) for x in operands)

    def _declared(self, frame: Any) -> bool:
        while frame is not None:
            if frame.f_code in self.allowed:
                return True
            frame = frame.f_back
        return False


def adapter_roots(adapter: Any) -> list[str]:
    """The folder of the adapter's package (its own code, whatever it is installed as)."""
    return [str(Path(inspect.getfile(type(adapter))).resolve().parent)]
