"""`-k EXPR`: choose scenarios (or hunt properties) by name, as pytest's -k chooses tests.

EXPR is words joined by `and`, `or`, `not` and parentheses (`not` binds tightest, then
`and`, then `or`). A word matches an item when it is a case-insensitive substring of one of
the item's names: a scenario's id, boundary, tags and file name; a hunt property's name,
boundary and family. `-k "kl and not k3"`, `-k "opsm or seed"`.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from .errors import UsageError

_TOKEN = re.compile(r"\s*(?:(?P<open>\()|(?P<close>\))|(?P<word>[^\s()]+))")
Match = Callable[[list[str]], bool]


class _Parser:
    def __init__(self, expr: str):
        self.expr, self.tokens = expr, []
        pos = 0
        while pos < len(expr):
            m = _TOKEN.match(expr, pos)
            if m is None or m.end() == pos:  # trailing blanks
                break
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind), m.start(kind) + 1))
            pos = m.end()
        self.i = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _fail(self, expected: str) -> UsageError:
        tok = self._peek()
        where = f"at column {tok[2]} ({tok[1]!r})" if tok else "at the end"
        return UsageError(f"-k {self.expr!r}: expected {expected} {where}")

    def _is(self, word: str) -> bool:
        tok = self._peek()
        return tok is not None and tok[0] == "word" and tok[1] == word

    def parse(self) -> Match:
        match = self._or()
        if self._peek() is not None:
            raise self._fail("and, or, or the end")
        return match

    def _chain(self, word: str, operand: Callable[[], Match], combine: Callable) -> Match:
        """operand (word operand)*: `or` over `and` terms, `and` over `not` terms."""
        parts = [operand()]
        while self._is(word):
            self.i += 1
            parts.append(operand())
        return parts[0] if len(parts) == 1 else (lambda names: combine(p(names) for p in parts))

    def _or(self) -> Match:
        return self._chain("or", self._and, any)

    def _and(self) -> Match:
        return self._chain("and", self._not, all)

    def _not(self) -> Match:
        tok = self._peek()
        if tok is None:
            raise self._fail("a name, not or (")
        kind, text, _ = tok
        if kind == "word" and text == "not":
            self.i += 1
            inner = self._not()
            return lambda names: not inner(names)
        if kind == "open":
            self.i += 1
            inner = self._or()
            if self._peek() is None or self._peek()[0] != "close":
                raise self._fail(")")
            self.i += 1
            return inner
        if kind == "word" and text not in ("and", "or"):
            self.i += 1
            needle = text.lower()
            return lambda names: any(needle in n.lower() for n in names)
        raise self._fail("a name, not or (")


def compile(expr: str) -> Match:  # noqa: A001 - as re.compile: an expression in, a matcher out
    """A matcher over an item's names, or UsageError naming the column where EXPR is wrong."""
    if not expr.strip():
        return lambda names: True
    return _Parser(expr).parse()


def select(items: Iterable, expr: str | None, names: Callable[[object], list[str]]) -> list:
    """The items whose names satisfy EXPR (all of them without one)."""
    items = list(items)
    if expr is None:
        return items
    match = compile(expr)
    return [it for it in items if match(names(it))]


def scenario_names(sc) -> list[str]:
    """What -k matches a scenario by: id, boundary, tags, and its file's name without the suffix."""
    stem = re.sub(r"\.ya?ml$", "", sc.file.rsplit("/", 1)[-1]) if sc.file else ""
    return [sc.id, sc.boundary, *sc.tags, *([stem] if stem else [])]
