"""Mutation operators: each finds the places in a function body where it applies and gives,
for each, the changed node (one small change, the kind of slip a loss-path bug is made of).

An operator is a function `(node, ctx) -> list of replacements`: a replacement is a new AST
node (or a list of statements, or `DELETE` for a statement removed). It sees every node of
the body in a fixed order (`sentinel.mutate.mutants.walk`), never the signature, decorators
or annotations (a default value lives in `__defaults__`, not in the code a mutant swaps), and
never the docstring. Each operator's docstring names it with an example, as the README does.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Callable

DELETE = object()  # a statement removed

@dataclass
class Context:
    """What an operator may ask about a node's place: its ancestors (node, field) from the
    function down, the function's parameters, and the names bound before a statement."""

    params: frozenset[str]
    ancestors: list[tuple[ast.AST, str]] = field(default_factory=list)
    stores: list[tuple[int, int, str]] = field(default_factory=list)  # (line, col, name) of each Name store

    def bound_before(self, name: str, node: ast.AST) -> bool:
        if name in self.params:
            return True
        at = (node.lineno, node.col_offset)
        return any((line, col) < at and n == name for line, col, n in self.stores)


Operator = Callable[[ast.AST, Context], list]
OPERATORS: dict[str, Operator] = {}


def operator(name: str) -> Callable[[Operator], Operator]:
    def register(fn: Operator) -> Operator:
        OPERATORS[name] = fn
        return fn
    return register


def _c(node: ast.AST) -> ast.AST:
    return copy.deepcopy(node)


def _attr(node: ast.AST) -> str | None:
    """The called name: `f` of f(...), `m` of x.m(...) or torch.m(...)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))}


def _renamed(call: ast.Call, name: str) -> ast.Call:
    new = _c(call)
    if isinstance(new.func, ast.Name):
        new.func.id = name
    else:
        new.func.attr = name
    return new


@operator("drop-mask")
def drop_mask(node, ctx):
    """A `* mask` factor dropped: `(loss * loss_mask).sum()` -> `loss.sum()`."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return []
    left, right = (any("mask" in n.lower() for n in _names(x)) for x in (node.left, node.right))
    if left == right:
        return []
    return [_c(node.left if right else node.right)]


_SUM_MEAN = {"sum": "mean", "mean": "sum", "nansum": "nanmean", "nanmean": "nansum"}


@operator("sum-mean")
def sum_mean(node, ctx):
    """`.sum` <-> `.mean`: `x.sum(-1)` -> `x.mean(-1)`, `torch.mean(x)` -> `torch.sum(x)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SUM_MEAN:
        return [_renamed(node, _SUM_MEAN[node.func.attr])]
    return []


_REDUCERS = {"sum", "mean", "amax", "amin", "logsumexp", "std", "var", "prod", "nansum", "nanmean", "any", "all"}


def _is_torch_call(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and \
        call.func.value.id in ("torch", "th", "F")


@operator("reduce-dim")
def reduce_dim(node, ctx):
    """A reduction over all dims <-> over the last: `x.sum()` -> `x.sum(dim=-1)`,
    `m.sum(-1, keepdim=True)` -> `m.sum()`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _REDUCERS):
        return []
    first = 1 if _is_torch_call(node) else 0  # torch.sum(x, dim) vs x.sum(dim)
    dims = [k for k in node.keywords if k.arg in ("dim", "axis")]
    if len(node.args) > first or dims:
        new = _c(node)
        new.args = new.args[:first]
        new.keywords = [k for k in new.keywords if k.arg not in ("dim", "axis", "keepdim")]
        return [new]
    if first and not node.args:
        return []
    new = _c(node)
    new.keywords.append(ast.keyword("dim", ast.UnaryOp(ast.USub(), ast.Constant(1))))
    return [new]


@operator("clamp-denominator")
def clamp_denominator(node, ctx):
    """A `clamp(min=...)` on a denominator removed: `s / n.clamp_min(1)` -> `s / n`,
    `x / torch.clamp(n, min=eps)` -> `x / n`."""
    if not isinstance(node, ast.Call) or _attr(node.func) not in ("clamp", "clamp_min", "clip"):
        return []
    if _attr(node.func) != "clamp_min" and not any(k.arg == "min" for k in node.keywords) and \
            len(node.args) < (2 if _is_torch_call(node) else 1):
        return []
    if not any(isinstance(a, ast.BinOp) and isinstance(a.op, (ast.Div, ast.FloorDiv)) and f == "right"
               for a, f in ctx.ancestors):
        return []
    if _is_torch_call(node):
        return [_c(node.args[0])] if node.args else []
    return [_c(node.func.value)] if isinstance(node.func, ast.Attribute) else []


_NOT_TENSOR = {"int", "float", "bool", "len", "range", "list", "dict", "tuple", "str", "set", "isinstance", "getattr",
               "hasattr", "zip", "enumerate", "sorted", "min", "max", "sum", "any", "all", "abs", "round", "print",
               "item", "tolist", "size", "dim", "numel", "get", "keys", "values", "items", "format", "join", "pop"}


def _tensor_like(value: ast.AST) -> bool:
    """An expression that may well be a tensor: arithmetic, or a call not known to give a
    Python value (a static guess; a wrong one makes an `error` mutant, counted apart)."""
    if isinstance(value, ast.BinOp):
        return True
    return isinstance(value, ast.Call) and _attr(value.func) not in _NOT_TENSOR


@operator("detach")
def detach(node, ctx):
    """`.detach()` removed, or added to an assigned or returned tensor: `w = r.clamp(lo, hi).detach()`
    -> `w = r.clamp(lo, hi)`; `loss = -adv * ratio` -> `loss = (-adv * ratio).detach()`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" \
            and not node.args:
        return [_c(node.func.value)]
    if isinstance(node, (ast.Assign, ast.Return)) and node.value is not None and _tensor_like(node.value) \
            and _attr(getattr(node.value, "func", None)) != "detach":
        new = _c(node)
        new.value = ast.Call(ast.Attribute(new.value, "detach", ast.Load()), [], [])
        return [new]
    return []


@operator("no-grad")
def no_grad(node, ctx):
    """`with torch.no_grad():` removed, its body kept: `with torch.no_grad(): logits.div_(t)` ->
    `logits.div_(t)` (the block now builds a graph)."""
    if isinstance(node, ast.With) and any(
            _attr(i.context_expr.func if isinstance(i.context_expr, ast.Call) else i.context_expr)
            in ("no_grad", "inference_mode") for i in node.items):
        return [[_c(s) for s in node.body]]
    return []


@operator("sign")
def sign(node, ctx):
    """The sign of a term flipped: `a - b` -> `a + b`, `a + b` -> `a - b`, `-x` -> `x`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        new = _c(node)
        new.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        return [new]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [_c(node.operand)]
    return []


_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


@operator("compare")
def compare(node, ctx):
    """A boundary moved: `<` <-> `<=`, `>` <-> `>=` (`ratio > 1 + eps` -> `ratio >= 1 + eps`)."""
    if not isinstance(node, ast.Compare):
        return []
    out = []
    for i, op in enumerate(node.ops):
        if type(op) in _CMP:
            new = _c(node)
            new.ops[i] = _CMP[type(op)]()
            out.append(new)
    return out


_MINMAX = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum", "amin": "amax", "amax": "amin",
           "argmin": "argmax", "argmax": "argmin", "fmin": "fmax", "fmax": "fmin"}


@operator("min-max")
def min_max(node, ctx):
    """`min` <-> `max`: `torch.maximum(unclipped, clipped)` -> `torch.minimum(...)`, `x.amax(-1)`
    -> `x.amin(-1)`, `max(a, b)` -> `min(a, b)`."""
    if isinstance(node, ast.Call) and _attr(node.func) in _MINMAX:
        return [_renamed(node, _MINMAX[_attr(node.func)])]
    return []


def _kind(node: ast.AST) -> str | None:
    if isinstance(node, ast.Starred):
        return None
    if isinstance(node, ast.Constant):
        return f"constant:{type(node.value).__name__}"
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return f"constant:{type(node.operand.value).__name__}"
    return "expression"


@operator("swap-args")
def swap_args(node, ctx):
    """Two neighbouring positional arguments of the same kind swapped (both expressions, or
    both constants of one type): `kl_estimator(log_probs, ref_log_probs, m)` ->
    `kl_estimator(ref_log_probs, log_probs, m)`; `x.clamp(lo, hi)` -> `x.clamp(hi, lo)`."""
    if not isinstance(node, ast.Call) or _attr(node.func) in ("isinstance", "getattr", "hasattr", "setattr", "super"):
        return []
    out = []
    for i in range(len(node.args) - 1):
        a, b = node.args[i], node.args[i + 1]
        if _kind(a) is None or _kind(a) != _kind(b) or ast.dump(a) == ast.dump(b):
            continue
        new = _c(node)
        new.args[i], new.args[i + 1] = new.args[i + 1], new.args[i]
        out.append(new)
    return out


_INPLACE = {"add_", "sub_", "mul_", "div_", "neg_", "exp_", "log_", "clamp_", "clamp_min_", "clamp_max_",
            "masked_fill_", "pow_", "sqrt_", "abs_", "sigmoid_", "tanh_", "nan_to_num_", "squeeze_", "unsqueeze_"}
_METHOD = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_"}


@operator("inplace")
def inplace(node, ctx):
    """An in-place op <-> its out-of-place form: `x.mul_(c)` -> `x.mul(c)` (the change is lost),
    `k *= c` -> `k = k * c`, `x = x * m` -> `x *= m`, and an input updated in place:
    `log_probs - ref` -> `log_probs.sub_(ref)` (the caller's tensor changes)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _INPLACE:
        return [_renamed(node, node.func.attr[:-1])]
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and type(node.op) in _METHOD:
        load = ast.Name(node.target.id, ast.Load())
        return [ast.Assign([_c(node.target)], ast.BinOp(load, _c(node.op), _c(node.value)), lineno=node.lineno)]
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and isinstance(node.value, ast.BinOp) and type(node.value.op) in _METHOD \
            and isinstance(node.value.left, ast.Name) and node.value.left.id == node.targets[0].id:
        return [ast.AugAssign(_c(node.targets[0]), _c(node.value.op), _c(node.value.right))]
    if isinstance(node, ast.BinOp) and type(node.op) in _METHOD:
        out = []
        for mine, other, ok in ((node.left, node.right, True),
                                (node.right, node.left, isinstance(node.op, (ast.Add, ast.Mult)))):
            if ok and isinstance(mine, ast.Name) and mine.id in ctx.params:
                out.append(ast.Call(ast.Attribute(ast.Name(mine.id, ast.Load()), _METHOD[type(node.op)], ast.Load()),
                                    [_c(other)], []))
        return out
    return []


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _const(v: int) -> ast.AST:
    return ast.Constant(v) if v >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-v))


@operator("slice")
def off_by_one(node, ctx):
    """Off by one in a slice or a constant index: `v[:, 1:]` -> `v[:, 2:]` or `v[:, 0:]`,
    `x[:, :-1]` -> `x[:, :-2]`, `x[:]` -> `x[1:]`, `x[..., -1]` -> `x[..., -2]`."""
    out = []
    if isinstance(node, ast.Slice) and node.step is None:
        for bound in ("lower", "upper"):
            v = _int(getattr(node, bound))
            if getattr(node, bound) is None:
                options = [1] if bound == "lower" else [-1]
            elif v is None:
                continue
            else:
                options = [v + 1, v - 1]
            for o in options:
                new = _c(node)
                setattr(new, bound, _const(o))
                out.append(new)
        return out
    if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Store):
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for i, e in enumerate(index):
            v = _int(e)
            if v is None:
                continue
            for o in (v + 1, v - 1):
                new = _c(node)
                if isinstance(new.slice, ast.Tuple):
                    new.slice.elts[i] = _const(o)
                else:
                    new.slice = _const(o)
                out.append(new)
    return out


@operator("constant")
def constant(node, ctx):
    """A float constant changed: an eps (< 1e-3) -> 0.0, 0.0 -> 1.0, any other c -> 2c
    (`1.0 - eps_clip` -> `2.0 - eps_clip`, `0.5 * r ** 2` -> `1.0 * r ** 2`)."""
    if not (isinstance(node, ast.Constant) and type(node.value) is float):
        return []
    v = node.value
    return [ast.Constant(0.0 if 0 < abs(v) < 1e-3 else 1.0 if v == 0 else v * 2)]


@operator("masked-fill")
def masked_fill(node, ctx):
    """The value a `masked_fill` writes changed: `x.masked_fill(~m, 0.0)` -> `x.masked_fill(~m, 1.0)`,
    `s.masked_fill(m, float("-inf"))` -> `s.masked_fill(m, 0.0)`."""
    if not (isinstance(node, ast.Call) and _attr(node.func) in ("masked_fill", "masked_fill_")):
        return []
    new = _c(node)
    pos = 2 if _is_torch_call(node) else 1
    if len(new.args) > pos:
        old, put = new.args[pos], lambda v: new.args.__setitem__(pos, v)
    else:
        kw = next((k for k in new.keywords if k.arg == "value"), None)
        if kw is None:
            return []
        old, put = kw.value, lambda v: setattr(kw, "value", v)
    put(ast.Constant(1.0 if isinstance(old, ast.Constant) and old.value == 0 else 0.0))
    return [new]


@operator("and-or")
def and_or(node, ctx):
    """`and` <-> `or` in a condition, and `&` <-> `|` on masks: `(adv < 0) & (kl > d)` ->
    `(adv < 0) | (kl > d)`."""
    if isinstance(node, ast.BoolOp):
        new = _c(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return [new]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        new = _c(node)
        new.op = ast.BitOr() if isinstance(node.op, ast.BitAnd) else ast.BitAnd()
        return [new]
    return []


@operator("delete")
def delete(node, ctx):
    """A statement that assigns a tensor deleted: a re-assignment (`x = keep(x, m)` -> nothing),
    an augmented one (`k += r`) or a write into a tensor (`x[~m] = 0`). A first assignment is
    left alone: deleting it fails with NameError on every input (an `error`, not a test)."""
    if isinstance(node, ast.AugAssign):
        return [DELETE]
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        t = node.targets[0]
        if isinstance(t, ast.Subscript) or (isinstance(t, ast.Name) and ctx.bound_before(t.id, node)):
            return [DELETE]
    return []
