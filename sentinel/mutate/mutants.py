"""Mutants of one function: every place each operator applies, one change each.

Pure `ast` (no torch, no target): the parent generates mutants from the source the worker
read (`sentinel.mutate.apply.sources`), and the worker's forked child compiles a mutant's
source in its place (`apply.apply`).

A mutant is named by its function, operator and a stable key: a hash of the node changed,
its replacement and which occurrence of that pair in the function it is, so it keeps its
key when lines move above it (what `equivalent.yaml` and the cache are keyed by). Its
`position` (line:column in the file) is for people.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import textwrap
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from .operators import DELETE, OPERATORS, Context
from .reach import MARKER

_SKIP_FIELDS = {"decorator_list", "returns", "annotation", "type_comment", "ctx", "op", "ops", "type_params"}
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)  # their `args` (the signature) are skipped


@dataclass(frozen=True)
class Function:
    """A function a boundary maps, as the worker read it."""

    name: str  # "module:qualname"
    source: str  # its source, dedented (decorators included)
    line: int  # the file line of the source's first line
    file: str | None = None
    boundaries: tuple[str, ...] = ()

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


@dataclass
class Mutant:
    function: str
    operator: str
    key: str  # stable across unrelated edits (see the module docstring)
    position: str  # "FILE:LINE:COL" of the changed node
    diff: str
    source: str  # the whole mutated function, unparsed, with the reach marker (`_mark`) before its change
    line: int  # the file line of the function's first line (the child compiles it there)
    boundaries: list[str] = field(default_factory=list)
    original: str = ""  # the changed node's text
    replacement: str = ""
    function_hash: str = ""
    compile_error: str | None = None
    swap: str | None = None  # "module:qualname" a swap mutant (`swapped`) calls in the function's place

    @property
    def id(self) -> str:
        return f"{self.function}#{self.operator}@{self.key}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def job(self) -> dict[str, Any]:
        """What the worker's child needs to put it in place."""
        return {"function": self.function, "source": self.source, "line": self.line, "swap": self.swap}


def parse(source: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    tree = ast.parse(textwrap.dedent(source))
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ValueError("the source is not one function definition")
    return fdef


def walk(fdef: ast.AST) -> Iterator[tuple[ast.AST, list[tuple[ast.AST, str]]]]:
    """Every node of the body (docstring, signature, decorators and annotations excluded) with
    its ancestors as (node, field), in a fixed order: the same on a copy of the tree."""
    def visit(node: ast.AST, anc: list[tuple[ast.AST, str]]):
        yield node, anc
        for name, value in ast.iter_fields(node):
            if name in _SKIP_FIELDS or (name == "args" and isinstance(node, _DEFS)):
                continue
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, ast.AST):
                    yield from visit(v, anc + [(node, name)])
    body = fdef.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    for stmt in body:
        yield from visit(stmt, [(fdef, "body")])


def _context(fdef: ast.AST) -> Context:
    a = fdef.args
    params = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}
    stores = [(n.lineno, n.col_offset, n.id) for n in ast.walk(fdef) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)]
    return Context(frozenset(params), stores=stores)


def _text(r: Any) -> str:
    if r is DELETE:
        return "<deleted>"
    if isinstance(r, list):
        return "; ".join(ast.unparse(s) for s in r) or "pass"
    return ast.unparse(r)


def _splice(node: ast.AST, anc: list[tuple[ast.AST, str]], repl: Any) -> None:
    parent, name = anc[-1]
    value = getattr(parent, name)
    if not isinstance(value, list):
        setattr(parent, name, ast.copy_location(repl, node))
        return
    i = next(k for k, v in enumerate(value) if v is node)
    if repl is DELETE:
        value[i:i + 1] = []
    elif isinstance(repl, list):
        value[i:i + 1] = repl
    else:
        value[i] = ast.copy_location(repl, node)
    if not value and name == "body":  # a block may not be empty
        value.append(ast.Pass())


def sites(fdef: ast.AST, operators: list[str] | None = None) -> list[tuple[str, int, int, ast.AST, Any]]:
    """(operator, node index, alternative, node, replacement) for every place an operator applies."""
    ctx = _context(fdef)
    out = []
    for k, (node, anc) in enumerate(walk(fdef)):
        ctx.ancestors = anc
        for op in operators or list(OPERATORS):
            for j, repl in enumerate(OPERATORS[op](node, ctx)):
                out.append((op, k, j, node, repl))
    return out


def _marker() -> ast.stmt:
    return ast.Expr(ast.Call(ast.Name(MARKER, ast.Load()), [], []))


def _mark(node: ast.AST, anc: list[tuple[ast.AST, str]], splice: Any) -> None:
    """splice() (the change), and the reach marker (`reach`) put before the statement that holds it:
    where a deleted or replaced statement stood, else before the innermost statement around the
    changed node. Exact for a statement and for an `if` / `elif` / `while` / `for` header (the
    marker sits in the branch that evaluates it, and a header is evaluated whenever its statement
    is reached); over the mark (reached, maybe not evaluated) for a change inside a lambda, a
    comprehension, a short-circuit operand or a conditional expression, and an `except` clause's
    type: those share their enclosing statement's marker; over it too where an earlier part of the
    statement raises before the changed part is evaluated (`d[0] + (x - 1)` with `d` empty). Never
    under it."""
    a = len(anc) if isinstance(node, ast.stmt) else max(i for i, (n, _) in enumerate(anc) if isinstance(n, ast.stmt))
    stmt = node if a == len(anc) else anc[a][0]
    parent, name = anc[a - 1]
    i = next(n for n, v in enumerate(getattr(parent, name)) if v is stmt)
    splice()
    getattr(parent, name).insert(i, _marker())


def mutated(fdef: ast.AST, op: str, k: int, j: int, mark: bool = False) -> ast.AST:
    """A copy of `fdef` with alternative `j` of operator `op` at node `k` applied (and with
    `mark`, the reach marker before the statement that holds it: `_mark`)."""
    new = copy.deepcopy(fdef)
    ctx = _context(new)
    for i, (node, anc) in enumerate(walk(new)):
        if i == k:
            ctx.ancestors = anc
            repl = OPERATORS[op](node, ctx)[j]
            if mark:
                _mark(node, anc, lambda: _splice(node, anc, repl))
            else:
                _splice(node, anc, repl)
            return ast.fix_missing_locations(new)
    raise IndexError(f"no node {k} in the function")


def mutants(fn: Function, operators: list[str] | None = None) -> list[Mutant]:
    """Every mutant of `fn` (no-ops and duplicates of an earlier one dropped)."""
    fdef = parse(fn.source)
    before = ast.unparse(fdef)
    seen, occurrences, out = {before}, Counter(), []
    where = fn.file or fn.name.split(":")[0]
    for op, k, j, node, repl in sites(fdef, operators):
        new = mutated(fdef, op, k, j)
        after = ast.unparse(new)
        if after in seen:
            continue
        seen.add(after)
        original, replacement = ast.unparse(node), _text(repl)
        occurrences[(op, original, replacement)] += 1
        n = occurrences[(op, original, replacement)]
        key = hashlib.sha1(f"{op}|{original}|{replacement}|{n}".encode()).hexdigest()[:10]
        diff = "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), f"{fn.name}",
                                              f"{fn.name} ({op})", n=1, lineterm=""))
        line = fn.line + getattr(node, "lineno", 1) - 1
        probe = ast.unparse(mutated(fdef, op, k, j, mark=True))
        m = Mutant(fn.name, op, key, f"{where}:{line}:{getattr(node, 'col_offset', 0) + 1}", diff, probe, fn.line,
                   list(fn.boundaries), original, replacement, fn.source_hash)
        try:
            compile(probe, where, "exec")
        except SyntaxError as e:
            m.compile_error = f"SyntaxError: {e.msg}"
        out.append(m)
    return out


SWAP = "plant"  # the operator name of a swap mutant


def swapped(fn: Function, label: str, replacement: str, replacement_source: str) -> Mutant:
    """A mutant that replaces `fn` whole by another function of the same signature
    (`replacement`, "module:qualname"; a planted bug): its body becomes a call of the
    replacement (`apply` puts it in place), its diff is the replacement's source against
    `fn`'s. Keyed by `label`; its hash covers both sources, so an edit to either re-judges it."""
    fdef = parse(fn.source)
    rdef = parse(replacement_source)
    rdef.name, rdef.decorator_list = fdef.name, []
    before, after = ast.unparse(fdef), ast.unparse(rdef)
    diff = "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), fn.name, f"{fn.name} ({replacement})",
                                          n=1, lineterm=""))
    call = (f"def {fdef.name}(*args, **kwargs):\n    {MARKER}()\n    from sentinel.mutate.apply import swapped\n"
            f"    return swapped({fn.name!r})(*args, **kwargs)\n")
    both = hashlib.sha256((fn.source + "\0" + replacement_source).encode()).hexdigest()[:16]
    where = fn.file or fn.name.split(":")[0]
    return Mutant(fn.name, SWAP, label, f"{where}:{fn.line}:1", diff, call, fn.line, list(fn.boundaries),
                  fdef.name, replacement, both, swap=replacement)
