"""The adapter contract: how the worker calls one target's code at a canonical boundary.

An adapter lives in the worker process only (it imports torch and the target). It never
decides a verdict: it translates canonical inputs into the target's conventions, calls the
target's real function and translates the outputs back.

Where a boundary is mapped to a trainer's functions: the `@implements` decorator on the
adapter's method for it, and the adapter's `declines` table for the boundaries it does not
offer, with the reason; the `unsupported` table (`Refusal`) for the config choices a boundary
it offers has no counterpart for. Where a trainer differs from the reference math on purpose (its
documented convention), the adapter's `deviations` table says so once, with a reason and a
link: `sentinel hunt --against reference` reports such a difference as a `deviation`, never
as a finding. `Adapter.mapping()` reads both back (no target import needed);
`Adapter.supported()` and `Adapter.call()` dispatch through them. The base class of the real
trainers' adapters is `trainer.TrainerAdapter`; the helpers for writing one are the other
modules of this package (binding, layout, loading, shims, spying, frames, backport).

An adapter translates layout only; it never trims, drops or refuses an input the trainer's
function accepts. Where a trainer's real data path can never carry some input (a layout its
caller never produces), the adapter declares that once, by name, in `preconditions`
(`Precondition`); `Adapter.call` checks them before any target code runs and raises
`PreconditionUnmet`, which the runner reports as `excluded` and the hunt counts per name.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import torch

from sentinel import boundaries
from sentinel.errors import PreconditionUnmet, Unsupported
from sentinel.adapters import excuses
from sentinel.adapters.options import Pin, is_trainer, with_trainer_defaults


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
        # worked out once per (function, its code, root): ~0.4 ms of every hunt call otherwise.
        # The code is in the key because `sentinel mutate` swaps a function's __code__; the cache
        # holds the function, so its id is never another function's; another checkout is another
        # root and other function objects.
        try:
            where = _where(fn, getattr(fn, "__code__", None), root)
        except TypeError:  # an unhashable callable (a method of an unhashable object)
            where = _where.__wrapped__(fn, None, root)
        return cls(*where)

    def with_also(self, *others: "FunctionRef") -> "FunctionRef":
        return dataclasses.replace(self, also=self.also + others)

    def as_dict(self) -> dict[str, Any]:
        return {"module": self.module, "qualname": self.qualname, "file": self.file, "line": self.line,
                "also": [a.as_dict() for a in self.also]}


@functools.lru_cache(maxsize=1024)
def _where(fn: Callable, code: Any, root: Path | None) -> tuple[str, str, str | None, int | None]:
    """(module, qualname, file relative to `root` where it is under it, def line) of `fn`."""
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
            file = str(Path(file).resolve().relative_to(Path(root).resolve()))
        except ValueError:
            pass
    return getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", repr(fn)), file, line


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
    # everything else the call returned or changed (observables.py: `returned:<path>`,
    # `config:<attr>`), compared by a differential hunt beside the outputs
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Implementation:
    """One boundary an adapter implements: the method, and the target functions it calls
    (``module:qualname``, as the adapter reaches them at the version it was written for)."""

    boundary: str
    method: str
    calls: tuple[str, ...] = ()
    # steps of the trainer's chain the adapter runs itself (`composing.trainer_step`: each with its reason)
    steps: tuple[Callable, ...] = ()


@dataclass(frozen=True)
class Precondition:
    """An input the trainer's real data path never produces, declared once by an adapter.

    holds(inputs, config) -> bool: True when the canonical input (tensors, the boundary's
    normalised config) is one the trainer can receive. `reason` says why the others never
    reach it, `link` where the trainer's code shows it; `boundaries` limits it (empty: all)."""

    holds: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    reason: str
    link: str = ""
    boundaries: tuple[str, ...] = ()

    def applies(self, boundary: str) -> bool:
        return not self.boundaries or boundary in self.boundaries


@dataclass(frozen=True)
class Deviation:
    """A documented convention where the target's result differs from the reference math.

    boundary: where; observables: the outputs (or `grad:OUT/IN`, `input:IN`) that differ,
    empty for any; when: the config choices under which it applies (key -> allowed values),
    empty for always; reason: why it is intended; link: the trainer's documentation or code.
    source / body / commits tie it to the code it excuses (`excuses.py`): the trainer function
    ("module:qualname"), the hash of its body as the author read it (or several), the commits it holds for
    ((first, until): first an ancestor of the checkout or the checkout, until not). Where they
    do not match the checkout, the deviation does not apply there."""

    boundary: str
    reason: str
    link: str
    observables: tuple[str, ...] = ()
    when: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    source: str = ""
    body: tuple[str, ...] = ()  # the hashes of the bodies it was read at (one per version the author read)
    commits: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"boundary": self.boundary, "reason": self.reason, "link": self.link,
                "observables": list(self.observables), "when": {k: list(v) for k, v in self.when.items()},
                "source": self.source, "body": list(self.body), "commits": list(self.commits)}

    def problem(self) -> str | None:
        """What is wrong with its tie to the code (None: nothing)."""
        if self.source and ":" not in self.source:
            return f"source names 'module:qualname', got {self.source!r}"
        if self.body and not self.source:
            return "a body hash needs the source it is of"
        if self.commits and not (1 <= len(self.commits) <= 2 and self.commits[0]):
            return f"commits is (first,) or (first, until), got {self.commits!r}"
        return None


def deviation(boundary: str, *, reason: str, link: str, observables: tuple[str, ...] = (),
              when: Mapping[str, tuple[Any, ...] | list[Any]] | None = None, source: str = "",
              body: str | tuple[str, ...] = (), commits: tuple[str, ...] = ()) -> Deviation:
    return Deviation(boundary, reason, link, tuple(observables), {k: tuple(v) for k, v in (when or {}).items()},
                     source, (body,) if isinstance(body, str) else tuple(body), tuple(commits))


@dataclass(frozen=True)
class Refusal:
    """A config choice the target has no counterpart for, declared once (an adapter's
    `unsupported` table): `Adapter.call` raises `Unsupported` ("OPTIONS: reason") before any
    target code runs. `when(config)` decides (default: any of `options` is set)."""

    boundary: str
    options: tuple[str, ...]
    reason: str
    when: Callable[[Mapping[str, Any]], bool] | None = None

    def refuses(self, config: Mapping[str, Any]) -> bool:
        return self.when(config) if self.when is not None else any(config.get(o) for o in self.options)

    @property
    def message(self) -> str:
        return f"{' / '.join(self.options)}: {self.reason}"


def refuse(boundary: str, *options: str, reason: str,
           when: Callable[[Mapping[str, Any]], bool] | None = None) -> Refusal:
    return Refusal(boundary, options, reason, when)


_MARK = "__sentinel_implements__"


def _dotted(target: str | Callable) -> str:
    if isinstance(target, str):
        if ":" not in target:
            raise ValueError(f"a call is named 'module:qualname', got {target!r}")
        return target
    return f"{target.__module__}:{target.__qualname__}"


def implements(boundary: str, *, calls: tuple[str | Callable, ...] | list[str | Callable] = (),
               steps: tuple[Callable, ...] = ()) -> Callable:
    """Mark an adapter method as the implementation of `boundary`, calling the target
    functions `calls` (``"module:qualname"`` strings, or the functions themselves):

        @implements("kl", calls=("verl.trainer.ppo.core_algos:kl_penalty",))
        def b_kl(self, inputs, config): ...

    `steps`: the adapter's own functions that run a step of the trainer's chain the trainer's
    code cannot run on one CPU process, each marked `composing.trainer_step(reason)`."""
    named = tuple(_dotted(c) for c in calls)
    bad = [getattr(f, "__qualname__", repr(f)) for f in steps if not getattr(f, "__sentinel_step__", None)]
    if bad:
        raise TypeError(f"@implements({boundary!r}, steps=...): {', '.join(bad)} is not marked "
                        f"@trainer_step(reason=...)")

    def mark(fn: Callable) -> Callable:
        setattr(fn, _MARK, (boundary, named, tuple(steps)))
        return fn
    return mark


class Adapter:
    """Base class. Subclasses set `name`, implement `load` and one method per boundary,
    marked `@implements(boundary, calls=...)`; `declines` maps the boundaries they do not
    offer to the reason. (An unmarked method named ``b_<boundary>`` still implements
    ``<boundary>``, calling nothing declared.)"""

    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    declines: ClassVar[Mapping[str, str]] = {}
    preconditions: ClassVar[Mapping[str, Precondition]] = {}
    deviations: ClassVar[Mapping[str, Deviation]] = {}  # name -> a documented difference from the reference
    unsupported: ClassVar[tuple[Refusal, ...]] = ()  # config choices refused before any target code runs
    loss_path_files: ClassVar[tuple[str, ...]] = ()  # what `sentinel history` watches (empty: every commit)
    # options the trainer reads that stay at one value on purpose, each with why (`options.pin`)
    pinned: ClassVar[tuple[Pin, ...]] = ()
    # boundary -> canonical option -> the values the hunt draws on this target beyond the
    # boundary's own `hunt` values (an option the trainer reads that nothing varied)
    option_domains: ClassVar[Mapping[str, Mapping[str, tuple[Any, ...]]]] = {}
    # "module:qualname" of a mapped function -> {"text of a branching line -> text of the line
    # it jumps to" (one arc; without " -> ": every arc of the line) -> why no call from one CPU
    # process can take it}: `sentinel hunt --coverage` lists those apart
    unreachable: ClassVar[Mapping[str, Mapping[str, str]]] = {}
    # why no call can leave state another call reads (module globals, the adapter object, torch's
    # own): then the catalog's scenarios may share one forked child (sentinel/worker.py `batch`).
    # Empty (every trainer adapter): one fork per scenario, since a trainer's in-place state (a
    # list appended to, a stats tracker) cannot be seen from outside and would reach the next one
    stateless: ClassVar[str] = ""
    _implemented: ClassVar[dict[str, Implementation]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a mixin of boundary methods (adapters/<target>/surfaces.py) may decline boundaries too
        cls.declines = {k: v for klass in reversed(cls.__mro__) for k, v in vars(klass).get("declines", {}).items()}
        # ... and refuse options or declare preconditions of its own boundaries: every class's tables count
        refusals = [r for klass in reversed(cls.__mro__) for r in vars(klass).get("unsupported", ())]
        cls.unsupported = tuple(r for i, r in enumerate(refusals) if all(r is not s for s in refusals[:i]))
        cls.preconditions = {k: v for klass in reversed(cls.__mro__)
                             for k, v in vars(klass).get("preconditions", {}).items()}
        table: dict[str, Implementation] = {}
        for attr in dir(cls):
            fn = getattr(cls, attr, None)
            if not callable(fn):
                continue
            mark = getattr(fn, _MARK, None)
            if mark is not None:
                boundary, calls, steps = mark
                boundaries.get(boundary)  # an unknown boundary name fails here, at class creation
            elif attr.startswith("b_"):
                boundary, calls, steps = attr[2:], (), ()
            else:
                continue
            if boundary in table and table[boundary].method != attr:
                raise TypeError(f"{cls.__name__}: boundary {boundary!r} is implemented twice "
                                f"({table[boundary].method}, {attr})")
            table[boundary] = Implementation(boundary, attr, calls, steps)
        for pname, pre in cls.preconditions.items():
            if not isinstance(pre, Precondition):
                raise TypeError(f"{cls.__name__}.preconditions[{pname!r}] is not a Precondition")
            for b in pre.boundaries:
                boundaries.get(b)
        for ref in cls.unsupported:
            if not isinstance(ref, Refusal) or any(boundaries.get(ref.boundary).option(o) is None for o in ref.options):
                raise TypeError(f"{cls.__name__}.unsupported: {ref!r} is not a Refusal of options of its boundary")
        for p in cls.pinned:
            if not isinstance(p, Pin) or not p.option or not str(p.reason).strip():
                raise TypeError(f"{cls.__name__}.pinned: {p!r} pins an option without a reason (options.pin(boundary, "
                                f"option, reason=...))")
            if p.boundary != "*":
                boundaries.get(p.boundary)
        for b, domains in cls.option_domains.items():
            spec = boundaries.get(b)
            for k, values in domains.items():
                opt = spec.option(k)
                if is_trainer(k):  # a trainer option: plain values, the trainer's default first
                    bad = [f"{v!r} is not a plain value" for v in values
                           if not isinstance(v, (bool, int, float, str, type(None)))]
                else:
                    bad = ["unknown option (a trainer option is spelled 'trainer:<name>')"] if opt is None else \
                        [w for v in values if (w := opt.problem(v))]
                if bad or not values:
                    raise TypeError(f"{cls.__name__}.option_domains[{b!r}][{k!r}]: {'; '.join(bad) or 'no values'}")
        both = sorted(set(table) & set(cls.declines))
        if both:
            raise TypeError(f"{cls.__name__} both implements and declines {', '.join(both)}")
        for name, dev in cls.deviations.items():
            spec = boundaries.get(dev.boundary)  # an unknown boundary fails here, at class creation
            bad = [k for k in dev.when if spec.option(k) is None]
            if bad or not dev.reason or not dev.link:
                raise TypeError(f"{cls.__name__}.deviations[{name!r}]: needs a reason and a link, and options "
                                f"of {dev.boundary!r} in `when` (unknown: {bad})")
            if dev.problem():
                raise TypeError(f"{cls.__name__}.deviations[{name!r}]: {dev.problem()}")
        cls._implemented = table

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        self.root = root  # checkout (worktree) to import from; None = installed package
        self.device = device
        self.options = dict(options or {})
        self.stubs: list[str] = []  # modules replaced by import shims, for the report

    def load(self) -> dict[str, Any]:
        """Import the target's boundary modules. Return facts for the report (version, paths)."""
        return {}

    @classmethod
    def declined(cls, boundary: str) -> str | None:
        """Why this adapter does not offer `boundary` (None: it implements it)."""
        if boundary in cls._implemented:
            return None
        return cls.declines.get(boundary) or f"target {cls.name!r} has no {boundary!r} boundary"

    @classmethod
    def mapping(cls) -> dict[str, dict[str, Any]]:
        """Every canonical boundary (and any other this adapter implements) ->
        {"calls": target functions as "module:qualname", "declined": reason or None,
        "method": the adapter method or None, "steps": {adapter function: why the adapter runs
        that step of the trainer's chain}}. Needs no target import."""
        names = [*boundaries.BOUNDARIES, *sorted(set(cls._implemented) - set(boundaries.BOUNDARIES))]
        out = {}
        for b in names:
            impl = cls._implemented.get(b)
            out[b] = {"calls": list(impl.calls) if impl else [], "declined": cls.declined(b),
                      "method": impl.method if impl else None,
                      "steps": {f.__qualname__: f.__sentinel_step__ for f in impl.steps} if impl else {}}
        return out

    def deviations_here(self) -> dict[str, dict[str, Any]]:
        """The deviation table with, for each, whether it applies at this checkout
        (`excuses.standing`: "applies", "skipped", "hash_now"); worked out once per adapter."""
        if getattr(self, "_standing", None) is None:
            roots = self.trainer_roots()
            self._standing = {name: {**d.as_dict(), **excuses.standing(d.source, d.body, d.commits, roots, self.root)}
                              for name, d in self.deviations.items()}
        return self._standing

    @classmethod
    def pins(cls, boundary: str) -> dict[str, str]:
        """The options this adapter pins on `boundary` -> why."""
        return {p.option: p.reason for p in cls.pinned if p.applies(boundary)}

    def trainer_roots(self) -> list[str]:
        """The files or folders holding the trainer's code: an option read from a frame there
        is the trainer's (`options.recording`); the adapter's own reads are not."""
        return [str(self.root)] if self.root is not None else []

    def supported(self) -> list[str]:
        """The boundaries this adapter implements (declined ones excluded)."""
        return sorted(self._implemented)

    def unmet(self, boundary: str, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> PreconditionUnmet | None:
        """The first declared precondition this input breaks (as the error to raise), or None."""
        for name, pre in self.preconditions.items():
            if pre.applies(boundary) and not pre.holds(inputs, config):
                return PreconditionUnmet(name, pre.reason, pre.link)
        return None

    def call(self, boundary: str, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        impl = self._implemented.get(boundary)
        if impl is None:
            raise Unsupported(self.declined(boundary))
        # defaults and derived values (eps_clip_high None -> eps_clip) resolved once, here
        config = boundaries.get(boundary).normalise(config)
        # trainer options (options.TRAINER): this adapter's defaults filled in, another's refused
        config = with_trainer_defaults(config, dict(self.option_domains.get(boundary) or {}), self.name, boundary)
        unmet = self.unmet(boundary, inputs, config)
        if unmet is not None:  # before any target code: the trainer never receives this input
            raise unmet
        refused = next((r for r in self.unsupported if r.boundary == boundary and r.refuses(config)), None)
        if refused is not None:
            raise Unsupported(refused.message)
        return getattr(self, impl.method)(inputs, config)

    def _ref(self, fn: Callable) -> FunctionRef:
        """Where `fn` is, for the report (its file relative to the target root)."""
        return FunctionRef.of(fn, self.root)
