"""The adapter contract: how the worker calls one target's code at a canonical boundary.

An adapter lives in the worker process only (it imports torch and the target). It never
decides a verdict: it translates canonical inputs into the target's conventions, calls the
target's real function and translates the outputs back.

Shared helpers for writing an adapter live in `support.py`.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import torch

from sentinel import boundaries


class Unsupported(Exception):
    """The boundary (or this config of it) does not exist at this target version."""


class TargetLoadError(Exception):
    """The target could not be located or imported; the message names what is missing."""


@dataclass
class FunctionRef:
    """Which target function a boundary call reached (for the report)."""

    module: str
    qualname: str
    file: str | None = None
    line: int | None = None
    also: tuple["FunctionRef", ...] = ()  # other target functions whose results are among the outputs

    @classmethod
    def of(cls, fn: Callable, root: Path | None = None) -> "FunctionRef":
        fn = inspect.unwrap(getattr(fn, "_torchdynamo_orig_callable", fn))
        try:
            file = inspect.getsourcefile(fn)
            # the def line (or its first decorator), as getsourcelines says, without tokenizing
            # the whole body: a long function cost ~3 ms per call that way
            code = getattr(fn, "__code__", None)
            line = code.co_firstlineno if code is not None else inspect.getsourcelines(fn)[1]
        except (TypeError, OSError):
            file, line = None, None
        if file and root is not None:
            try:
                file = str(Path(file).resolve().relative_to(root.resolve()))
            except ValueError:
                pass
        return cls(getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", repr(fn)), file, line)

    def with_also(self, *others: "FunctionRef") -> "FunctionRef":
        return dataclasses.replace(self, also=self.also + others)

    def as_dict(self) -> dict[str, Any]:
        return {"module": self.module, "qualname": self.qualname, "file": self.file, "line": self.line,
                "also": [a.as_dict() for a in self.also]}


@dataclass
class BoundaryResult:
    """What one call returned, in canonical layout.

    outputs: canonical output name -> tensor (or python float).
    inputs_after: canonical input name -> the state, after the call, of the object the
      target received for that input (translated back). Absent names default to the
      canonical tensors the worker passed in, which covers targets that take them as is.
    """

    outputs: dict[str, Any]
    inputs_after: dict[str, torch.Tensor] = field(default_factory=dict)
    function: FunctionRef | None = None


class Adapter:
    """Base class. Subclasses set `name`, implement `load` and one `b_<boundary>` per boundary."""

    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        self.root = root  # checkout (worktree) to import from; None = installed package
        self.device = device
        self.options = dict(options or {})
        self.stubs: list[str] = []  # modules replaced by import shims, for the report

    def load(self) -> dict[str, Any]:
        """Import the target's boundary modules. Return facts for the report (version, paths)."""
        return {}

    def supported(self) -> list[str]:
        return sorted(n[2:] for n in dir(self) if n.startswith("b_") and callable(getattr(self, n)))

    def call(self, boundary: str, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        fn = getattr(self, "b_" + boundary, None)
        if fn is None:
            raise Unsupported(f"target {self.name!r} has no {boundary!r} boundary")
        # defaults and derived values (eps_clip_high None -> eps_clip) resolved once, here
        return fn(inputs, boundaries.get(boundary).normalise(config))

    def _ref(self, fn: Callable) -> FunctionRef:
        """Where `fn` is, for the report (its file relative to the target root)."""
        return FunctionRef.of(fn, self.root)
