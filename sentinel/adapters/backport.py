"""Python 3.12 type-parameter syntax in a target's code, read by Python 3.10 / 3.11.

PEP 695 (``def f[T](x: T)``, ``class C[T]: ...``, ``type Alias = ...``) only declares type
variables; it changes no value a function computes. A trainer whose checkout uses it at
some commits (AReaL, 2026-01 to 2026-03) still has to load on the interpreter RL-Sentinel
runs on. `backport_type_params("areal")` installs an import hook for that package only:
a module that compiles is loaded untouched; one that raises SyntaxError on an interpreter
older than 3.12 is rewritten before it compiles, keeping every line and statement where it
is (the type-parameter brackets become blanks; a generic class gets ``Generic[...]`` in its
bases; ``type X = v`` becomes ``X = v``), and each type parameter is a ``TypeVar`` (or
``ParamSpec`` / ``TypeVarTuple``) in the module's namespace. Nothing is written to the
checkout's ``__pycache__`` from a rewritten module.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import io
import sys
import tokenize
import typing
from typing import Any

_GENERIC = "__sentinel_Generic__"
_OPEN, _CLOSE = "([{", ")]}"


def _match(toks: list[tokenize.TokenInfo], i: int) -> int:
    """Index of the bracket closing the one at toks[i]."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].type == tokenize.OP and toks[j].string in _OPEN:
            depth += 1
        elif toks[j].type == tokenize.OP and toks[j].string in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    raise SyntaxError("unbalanced brackets")


def _params(toks: list[tokenize.TokenInfo]) -> list[tuple[str, str]]:
    """(kind, name) of each type parameter between the brackets: "" (TypeVar), "*", "**"."""
    out, depth, star, first = [], 0, "", True
    for t in toks:
        if t.type == tokenize.OP and t.string in _OPEN:
            depth += 1
        elif t.type == tokenize.OP and t.string in _CLOSE:
            depth -= 1
        elif depth == 0 and t.type == tokenize.OP and t.string == ",":
            star, first = "", True
        elif depth == 0 and first and t.type == tokenize.OP and t.string in ("*", "**"):
            star = t.string
        elif depth == 0 and first and t.type == tokenize.NAME:
            out.append((star, t.string))
            first = False
    return out


def rewrite(source: str) -> tuple[str, list[tuple[str, str]]]:
    """`source` with PEP 695 syntax replaced as the module docstring says, and the type
    parameters it declared. Lines and statements keep their places."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def at(pos: tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL)]
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement)
    params: list[tuple[str, str]] = []

    def blank(a: int, b: int) -> None:  # keep newlines: every later line stays where it is
        edits.append((a, b, "".join(c if c == "\n" else " " for c in source[a:b])))

    statement_start = True
    for i, t in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.type == tokenize.NAME and t.string in ("def", "class") and nxt is not None and nxt.type == tokenize.NAME \
                and i + 2 < len(toks) and toks[i + 2].string == "[":
            lo, hi = i + 2, _match(toks, i + 2)
            found = _params(toks[lo + 1:hi])
            params += found
            blank(at(toks[lo].start), at(toks[hi].end))
            if t.string == "class":
                plain = ", ".join(n for k, n in found if not k)
                after = toks[hi + 1]
                if plain and after.string == ":":
                    edits.append((at(after.start), at(after.start), f"({_GENERIC}[{plain}])"))
                elif plain and after.string == "(":
                    close = _match(toks, hi + 1)
                    inner = toks[hi + 2:close]
                    kw = next((k for k, x in enumerate(inner) if x.string == "=" and k > 0), None)
                    if kw is not None:  # before the first keyword argument (metaclass=...)
                        edits.append((at(inner[kw - 1].start), at(inner[kw - 1].start), f"{_GENERIC}[{plain}], "))
                    else:
                        sep = ", " if inner and inner[-1].string != "," else ""
                        edits.append((at(toks[close].start), at(toks[close].start), f"{sep}{_GENERIC}[{plain}]"))
        elif statement_start and t.type == tokenize.NAME and t.string == "type" and nxt is not None \
                and nxt.type == tokenize.NAME and i + 2 < len(toks) and toks[i + 2].string in ("=", "["):
            # `type X = v` -> `X = v`, the name moved onto `type`'s columns (indentation unchanged)
            a, b = at(t.start), at(nxt.end)
            edits.append((a, b, nxt.string.ljust(b - a)))
            if toks[i + 2].string == "[":
                hi = _match(toks, i + 2)
                params += _params(toks[i + 3:hi])
                blank(at(toks[i + 2].start), at(toks[hi].end))
        statement_start = t.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING) or \
            (t.type == tokenize.OP and t.string == ";")
    out = source
    for a, b, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:a] + text + out[b:]
    return out, params


class _Loader(importlib.machinery.SourceFileLoader):
    """A target module's loader: untouched when it compiles, rewritten when it does not."""

    params: list[tuple[str, str]]

    def source_to_code(self, data: Any, path: Any, *, _optimize: int = -1):  # type: ignore[override]
        self.params = []
        try:
            return super().source_to_code(data, path)
        except SyntaxError:
            text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else str(data)
            text, self.params = rewrite(text)
            return compile(text, path, "exec", dont_inherit=True)

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
        if not getattr(self, "params", None):  # never cache a rewritten module's code
            super().set_data(path, data, _mode=_mode)

    def exec_module(self, module) -> None:
        code = self.get_code(module.__name__)
        kinds = {"": typing.TypeVar, "*": typing.TypeVarTuple, "**": typing.ParamSpec}
        params = getattr(self, "params", [])
        for kind, name in params:
            module.__dict__.setdefault(name, kinds[kind](name))
        if params:
            module.__dict__.setdefault(_GENERIC, typing.Generic)
        exec(code, module.__dict__)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, package: str):
        self.package = package

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname != self.package and not fullname.startswith(self.package + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _Loader(spec.loader.name, spec.loader.path)
        return spec


def backport_type_params(package: str) -> bool:
    """On Python < 3.12, load `package`'s modules through the rewriting loader (idempotent).
    Returns whether the hook is active."""
    if sys.version_info >= (3, 12):
        return False
    if not any(isinstance(f, _Finder) and f.package == package for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(package))
    return True
