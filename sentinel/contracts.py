"""Output contracts: what a boundary call must return, checked on every observation.

Each boundary declares its outputs (sentinel/boundaries.py): kind token `[B, T]`, row `[B]`,
scalar `[]` or vocab `[B, T, V]`, a real dtype, and whether the output is required (always,
or under the option values that ask for it: `Port.required_when`). A target whose call
breaks the contract (a loss of shape `[7]`, a Python list, a complex tensor, a required
output missing) gets an `error` verdict naming the output: a wrong-shaped answer must never
be compared, broadcast, and found to "hold".
"""

from __future__ import annotations

from dataclasses import dataclass

from . import boundaries


@dataclass(frozen=True)
class Returned:
    """What the target returned for one output, described without torch."""

    type: str  # "tensor", "number", or the Python type's name
    dtype_kind: str  # numpy kind: f float, b bool, i/u int, c complex; "" for a non-tensor
    shape: tuple[int, ...]


def batch_shape(boundary: str, input_shapes: dict[str, tuple[int, ...]]) -> tuple[int | None, int | None]:
    """(B, T) of a call, from its inputs: token inputs give both, row inputs give B."""
    spec = boundaries.get(boundary)
    for p in spec.inputs:
        if p.kind == "token" and p.name in input_shapes and len(input_shapes[p.name]) == 2:
            return input_shapes[p.name]
    rows = [input_shapes[p.name] for p in spec.inputs if p.kind == "row" and p.name in input_shapes]
    return (rows[0][0] if rows and rows[0] else None), None


def problems(boundary: str, returned: dict[str, Returned], batch: tuple[int | None, int | None],
             config: dict | None = None) -> list[str]:
    """Every way `returned` breaks `boundary`'s output contract (empty: it keeps it); `config`
    (normalised) decides the outputs an option asks for."""
    spec = boundaries.get(boundary)
    # a call that keeps the contract is remembered by all the answer depends on: the same
    # outputs, shapes and batch, and the values of the options that make an output required
    try:
        key = (boundary, id(spec), tuple((n, r.type, r.dtype_kind, r.shape) for n, r in returned.items()), batch,
               tuple((config or {}).get(k) for p in spec.outputs for k, _ in p.required_when))
        hash(key)
    except TypeError:  # an unhashable option value: checked each time
        return _problems(spec, returned, batch, config)
    if key in _KEPT:
        return []
    out = _problems(spec, returned, batch, config)
    if not out and len(_KEPT) < _KEPT_MAX:
        _KEPT.add(key)
    return out


_KEPT: set[tuple] = set()
_KEPT_MAX = 4096


def _problems(spec: boundaries.Boundary, returned: dict[str, Returned], batch: tuple[int | None, int | None],
              config: dict | None) -> list[str]:
    boundary = spec.name
    out = []
    for p in spec.outputs:
        if p.name not in returned:
            if p.required_under(config or {}):
                why = "requires it" if p.required else f"requires it under {p.when()}"
                out.append(f"output {p.name!r} is missing (the {boundary} boundary {why})")
            continue
        r = returned[p.name]
        want = {"token": batch, "row": batch[:1], "scalar": (), "vocab": (*batch, None)}[p.kind]
        if r.type == "number":
            if p.kind != "scalar":
                out.append(f"output {p.name!r} is a Python number, expected a {p.kind} tensor of shape {_shape(want)}")
            continue
        if r.type != "tensor":
            out.append(f"output {p.name!r} is a {r.type}, not a tensor")
            continue
        if r.dtype_kind not in "fbiu":
            out.append(f"output {p.name!r} has a {'complex' if r.dtype_kind == 'c' else 'non-numeric'} dtype")
        if len(r.shape) != len(want) or any(w is not None and w != s for w, s in zip(want, r.shape)):
            out.append(f"output {p.name!r} has shape {_shape(r.shape)}, expected {_shape(want)} ({p.kind})")
    names = {p.name for p in spec.outputs}
    out.extend(f"output {n!r} is not an output of the {boundary} boundary (known: {', '.join(sorted(names))})"
               for n in returned if n not in names)
    return out


def _shape(shape: tuple) -> str:
    return "[" + ", ".join(str(s) if s is not None else "BTV"[i] if i < 3 else "?" for i, s in enumerate(shape)) + "]"
