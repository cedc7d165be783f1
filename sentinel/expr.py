"""The `expected` expression language: numpy arithmetic over a run's inputs and outputs,
checked when a scenario loads and evaluated with bounded sizes and time.

A scenario file is data, never code: an expression is parsed with `ast` and walked node by
node; nothing is handed to `eval`. What it may hold:

- numbers (int, float, bool, None), `[...]` / `(...)` literals, `...`;
- names of the run's inputs and outputs;
- `+ - * / // % **`, `& | ^ ~`, comparisons (chains included), `and or not` (elementwise),
  `a if cond else b` (cond a scalar), subscripts and slices;
- calls of the functions in FUNCTIONS, bare (`where(...)`) or as `np.NAME(...)`, the array
  methods in METHODS (`(x * m).sum(axis=-1, keepdims=True)`), each with at most the positional
  arguments FUNCTION_ARGS / METHOD_ARGS declare (never numpy's `out` or `copy`), keywords in
  KEYWORDS, and the constants `np.pi`, `np.e`, `np.inf`, `np.nan`.

Nothing else: no other attribute, no name starting with `_`, no builtins, strings, lambdas,
comprehensions, f-strings or `:=`. An integer exponent is at most 64 in magnitude, an integer
at most 4096 bits, every intermediate array at most MAX_ELEMENTS elements (checked before an
operation allocates it), and an evaluation stops after TIME_LIMIT_S seconds. The run's arrays
reach the evaluator as read-only views: an expression never changes what it is compared with.
"""

from __future__ import annotations

import ast
import math
import signal
import threading
import time
from functools import lru_cache
from typing import Any, Callable, Iterable

import numpy as np

from .errors import SentinelError

MAX_SOURCE = 4096  # characters
MAX_DEPTH = 64  # nesting of the syntax tree
MAX_ELEMENTS = 1_000_000  # per intermediate array
MAX_INT_EXPONENT = 64
MAX_INT_BITS = 4096
TIME_LIMIT_S = 5.0

# reductions and reshapes (a, axis): their result is no larger than their arguments together
_SHAPED = ("sum", "mean", "max", "min", "amax", "amin", "prod", "std", "var", "cumsum", "cumprod", "any", "all",
           "count_nonzero", "argmax", "argmin", "expand_dims", "squeeze", "transpose", "flip", "nansum", "nanmean",
           "concatenate", "stack", "diff")
# Every allowed call and the most positional arguments it takes: its value parameters only.
# numpy's next positional parameter is `out`, `copy`, `dtype` or `shape` (`exp(x, x)`,
# `clip(x, 0, 1, x)`, `nan_to_num(x, False)`, `x.sum(1, None, y)` write into an observed array
# or alias it; `zeros_like(x, None, None, True, (n, n))` sizes its result by a number): refused
# at load. Keywords are KEYWORDS only, and none of them writes.
FUNCTION_ARGS: dict[str, int] = {
    **dict.fromkeys(("abs", "absolute", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "square", "sign",
                     "tanh", "sin", "cos", "floor", "ceil", "isfinite", "isnan", "isinf", "logical_not",
                     "nan_to_num", "zeros_like", "ones_like"), 1),  # (x)
    **dict.fromkeys(("minimum", "maximum", "fmin", "fmax", "logical_and", "logical_or", "logical_xor", "power",
                     "float_power"), 2),  # (x1, x2)
    "round": 2, "full_like": 2,  # (a, decimals), (a, fill_value)
    **dict.fromkeys(_SHAPED, 2),  # (a, axis)
    "clip": 3, "where": 3, "diff": 3,  # (a, min, max), (condition, x, y), (a, n, axis)
}
METHOD_ARGS: dict[str, int] = {
    **dict.fromkeys(("sum", "mean", "max", "min", "prod", "std", "var", "cumsum", "cumprod", "any", "all", "argmax",
                     "argmin", "squeeze", "round"), 1),  # (axis), round(decimals)
    "clip": 2, "flatten": 0, "ravel": 0,  # (min, max)
    "reshape": 32, "transpose": 32,  # (*shape), (*axes): a view of the same values, never an output
}
# the others are elementwise: their result has the broadcast shape of their arguments
_ELEMENTWISE = frozenset(FUNCTION_ARGS) - frozenset(_SHAPED)
FUNCTIONS: dict[str, Callable[..., Any]] = {n: getattr(np, n) for n in FUNCTION_ARGS}
METHODS = frozenset(METHOD_ARGS)
KEYWORDS = frozenset({"axis", "keepdims", "ddof", "nan", "posinf", "neginf", "fill_value", "decimals"})
CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b, ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b,
    ast.BitXor: lambda a, b: a ^ b}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: lambda a: -a, ast.UAdd: lambda a: +a, ast.Invert: lambda a: ~a, ast.Not: np.logical_not}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: np.equal, ast.NotEq: np.not_equal, ast.Lt: np.less, ast.LtE: np.less_equal,
    ast.Gt: np.greater, ast.GtE: np.greater_equal}
# nodes the walk passes through; any other node is refused with a word for what it is
_PLAIN = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Subscript, ast.Slice,
          ast.Tuple, ast.List, ast.Load, ast.And, ast.Or, *_BINOPS, *_UNARY, *_COMPARE)
_WORDS = {ast.Lambda: "a lambda", ast.ListComp: "a comprehension", ast.SetComp: "a comprehension",
          ast.DictComp: "a comprehension", ast.GeneratorExp: "a generator expression", ast.JoinedStr: "an f-string",
          ast.FormattedValue: "an f-string", ast.NamedExpr: "an assignment (:=)", ast.Dict: "a dict literal",
          ast.Set: "a set literal", ast.Starred: "unpacking (*)", ast.Await: "await", ast.Yield: "yield",
          ast.YieldFrom: "yield", ast.MatMult: "the @ operator", ast.LShift: "a shift", ast.RShift: "a shift",
          ast.Is: "`is`", ast.IsNot: "`is not`", ast.In: "`in`", ast.NotIn: "`not in`"}


class ExprError(SentinelError, ValueError):
    """A refused or failed expression; `node` is the offending part, shown with its column."""

    def __init__(self, msg: str, source: str = "", node: ast.AST | None = None):
        where = ""
        if node is not None and hasattr(node, "col_offset"):
            seg = " ".join((ast.get_source_segment(source, node) or "").split())
            seg = seg if len(seg) <= 80 else seg[:77] + "..."
            line = f"line {node.lineno} " if node.lineno > 1 else ""
            where = f" at {line}column {node.col_offset + 1}" + (f": `{seg}`" if seg else "")
        super().__init__(msg + where)


class UnknownName(ExprError):
    """Names the run does not have (a typo, or an output the target did not produce)."""

    def __init__(self, names: list[str], what: str):
        self.names = names
        super().__init__(f"names {', '.join(map(repr, names))}: {what}")


class _Timeout(BaseException):
    """Raised by the deadline (a BaseException, so no `except Exception` on the way swallows it)."""


def _refuse(what: str, source: str, node: ast.AST) -> ExprError:
    return ExprError(f"{what} is not allowed in an expression", source, node)


@lru_cache(maxsize=256)
def _language(source: str) -> tuple[ast.Expression, frozenset[str]]:
    """Parse and check once per expression: (tree, the names it reads). Every name-free part
    is evaluated here, so `10**10**10` fails when the scenario loads, not in a run."""
    tree = _parse(source)
    read = frozenset(_validate(tree, source))
    ev = _Evaluator(source, {})
    stack: list[ast.AST] = [tree.body]
    with _deadline(TIME_LIMIT_S) as ev.deadline:
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Slice) or _reads_names(node):
                stack += _operands(node)
            elif not isinstance(node, ast.Constant):
                ev.eval(node)
    return tree, read


def _parse(source: str) -> ast.Expression:
    if len(source) > MAX_SOURCE:
        raise ExprError(f"an expression is at most {MAX_SOURCE} characters (this one has {len(source)})")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"not a valid expression: {e.msg}" + (f" at column {e.offset}" if e.offset else "")) from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise ExprError(f"not a valid expression: {type(e).__name__}") from None
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExprError(f"an expression nests at most {MAX_DEPTH} levels deep")
        stack += [(c, depth + 1) for c in ast.iter_child_nodes(node)]
    return tree


def _np_attr(node: ast.AST) -> str | None:
    """`np.NAME` -> NAME."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "np":
        return node.attr
    return None


def _validate(tree: ast.Expression, source: str) -> set[str]:
    """Refuse any node outside the language; return the names it reads."""
    read: set[str] = set()
    for node in ast.walk(tree):  # forbidden constructs and private names first: they name the attempt
        if type(node) in _WORDS:
            raise _refuse(_WORDS[type(node)], source, node)
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name.startswith("_"):
            raise _refuse(f"the name {name!r}", source, node)
        ops = [node.op] if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp)) else \
            node.ops if isinstance(node, ast.Compare) else []
        for op in ops:
            if not isinstance(op, _PLAIN):
                raise _refuse(_WORDS.get(type(op), type(op).__name__), source, node)
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Constant):
            if not (node.value is None or node.value is Ellipsis or isinstance(node.value, (int, float))):
                raise _refuse(f"a {type(node.value).__name__} constant", source, node)
            continue
        if isinstance(node, ast.Name):
            if node.id == "np":
                raise ExprError("`np` is only for np.FUNCTION(...) and np.pi / np.e / np.inf / np.nan", source, node)
            read.add(node.id)
            continue
        if isinstance(node, ast.Attribute):
            if _np_attr(node) in CONSTANTS:
                continue
            raise _refuse(f"the attribute {node.attr!r}", source, node)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                if func.id not in FUNCTIONS:
                    raise ExprError(f"calling {func.id!r} is not allowed (functions: {', '.join(sorted(FUNCTIONS))})",
                                    source, node)
                called, most = func.id, FUNCTION_ARGS[func.id]
            elif _np_attr(func) is not None:
                if func.attr not in FUNCTIONS:
                    raise ExprError(f"np.{func.attr} is not allowed (functions: {', '.join(sorted(FUNCTIONS))})",
                                    source, node)
                called, most = func.attr, FUNCTION_ARGS[func.attr]
            elif isinstance(func, ast.Attribute):
                if func.attr not in METHODS:
                    raise ExprError(f"the method {func.attr!r} is not allowed (methods: {', '.join(sorted(METHODS))})",
                                    source, node)
                called, most = f"the method {func.attr}", METHOD_ARGS[func.attr]
                stack.append(func.value)
            else:
                _validate(ast.Expression(func), source)  # a refused call inside names the problem better
                raise _refuse("calling the result of an expression", source, node)
            if len(node.args) > most:
                raise ExprError(f"{called} takes at most {most} positional argument{'s' * (most != 1)} here: numpy's "
                                "next ones (out, copy, dtype, shape) could write into an observed array or alias it "
                                f"(keywords: {', '.join(sorted(KEYWORDS))})", source, node)
            for kw in node.keywords:
                if kw.arg is None or kw.arg not in KEYWORDS:
                    raise ExprError(f"the keyword {kw.arg or '**'!r} is not allowed (keywords: "
                                    f"{', '.join(sorted(KEYWORDS))})", source, node)
                stack.append(kw.value)
            stack += node.args
            continue
        if not isinstance(node, _PLAIN):
            raise _refuse(_WORDS.get(type(node), type(node).__name__), source, node)
        stack += ast.iter_child_nodes(node)
    return read


def _operands(node: ast.AST) -> list[ast.expr]:
    """The sub-expressions a node evaluates (keyword values included, the called name not)."""
    if isinstance(node, ast.Call):
        func = node.func
        receiver = [func.value] if isinstance(func, ast.Attribute) and _np_attr(func) is None else []
        return receiver + list(node.args) + [kw.value for kw in node.keywords]
    return [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]


def _reads_names(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) or any(_reads_names(c) for c in _operands(node))


def check(source: str, names: Iterable[str], sample: dict[str, Any] | None = None) -> None:
    """Load-time check: raise ExprError for anything outside the language, a limit its
    constant parts break, or an unknown name; with `sample` (arrays of the declared shapes),
    evaluate the whole to refuse oversized results."""
    source = source.strip()
    _, read = _language(source)
    if unknown := read - set(names):
        raise UnknownName(sorted(unknown), "not an input or output")
    if sample is not None:
        key = (source, tuple((n, np.shape(v), np.asarray(v).dtype.str) for n, v in sorted(sample.items())))
        if key in _SAMPLED:
            return
        try:
            evaluate(source, sample)
        except _LimitError:
            raise
        except ExprError:
            return  # value-dependent (a shape the target may not produce): decided when it runs
        if len(_SAMPLED) < _SAMPLED_MAX:
            _SAMPLED.add(key)


# (expression, the sample's names, shapes and dtypes) whose sample evaluation passed: a hunt checks
# each drawn example's scenario, and the limits depend on the shapes (every allowed call sizes
# its result by its arguments' shapes; a boolean selection only shrinks one), not on the values;
# an evaluation past a limit is still refused when it runs
_SAMPLED: set[tuple[Any, ...]] = set()
_SAMPLED_MAX = 4096


def evaluate(source: str, namespace: dict[str, Any], time_limit: float = TIME_LIMIT_S) -> np.ndarray:
    """Evaluate over `namespace` (input and output arrays) -> float64 array. Raises UnknownName
    for a name the namespace lacks, ExprError for a refused node, a limit or a numpy error."""
    source = source.strip()
    tree, read = _language(source)
    if unknown := read - namespace.keys():
        raise UnknownName(sorted(unknown), "not produced by this run")
    ev = _Evaluator(source, {name: _read_only(value) for name, value in namespace.items()})
    # numpy's warnings off once for the whole walk: a per-node errstate cost more than most nodes
    with _deadline(time_limit) as ev.deadline, np.errstate(all="ignore"):
        value = ev.eval(tree.body)
        ev.size(value, tree.body)
        try:
            return np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as e:
            raise ExprError(f"the result is not a numeric array: {e}", source) from None


def _read_only(value: Any) -> np.ndarray:
    """A read-only view: whatever a refusal missed, the evaluator cannot write into an
    observation (numpy raises "output array is read-only"); the caller's array is untouched."""
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


class _LimitError(ExprError):
    """A size, exponent or time limit: refused at load time even when found by a trial run."""


class _deadline:
    """`with _deadline(s) as d`: d() raises past the limit; where this thread may take
    signals and SIGALRM is free, a timer also interrupts a long step."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = False

    def __enter__(self) -> Callable[[], None]:
        end = time.monotonic() + self.seconds
        if (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
                and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
                and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)):
            signal.signal(signal.SIGALRM, self._ring)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True

        def check() -> None:
            if time.monotonic() > end:
                raise _Timeout
        return check

    def _ring(self, signum, frame) -> None:  # noqa: ARG002
        raise _Timeout

    def __exit__(self, et, ev, tb) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
        if et is _Timeout:
            raise _LimitError(f"the expression ran past its {self.seconds:g} s limit") from None


def _count(x: Any) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_count(v) for v in x)
    return int(np.size(x)) if isinstance(x, np.ndarray) else 1


def _shape(x: Any) -> tuple[int, ...]:
    return x.shape if isinstance(x, np.ndarray) else np.shape(x) if not isinstance(x, (list, tuple)) else (len(x),)


class _Evaluator:
    def __init__(self, source: str, ns: dict[str, Any]):
        self.source, self.ns = source, ns
        self.deadline: Callable[[], None] = lambda: None

    def limit(self, msg: str, node: ast.AST) -> _LimitError:
        return _LimitError(msg, self.source, node)

    def size(self, value: Any, node: ast.AST) -> Any:
        """Refuse an oversized result (arrays, nested sequences, huge integers)."""
        if isinstance(value, (bool, np.bool_)):
            return value
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise self.limit(f"an integer of more than {MAX_INT_BITS} bits", node)
        if isinstance(value, np.ndarray) and value.size > MAX_ELEMENTS:
            raise self.limit(f"a result of {value.size} elements (the limit is {MAX_ELEMENTS})", node)
        if isinstance(value, (list, tuple)):
            for v in value:
                self.size(v, node)
            if (n := _count(value)) > MAX_ELEMENTS:  # before a sequence of arrays becomes one array
                raise self.limit(f"a sequence of {n} elements (the limit is {MAX_ELEMENTS})", node)
        return value

    def array(self, value: Any, node: ast.AST) -> Any:
        """Sequences become arrays before an operator sees them (so `[0] * 10**9` is arithmetic,
        not list repetition)."""
        if isinstance(value, (list, tuple)):
            try:
                value = np.asarray(value)
            except (TypeError, ValueError, OverflowError) as e:
                raise ExprError(f"not an array: {e}", self.source, node) from None
            if value.dtype == object:
                raise ExprError("not a numeric array (integers beyond int64?)", self.source, node)
        return value

    def broadcast(self, node: ast.AST, *operands: Any) -> None:
        try:
            shape = np.broadcast_shapes(*(_shape(o) for o in operands))
        except ValueError as e:
            raise ExprError(f"shapes do not broadcast: {e}", self.source, node) from None
        if math.prod(shape) > MAX_ELEMENTS:
            raise self.limit(f"a result of shape {list(shape)} (the limit is {MAX_ELEMENTS} elements)", node)

    def eval(self, node: ast.AST) -> Any:
        self.deadline()
        try:
            value = _NODES[type(node)](self, node)
        except ExprError:
            raise
        except Exception as e:  # noqa: BLE001 - numpy and arithmetic errors name the node that raised them
            raise ExprError(f"{type(e).__name__}: {e}", self.source, node) from None
        return self.size(value, node)

    # --- nodes ----------------------------------------------------------------------------
    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        return self.ns[node.id]  # validated: a name of the namespace

    def _Attribute(self, node: ast.Attribute) -> Any:
        return CONSTANTS[node.attr]  # validated: np.<constant>

    def _Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.eval(e) for e in node.elts)

    def _List(self, node: ast.List) -> Any:
        return [self.eval(e) for e in node.elts]

    def _BinOp(self, node: ast.BinOp) -> Any:
        a = self.array(self.eval(node.left), node.left)
        b = self.array(self.eval(node.right), node.right)
        self.broadcast(node, a, b)
        if isinstance(node.op, ast.Pow):
            self._check_pow(a, b, node)
        elif isinstance(node.op, ast.Mult) and isinstance(a, int) and isinstance(b, int) \
                and a.bit_length() + b.bit_length() > MAX_INT_BITS:
            raise self.limit(f"an integer of more than {MAX_INT_BITS} bits", node)
        return _BINOPS[type(node.op)](a, b)

    def _check_pow(self, base: Any, exp: Any, node: ast.BinOp) -> None:
        if isinstance(exp, (int, np.integer)):
            big = abs(int(exp)) > MAX_INT_EXPONENT
        else:
            e = np.asarray(exp)
            big = e.dtype.kind in "iu" and e.size > 0 and float(np.abs(e.astype(np.float64)).max()) > MAX_INT_EXPONENT
        if big:
            raise self.limit(f"an integer exponent beyond ±{MAX_INT_EXPONENT}", node)
        if isinstance(base, int) and isinstance(exp, int) and base.bit_length() * abs(exp) > MAX_INT_BITS:
            raise self.limit(f"an integer of more than {MAX_INT_BITS} bits", node)

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        a = self.array(self.eval(node.operand), node.operand)
        return _UNARY[type(node.op)](a)

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.array(self.eval(v), v) for v in node.values]
        self.broadcast(node, *values)
        fn = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        out = values[0]
        for v in values[1:]:
            out = fn(out, v)
        return out

    def _Compare(self, node: ast.Compare) -> Any:
        left = self.array(self.eval(node.left), node.left)
        out = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.array(self.eval(right_node), right_node)
            self.broadcast(node, left, right, *(() if out is None else (out,)))
            r = _COMPARE[type(op)](left, right)
            out = r if out is None else np.logical_and(out, r)
            left = right
        return out

    def _IfExp(self, node: ast.IfExp) -> Any:
        test = np.asarray(self.eval(node.test))
        if test.size != 1:
            raise ExprError("`a if cond else b` needs a single-value condition; use where(cond, a, b)",
                            self.source, node.test)
        return self.eval(node.body if bool(test.reshape(())) else node.orelse)

    def _Slice(self, node: ast.Slice) -> slice:
        parts = []
        for p in (node.lower, node.upper, node.step):
            v = None if p is None else self.eval(p)
            if v is not None and not isinstance(v, (int, np.integer)):
                raise ExprError("slice bounds are integers", self.source, p)
            parts.append(v)
        return slice(*parts)

    def _Subscript(self, node: ast.Subscript) -> Any:
        value = self.array(self.eval(node.value), node.value)
        index = self.eval(node.slice)
        parts = index if isinstance(index, tuple) else (index,)
        parts = tuple(self.array(p, node.slice) for p in parts)
        self._check_index(np.shape(value), parts, node)
        return value[parts if isinstance(index, tuple) else parts[0]]

    def _check_index(self, shape: tuple[int, ...], parts: tuple, node: ast.AST) -> None:
        """Bound the result of (advanced) indexing before numpy allocates it: the broadcast
        index arrays times the dimensions that basic indices keep."""
        def is_array(p: Any) -> bool:
            return not (p is None or p is Ellipsis or isinstance(p, (bool, int, np.integer, slice)))
        arrays = [np.asarray(p) for p in parts if is_array(p)]
        if not arrays:
            return  # basic indexing: a view no larger than `value`
        try:
            n = math.prod(np.broadcast_shapes(*(((int(a.sum()),) if a.dtype == bool else a.shape) for a in arrays)))
        except ValueError as e:
            raise ExprError(f"index shapes do not broadcast: {e}", self.source, node) from None
        width = [np.ndim(p) if is_array(p) and np.asarray(p).dtype == bool else 1 for p in parts]
        explicit = sum(w for p, w in zip(parts, width) if p is not None and p is not Ellipsis)
        pos, taken = 0, 1  # taken: the product of the dimensions the index arrays replace
        for p, w in zip(parts, width):
            if p is Ellipsis:
                pos += max(len(shape) - explicit, 0)
            elif p is not None:
                if is_array(p):
                    taken *= math.prod(shape[pos:pos + w])
                pos += w
        kept = math.prod(shape) // taken if taken else 0
        if n * kept > MAX_ELEMENTS:
            raise self.limit(f"an index selecting {n * kept} elements (the limit is {MAX_ELEMENTS})", node)

    def _Call(self, node: ast.Call) -> Any:
        args = [self.eval(a) for a in node.args]
        kwargs = {kw.arg: self.eval(kw.value) for kw in node.keywords}
        func = node.func
        if isinstance(func, ast.Attribute) and _np_attr(func) is None:  # a method of an array
            receiver = np.asarray(self.array(self.eval(func.value), func.value))
            if func.attr in _ELEMENTWISE:  # x.clip(lo, hi) has the broadcast shape of x, lo and hi
                self.broadcast(node, receiver, *(self.array(a, node) for a in args))
            return getattr(receiver, func.attr)(*args, **kwargs)
        name = func.id if isinstance(func, ast.Name) else func.attr
        if name in _ELEMENTWISE:
            self.broadcast(node, *(self.array(a, node) for a in args))
        elif (n := sum(_count(a) for a in args)) > MAX_ELEMENTS:
            raise self.limit(f"{name} over {n} elements (the limit is {MAX_ELEMENTS})", node)
        return FUNCTIONS[name](*args, **kwargs)


# each node type's method, looked up once (a per-node getattr by name cost as much as a small node)
_NODES: dict[type, Callable[[_Evaluator, Any], Any]] = {
    getattr(ast, name[1:]): fn for name, fn in vars(_Evaluator).items()
    if name[1:2].isupper() and name.startswith("_") and isinstance(getattr(ast, name[1:], None), type)}
