"""Scenario files as YAML: read within limits, every key with its line, errors at their line.

Memory limits bite before the memory is spent, in three steps:

1. the file's size is checked before it is read (BYTES_PER_VALUE per value a tensor may hold);
2. one pass over the event stream (its memory: the nesting depth) counts values as the parser
   meets them, and refuses deep nesting, a tensor or list of more than the limit and a
   file of more than VALUES_PER_FILE times it, before a single node is composed (composed
   nodes cost about 350 bytes a value). The file limits scale with SENTINEL_MAX_ELEMENTS
   above its default, never below;
3. libyaml (the C loader; PyYAML's pure-Python one where libyaml is not built in) composes each
   document into nodes, which keep their lines; a walk over the nodes refuses alias bombs and
   duplicate keys before the nodes are constructed into data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import SentinelError

MAX_DEPTH = 64  # nesting levels of a document
ALIAS_BUDGET = 10_000  # nodes that aliases may add by expansion
DEFAULT_MAX_ELEMENTS = 100_000  # values per tensor; SENTINEL_MAX_ELEMENTS overrides
BYTES_PER_VALUE = 64  # a file's size, per value one tensor may hold
VALUES_PER_FILE = 4  # values (and keys) of a whole file, per value one tensor may hold
_FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.2 floats that YAML 1.1 (PyYAML) reads as strings: 1e-3, 1E5, 1.0e5 (no dot or no exponent sign)
_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")
_RAISES = "SENTINEL_MAX_ELEMENTS raises it"


class SpecError(SentinelError):
    """A bad scenario file. `problems` holds (line, field, message) triples."""

    def __init__(self, file: str | Path, problems: list[tuple[int | None, str, str]]):
        self.file = str(file)
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [f"{self.file}:{line or '?'}: {fld}: {msg}" if fld else f"{self.file}:{line or '?'}: {msg}"
                for line, fld, msg in self.problems]


def max_elements() -> int:
    """Values one tensor may hold: SENTINEL_MAX_ELEMENTS, else DEFAULT_MAX_ELEMENTS."""
    raw = os.environ.get("SENTINEL_MAX_ELEMENTS", "")
    try:
        n = int(raw) if raw.strip() else DEFAULT_MAX_ELEMENTS
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"SENTINEL_MAX_ELEMENTS={raw!r} is not a positive integer")
    return n


def _limit(file: str | Path) -> int:
    try:
        return max_elements()
    except ValueError as e:
        raise SpecError(file, [(1, "", str(e))]) from None


def _per_file(limit: int) -> int:
    """What the file limits are multiples of: the per-tensor limit, never below its default
    (a lower SENTINEL_MAX_ELEMENTS narrows tensors, not whole files)."""
    return max(limit, DEFAULT_MAX_ELEMENTS)


def _size_problem(size: int, limit: int) -> str | None:
    cap = BYTES_PER_VALUE * _per_file(limit)
    return None if size <= cap else (f"a scenario file is at most {cap} bytes ({BYTES_PER_VALUE} per value a tensor "
                                     f"may hold; {_RAISES}); this one has {size}")


def read(path: str | Path) -> str:
    """A scenario file's text: its size checked before a byte is read, then UTF-8."""
    path, limit = Path(path), _limit(path)
    try:
        with path.open("rb") as f:
            if why := _size_problem(os.fstat(f.fileno()).st_size, limit):
                raise SpecError(path, [(1, "", why)])
            raw = f.read(BYTES_PER_VALUE * _per_file(limit) + 1)  # not more, whatever the size said (a pipe, a growing file)
    except FileNotFoundError:
        raise SpecError(path, [(None, "", "no such file")]) from None
    except OSError as e:
        raise SpecError(path, [(None, "", f"cannot read: {e}")]) from None
    if why := _size_problem(len(raw), limit):
        raise SpecError(path, [(1, "", why)])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise SpecError(path, [(line, "", f"not UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start}")]) from None


class _PyLoader(yaml.SafeLoader):
    """The pure-Python loader, its recursive composer guarded against deep nesting."""

    _depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                              self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


LOADERS: list[type] = [_PyLoader]
if getattr(yaml, "CSafeLoader", None) is not None:  # libyaml: nesting capped at 1000 by libyaml itself
    LOADERS.insert(0, type("_CLoader", (yaml.CSafeLoader,), {}))
for _cls in LOADERS:
    _cls.add_implicit_resolver(_FLOAT_TAG, _FLOAT_12, list("-+0123456789."))


def _tensor_key(path: tuple) -> tuple | None:
    """The path of the tensor a node belongs to: inputs.X, variants.V.inputs.X, invariants.I.F.expected."""
    if len(path) >= 2 and path[0] == "inputs":
        return path[:2]
    if len(path) >= 4 and path[0] == "variants" and path[2] == "inputs":
        return path[:4]
    if len(path) >= 4 and path[0] == "invariants" and path[3] == "expected":
        return path[:4]
    return None


def _fld(path: tuple) -> str:
    return ".".join(map(str, path[:4])) + (".…" if len(path) > 4 else "")


class _Open:
    """A mapping or sequence the event stream is inside: its path, line, items so far and
    (a mapping) the key its next value belongs to."""

    __slots__ = ("path", "line", "items", "mapping", "key")

    def __init__(self, path: tuple, line: int, mapping: bool):
        self.path, self.line, self.items, self.mapping, self.key = path, line, 0, mapping, None


def _scan(loader: Any, file: str, limit: int) -> None:
    """Count values as the parser meets them (step 2 of the module's docstring)."""
    open_: list[_Open] = []
    counts: dict[tuple, int] = {}  # values per tensor
    lines: dict[tuple, int] = {}  # line of each tensor's key
    total = 0

    def refuse(line: int, path: tuple, msg: str) -> SpecError:
        return SpecError(file, [(line, _fld(path), msg)])

    while loader.check_event():
        ev = loader.get_event()
        line = ev.start_mark.line + 1
        if isinstance(ev, yaml.CollectionEndEvent):
            open_.pop()
            continue
        if not isinstance(ev, yaml.NodeEvent):
            continue
        total += 1
        if total > VALUES_PER_FILE * _per_file(limit):
            raise refuse(line, open_[-1].path if open_ else (),
                         f"more than {VALUES_PER_FILE * _per_file(limit)} values in one file ({VALUES_PER_FILE} times "
                         f"the limit per tensor; {_RAISES})")
        parent = open_[-1] if open_ else None
        path: tuple = ()
        if parent is not None and parent.mapping and parent.key is None:  # a key
            parent.key = ev.value if isinstance(ev, yaml.ScalarEvent) else "?"
            if _tensor_key(parent.path + (parent.key,)) == parent.path + (parent.key,):
                lines[parent.path + (parent.key,)] = line
            path = parent.path + ("?",)
        elif parent is not None:  # a value
            path = parent.path + ((parent.key,) if parent.mapping else (parent.items,))
            parent.items += 1
            parent.key = None
            if (key := _tensor_key(path)) is not None and isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent)):
                counts[key] = counts.get(key, 0) + 1
                if counts[key] > limit:
                    raise refuse(lines.get(key, line), key, f"more than {limit} values (the limit per tensor; {_RAISES})")
            if parent.items > limit and not parent.mapping:  # a mapping's keys count in the file's total
                raise refuse(parent.line, parent.path, f"more than {limit} values (the limit per tensor; {_RAISES})")
        if isinstance(ev, yaml.CollectionStartEvent):
            if len(path) > MAX_DEPTH:  # as _walk counts: the node inside more than MAX_DEPTH collections
                raise refuse(line, path, f"nested deeper than {MAX_DEPTH} levels")
            open_.append(_Open(path, line, isinstance(ev, yaml.MappingStartEvent)))


def _walk(root: yaml.Node, file: str) -> dict[tuple, int]:
    """Line of every field path of a composed document; a SpecError for duplicate keys,
    non-scalar keys, nesting beyond MAX_DEPTH through aliases and aliases expanding beyond
    ALIAS_BUDGET nodes."""
    lines: dict[tuple, int] = {}
    problems: list[tuple[int | None, str, str]] = []
    seen: set[int] = set()
    expanded = 0
    stack: list[tuple[yaml.Node, tuple, int]] = [(root, (), 1)]  # (node, path, line it is reached from)
    while stack:
        node, path, line = stack.pop()
        if id(node) in seen:  # an alias: walked again, as construction expands it, at the alias's line
            expanded += 1
            if expanded > ALIAS_BUDGET:
                raise SpecError(file, [(line, _fld(path),
                                        f"YAML aliases expand to more than {ALIAS_BUDGET} extra nodes (an alias bomb?)")])
        else:
            seen.add(id(node))
            line = node.start_mark.line + 1
        if _tensor_key(path) is None or not isinstance(node, yaml.ScalarNode):  # not a line for each value of a tensor
            lines.setdefault(path, line)
        if len(path) > MAX_DEPTH:
            raise SpecError(file, [(line, _fld(path), f"nested deeper than {MAX_DEPTH} levels (or a recursive alias)")])
        if isinstance(node, yaml.SequenceNode):
            stack += reversed([(v, path + (i,), line) for i, v in enumerate(node.value)])  # popped in document order
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            children = []
            for k, v in node.value:
                kline = k.start_mark.line + 1
                if not isinstance(k, yaml.ScalarNode):
                    problems.append((kline, _fld(path), "a mapping key must be a plain value, not a list or mapping"))
                    continue
                if k.tag != "tag:yaml.org,2002:merge":
                    if (k.tag, k.value) in first:
                        problems.append((kline, ".".join(map(str, path + (k.value,))),
                                         f"duplicate key {k.value!r} (first at line {first[k.tag, k.value]})"))
                        continue
                    first[k.tag, k.value] = kline
                lines[path + (k.value,)] = kline
                children.append((v, path + (k.value,), kline))
            stack += reversed(children)
    if problems:
        raise SpecError(file, problems)
    return lines


def _yaml_error(e: yaml.YAMLError, file: str, text: str, c_loader: bool) -> SpecError:
    """A YAML error as a SpecError at its line (libyaml counts a reader error's position in bytes)."""
    if isinstance(e, yaml.reader.ReaderError):
        before = text.encode("utf-8")[:e.position].decode("utf-8", "replace") if c_loader else text[:e.position]
        char = f"#x{e.character:04x}" if isinstance(e.character, int) else repr(e.character)
        return SpecError(file, [(before.count("\n") + 1, "", f"malformed YAML: unacceptable character {char}: {e.reason}")])
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    msg = " ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
    return SpecError(file, [(mark.line + 1 if mark else None, "", f"malformed YAML: {msg}")])


def documents(text: str, file: str) -> list[tuple[int, Any, dict[tuple, int]]]:
    """(first line, data, line of each field path) per document; any YAML failure, and any
    limit passed, is a SpecError with its line."""
    limit = _limit(file)
    if why := _size_problem(len(text), limit):
        raise SpecError(file, [(1, "", why)])
    loader_cls = LOADERS[0]
    c_loader = loader_cls is not _PyLoader
    out = []
    for composing in (False, True):
        try:
            loader = loader_cls(text)
        except yaml.YAMLError as e:  # the pure-Python reader refuses control characters up front
            raise _yaml_error(e, file, text, c_loader) from None
        try:
            if not composing:
                _scan(loader, file, limit)
                continue
            while True:
                node = None
                if not loader.check_node():
                    break
                node = loader.get_node()
                lines = _walk(node, file)
                out.append((node.start_mark.line + 1, loader.construct_document(node), lines))
        except yaml.YAMLError as e:
            raise _yaml_error(e, file, text, c_loader) from None
        except (ValueError, TypeError, OverflowError, RecursionError) as e:  # e.g. `!!int abc` (ValueError)
            line = node.start_mark.line + 1 if composing and node is not None else None
            raise SpecError(file, [(line, "", f"malformed YAML: {type(e).__name__}: {e}")]) from None
        finally:
            loader.dispose()
    return out
