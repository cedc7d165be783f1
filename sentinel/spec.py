"""Scenario files: YAML -> validated `Scenario` objects, every error with file, line and field.

A file holds one scenario or several separated by `---`. sentinel/yamlfile.py reads it within
its limits into data and the line of each key; pydantic checks types, and the checks it cannot
know (boundary ports, tensor shapes, masks) follow here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import boundaries, yamlfile
from .adapters.options import is_trainer
from .catalog import display_path
from .invariants import REGISTRY, Invariant
from .yamlfile import LOADERS, SpecError, max_elements  # noqa: F401 - LOADERS and SpecError are spec's API too


class Variant(BaseModel):
    """A perturbed copy of the scenario: input and/or config overrides."""

    model_config = ConfigDict(extra="forbid")
    description: str = ""
    inputs: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)


class GradSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    of: str  # a scalar output (non-scalar outputs are summed)
    wrt: str  # an input among the boundary's grad_inputs


class Observe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grads: list[GradSpec] = Field(default_factory=list)


class ScenarioModel(BaseModel):
    """The YAML schema (`sentinel schema` prints it)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="unique, kebab-case")
    title: str
    description: str = ""
    boundary: str = Field(description=f"one of: {', '.join(sorted(boundaries.BOUNDARIES))}")
    targets: list[str] = Field(default_factory=lambda: ["*"], description="targets it applies to; * = all")
    config: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(description="canonical tensors: nested lists, or {values, dtype, pad}")
    variants: dict[str, Variant] = Field(default_factory=dict)
    observe: Observe = Field(default_factory=Observe)
    invariants: list[dict[str, Any]] = Field(min_length=1, description="single-key mappings: {family: {...}}")
    provenance: list[str] = Field(default_factory=list, description="links to the PR or issue behind it")
    tags: list[str] = Field(default_factory=list)


@dataclass
class Scenario:
    """A validated scenario, inputs decoded to numpy arrays."""

    id: str
    title: str
    description: str
    boundary: str
    targets: list[str]
    config: dict[str, Any]
    inputs: dict[str, np.ndarray]
    variants: dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]]
    grads: list[tuple[str, str]]
    invariants: list[Invariant]
    provenance: list[str]
    tags: list[str]
    file: str = ""
    line: int = 1
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> boundaries.Boundary:
        return boundaries.get(self.boundary)

    def applies_to(self, target: str) -> bool:
        return "*" in self.targets or target in self.targets

    def full_config(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**self.spec.config, **self.config, **(overrides or {})}


class _Ctx:
    """Collects problems for one document, resolving a field path to its line."""

    def __init__(self, file: str, lines: dict[tuple, int]):
        self.file, self.lines, self.problems = file, lines, []

    def line(self, path: tuple) -> int | None:
        for n in range(len(path), -1, -1):
            for p in (path[:n], tuple(map(str, path[:n]))):  # str: a key YAML read as a number (`1: x`)
                if p in self.lines:
                    return self.lines[p]
        return None

    def add(self, path: tuple, msg: str) -> None:
        self.problems.append((self.line(path), ".".join(map(str, path)), msg))


def load_file(path: str | Path) -> list[Scenario]:
    return load_text(yamlfile.read(path), display_path(Path(path)))


def load_text(text: str, file: str = "<string>") -> list[Scenario]:
    out, problems = [], []
    for start, doc, lines in yamlfile.documents(text, file):
        if doc is None:
            continue
        ctx = _Ctx(file, lines)
        try:
            sc = _parse(doc, ctx)
        except Exception as e:  # noqa: BLE001 - a file no check foresaw is still a bad file (exit 2), not a crash
            ctx.problems.append((start, "", f"cannot validate: {type(e).__name__}: {e}"))
            sc = None
        problems += ctx.problems
        if sc is not None and not ctx.problems:
            sc.file, sc.line = file, start
            out.append(sc)
    seen: dict[str, int] = {}
    for sc in out:
        if sc.id in seen:
            problems.append((sc.line, "id", f"duplicate scenario id {sc.id!r} (first at line {seen[sc.id]})"))
        seen.setdefault(sc.id, sc.line)
    if problems:
        raise SpecError(file, problems)
    if not out:
        raise SpecError(file, [(1, "", "no scenario in file")])
    return out


def _pydantic(model: type[BaseModel], data: Any, ctx: _Ctx, prefix: tuple) -> BaseModel | None:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = prefix + tuple(err["loc"])
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                allowed = ", ".join(model.model_fields) if len(err["loc"]) == 1 else ""
                msg = f"unknown key{' (allowed: ' + allowed + ')' if allowed else ''}"
            ctx.add(loc, msg)
        return None


def _parse(doc: Any, ctx: _Ctx) -> Scenario | None:
    if not isinstance(doc, dict):
        ctx.add((), f"a scenario must be a mapping, got {type(doc).__name__}")
        return None
    m = _pydantic(ScenarioModel, doc, ctx, ())
    if m is None:
        return None
    if m.boundary not in boundaries.BOUNDARIES:
        ctx.add(("boundary",), f"unknown boundary {m.boundary!r} (known: {', '.join(sorted(boundaries.BOUNDARIES))})")
        return None
    spec = boundaries.get(m.boundary)
    _check_config(m.config, spec, ctx, ("config",))
    inputs = _parse_inputs(m.inputs, spec, ctx, ("inputs",), base=None)
    variants = {}
    for name, v in m.variants.items():
        _check_config(v.config, spec, ctx, ("variants", name, "config"))
        # a variant overlays the base: with broken base inputs, check it on its own (base={}),
        # never as a base of its own (which would report the base's inputs as missing)
        vin = _parse_inputs(v.inputs, spec, ctx, ("variants", name, "inputs"), base=inputs if inputs is not None else {})
        variants[name] = ({**(inputs or {}), **(vin or {})}, v.config)
    grads = []
    for i, g in enumerate(m.observe.grads):
        _check_grad(g.of, g.wrt, spec, ctx, ("observe", "grads", i))
        grads.append((g.of, g.wrt))
    invs = []
    for i, item in enumerate(m.invariants):
        inv = _parse_invariant(item, ctx, ("invariants", i))
        if inv is not None:
            invs.append(inv)
    if inputs is not None:
        for name, (vin, vcfg) in {"": (inputs, {}), **variants}.items():
            _check_requires({**m.config, **vcfg}, vin, spec, ctx, ("variants", name, "config") if name else ("config",))
    if ctx.problems or inputs is None:
        return None
    sc = Scenario(m.id, m.title, m.description, m.boundary, m.targets, m.config, inputs, variants, grads,
                  invs, m.provenance, m.tags, raw=doc)
    for i, inv in enumerate(invs):
        key = next(iter(m.invariants[i]))
        for fld, msg in inv.check(sc):
            ctx.add(("invariants", i, key) + ((fld,) if fld else ()), msg)
    return None if ctx.problems else sc


def _check_config(config: dict[str, Any], spec: boundaries.Boundary, ctx: _Ctx, path: tuple) -> None:
    """Every key known to the boundary, every value one its option allows (the allowed ones listed)."""
    for key, value in config.items():
        if is_trainer(key):  # a trainer option (adapters.options.TRAINER): the target's adapter judges it
            if not isinstance(value, (bool, int, float, str, type(None))):
                ctx.add(path + (key,), f"{key}: a trainer option takes a plain value, not {value!r}")
            continue
        opt = spec.option(key)
        why = spec.problem({key: value}) if opt is None else opt.problem(value)
        if why is not None:
            ctx.add(path + (key,), why)


def _check_requires(config: dict[str, Any], inputs: dict[str, Any], spec: boundaries.Boundary, ctx: _Ctx,
                    path: tuple) -> None:
    for key, value in config.items():
        opt = spec.option(key)
        missing = [n for n in (opt.requires if opt is not None and value else ()) if n not in inputs]
        if missing:
            ctx.add(path + (key,), f"{key}: {value!r} needs the input(s) {', '.join(missing)}")


def _check_grad(of: str, wrt: str, spec: boundaries.Boundary, ctx: _Ctx, path: tuple) -> None:
    if spec.output(of) is None:
        ctx.add(path + ("of",), f"boundary {spec.name!r} has no output {of!r}")
    if wrt not in spec.differentiable:
        ctx.add(path + ("wrt",), f"gradients of {spec.name!r} can be taken w.r.t. {list(spec.differentiable)}, not {wrt!r}")


def _parse_invariant(item: Any, ctx: _Ctx, path: tuple) -> Invariant | None:
    if not isinstance(item, dict) or len(item) != 1:
        ctx.add(path, "an invariant is a single-key mapping, e.g. `- close: {output: loss, expected: 0.0}`")
        return None
    key, body = next(iter(item.items()))
    cls = REGISTRY.get(key)
    if cls is None:
        ctx.add(path + (key,), f"unknown invariant {key!r} (known: {', '.join(sorted(REGISTRY))})")
        return None
    return _pydantic(cls, body if body is not None else {}, ctx, path + (key,))


# --- tensors ----------------------------------------------------------------------------

_NONFINITE = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf}
_NP = {"float": np.float32, "mask": np.float32, "int": np.int64}


def _scalarise(x: Any) -> Any:
    if isinstance(x, list):
        return [_scalarise(v) for v in x]
    if isinstance(x, str) and x.lower() in _NONFINITE:
        return _NONFINITE[x.lower()]
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, (int, float)):
        return x
    raise ValueError(f"not a number: {x!r}")


def _flat(x: Any):
    for v in x if isinstance(x, list) else [x]:
        yield from _flat(v) if isinstance(v, list) else (v,)


def _short_list(xs: list[int], n: int = 8) -> str:
    return str(xs) if len(xs) <= n else str(xs[:n])[:-1] + ", ...]"


def _pad_problem(pad: Any, dtype: type) -> str | None:
    """Why `pad` cannot pad a tensor of `dtype` (not one number, beyond its range, a fraction
    for integers), else None."""
    try:
        pad = _scalarise(pad)
        if isinstance(pad, list):
            raise ValueError(f"not a number: {pad!r}")
    except ValueError as e:
        return f"a pad is one number: {e}"
    name = np.dtype(dtype).name
    if np.dtype(dtype).kind == "i":
        if not float(pad).is_integer():
            return f"a pad for {name} values is a whole number, not {pad!r}"
        info = np.iinfo(dtype)
        return None if info.min <= int(pad) <= info.max else f"pad {pad!r} is beyond the range of {name}"
    fits = not math.isfinite(pad) or abs(pad) <= float(np.finfo(dtype).max)
    return None if fits else f"pad {pad!r} is beyond the range of {name}"


def _depth(x: Any) -> int:
    return 1 + _depth(x[0]) if isinstance(x, list) and x else (1 if isinstance(x, list) else 0)


_LOOKS = {0: "a number", 1: "[...]", 2: "[[...], ...]", 3: "[[[...], ...], ...]"}


def _rectangular(x: Any) -> bool:
    """Every sub-list at each level has the same length (a [B, T, V] block, no padding)."""
    if not isinstance(x, list) or not x or not isinstance(x[0], list):
        return True
    return len({len(r) if isinstance(r, list) else -1 for r in x}) == 1 and all(_rectangular(r) for r in x)


def _parse_inputs(raw: dict[str, Any], spec: boundaries.Boundary, ctx: _Ctx, path: tuple,
                  base: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    out: dict[str, np.ndarray] = {}
    lengths: list[int] | None = None
    before = len(ctx.problems)
    for name, value in raw.items():
        port = spec.input(name)
        p = path + (name,)
        if port is None:
            ctx.add(p, f"boundary {spec.name!r} has no input {name!r} (inputs: {', '.join(x.name for x in spec.inputs)})")
            continue
        dtype = _NP[port.dtype]
        pad = None  # padding is asked for, never assumed: a short row is a typo until `pad:` says otherwise
        if isinstance(value, dict):
            extra = set(value) - {"values", "dtype", "pad"}
            if extra or "values" not in value:
                ctx.add(p, "a tensor mapping takes `values` and optional `dtype`, `pad`")
                continue
            if value.get("dtype") is not None:
                if value["dtype"] not in ("float32", "float64", "int64", "bool"):
                    ctx.add(p + ("dtype",), f"unsupported dtype {value['dtype']!r} (float32, float64, int64, bool)")
                    continue
                dtype = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.float32}[value["dtype"]]
            if "pad" in value:
                if (why := _pad_problem(value["pad"], dtype)) is not None:
                    ctx.add(p + ("pad",), why)
                    continue
                pad = _scalarise(value["pad"])
            value = value["values"]
        try:
            value = _scalarise(value)
        except ValueError as e:
            ctx.add(p, str(e))
            continue
        want = {"token": 2, "row": 1, "scalar": 0, "vocab": 3}[port.kind]
        if _depth(value) != want:
            ctx.add(p, f"{port.kind} input needs {want}-d values ({_LOOKS[want]}), got {_depth(value)}-d")
            continue
        if want == 3 and not _rectangular(value):
            ctx.add(p, "ragged tensor where a rectangle is needed: a vocab input is [B, T, V], every row "
                       "T positions of V values")
            continue
        if want == 2:
            lens = [len(r) for r in value]
            if len(set(lens)) > 1:
                if port.dtype == "mask":
                    ctx.add(p, "ragged tensor where a rectangle is needed: masks must be rectangular")
                    continue
                if pad is None:
                    ctx.add(p, f"ragged rows (lengths {_short_list(lens)}) where a rectangle is needed; to pad them "
                               "on purpose, write {values: [...], pad: 0.0}")
                    continue
                width = max(lens)
                value = [r + [pad] * (width - len(r)) for r in value]
                if lengths is not None and lengths != lens:
                    ctx.add(p, f"ragged lengths {lens} disagree with another input's {lengths}")
                lengths = lens
        if port.dtype == "mask" and (bad := next((v for v in _flat(value) if v not in (0, 1)), None)) is not None:
            ctx.add(p, f"a mask holds only 0 and 1, not {bad!r}")  # before float32 rounds 0.99999999 to 1
            continue
        try:
            with np.errstate(over="raise"):
                arr = np.asarray(value, dtype=dtype)
        except (ValueError, TypeError) as e:
            ctx.add(p, f"not a numeric tensor: {e}")
            continue
        except (OverflowError, FloatingPointError):
            ctx.add(p, f"a value beyond the range of {np.dtype(dtype).name}")
            continue
        if arr.size == 0:
            ctx.add(p, f"an empty tensor (shape {list(arr.shape)}): every input needs at least one row and one token")
            continue
        if arr.size > max_elements():
            ctx.add(p, f"{arr.size} values (shape {list(arr.shape)}): more than {max_elements()}, the limit per "
                       "tensor (SENTINEL_MAX_ELEMENTS raises it)")
            continue
        if port.dtype == "int" and not np.array_equal(np.asarray(value, dtype=np.float64), arr):
            ctx.add(p, "an integer input holds whole numbers only")
            continue
        out[name] = arr
    if len(ctx.problems) > before:
        return None
    if base is None:
        if lengths is not None and "loss_mask" not in out and spec.input("loss_mask"):
            width = max(lengths)
            out["loss_mask"] = np.asarray([[1.0] * n + [0.0] * (width - n) for n in lengths], np.float32)
        for port in spec.inputs:
            if port.required and port.name not in out:
                ctx.add(path, f"missing required input {port.name!r} of boundary {spec.name!r}")
    _check_shapes({**(base or {}), **out}, spec, ctx, path)
    return out if len(ctx.problems) == before else None


def _check_shapes(inputs: dict[str, np.ndarray], spec: boundaries.Boundary, ctx: _Ctx, path: tuple) -> None:
    # a vocab tensor [B, T, V] shares [B, T] with the token tensors
    token = {n: a.shape[:2] for n, a in inputs.items() if spec.input(n).kind in ("token", "vocab")}
    rows = {n: a.shape for n, a in inputs.items() if spec.input(n).kind == "row"}
    shapes = set(token.values())
    if len(shapes) > 1:
        desc = ", ".join(f"{n} {list(inputs[n].shape)}" for n in token)
        ctx.add(path, f"token tensors and masks must share one [B, T] shape: {desc}")
        return
    for v, a in ((n, a) for n, a in inputs.items() if spec.input(n).kind == "vocab"):
        for n, ids in inputs.items():  # token ids index the vocabulary
            port = spec.input(n)
            if port.kind == "token" and port.dtype == "int" and ids.size and not (
                    (ids >= 0).all() and (ids < a.shape[2]).all()):
                ctx.add(path + (n,), f"token ids must lie in [0, {a.shape[2]}): {v} has a vocabulary of {a.shape[2]}")
    batch = next(iter(shapes))[0] if shapes else None
    for n, s in rows.items():
        if batch is not None and s[0] != batch:
            ctx.add(path + (n,), f"row input has {s[0]} rows but the token tensors have B={batch}")
    if batch is None and len({s for s in rows.values()}) > 1:
        ctx.add(path, "row inputs disagree in length: " + ", ".join(f"{n} {list(s)}" for n, s in rows.items()))


def load_paths(paths: list[str | Path]) -> list[Scenario]:
    """Files and folders (recursively, *.yaml / *.yml) -> scenarios; all errors at once."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(x for x in p.rglob("*") if x.suffix in (".yaml", ".yml"))
        else:
            files.append(p)
    out, errors = [], []
    for f in files:
        try:
            out += load_file(f)
        except SpecError as e:
            errors.append(e)
    seen: dict[str, str] = {}
    for sc in out:
        if sc.id in seen and seen[sc.id] != f"{sc.file}:{sc.line}":
            errors.append(SpecError(sc.file, [(sc.line, "id", f"duplicate scenario id {sc.id!r} (also in {seen[sc.id]})")]))
        seen.setdefault(sc.id, f"{sc.file}:{sc.line}")
    if errors:
        raise errors[0] if len(errors) == 1 else MultiSpecError(errors)
    return out


class MultiSpecError(SpecError):
    def __init__(self, errors: list[SpecError]):
        self.errors = errors
        self.file = errors[0].file
        self.problems = [p for e in errors for p in e.problems]
        Exception.__init__(self, "\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [ln for e in self.errors for ln in e.lines()]
