"""Deviations tied to the code they excuse.

A declared deviation (`contract.deviation`) may name the trainer function whose convention it
describes (`source="module:qualname"`), the hash of that function's body as the adapter's
author read it (`body=`, or a tuple: one per version read), and the commits it holds for
(`commits=(first, until)`: `first` is the checkout or one of its ancestors; `until`, when
given, is not). At a checkout where the
body's hash differs, the function is gone, or the commit lies outside the range, the
deviation does not apply: a difference it would have explained is reported, with why it was
skipped (`standing`).

The hash (`body_hash`) is of the function's source read from its file, without importing it:
the `def` line (decorators excluded) through its last line, comments, blank lines and
trailing spaces dropped, dedented; sha256, the first 12 hex digits. A comment or a blank line
keeps it; any change of code moves it. `sentinel list boundaries --target T` prints each
deviation's function, the hash at the checkout and whether it applies there.
"""

from __future__ import annotations

import ast
import hashlib
import io
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any, Iterable, Iterator

HASH_LEN = 12


def module_file(module: str, roots: Iterable[str | Path]) -> Path | None:
    """The source file of `module` under the first root that has it (no import)."""
    rel = Path(*module.split("."))
    for r in roots:
        for cand in (Path(r) / f"{rel}.py", Path(r) / rel / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def _defs(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module or class body, looking into if / try / with blocks (a def
    under `if TYPE_CHECKING` or a version switch is still the module's)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody"):
                yield from _defs(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                yield from _defs(handler.body)


def _imported(module: str, node: ast.ImportFrom, name: str, is_package: bool) -> tuple[str, str] | None:
    """(module, name) a `from X import name` re-exports, resolved against `module`."""
    for alias in node.names:
        if (alias.asname or alias.name) == name:
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[:len(base) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            return src, alias.name
    return None


def locate(dotted: str, roots: Iterable[str | Path], depth: int = 4) -> tuple[str, ast.AST] | None:
    """(file text, the def's node) of "module:qualname" under `roots` (then sys.path),
    following a module's `from X import name` re-export; None where it is not there."""
    module, _, qualname = dotted.partition(":")
    roots = [*roots, *(p for p in sys.path if p)]
    path = module_file(module, roots)
    if path is None:
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    parts, body = qualname.split("."), tree.body
    for i, part in enumerate(parts):
        node = next((n for n in _defs(body) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            if i == 0 and depth > 0:  # re-exported from another module
                for imp in (n for n in _defs(body) if isinstance(n, ast.ImportFrom)):
                    src = _imported(module, imp, part, path.name == "__init__.py")
                    if src is not None:
                        return locate(f"{src[0]}:{'.'.join([src[1], *parts[1:]])}", roots, depth - 1)
            return None
        if i == len(parts) - 1:
            return text, node
        body = getattr(node, "body", [])
    return None


def body_hash(text: str, node: Any) -> str:
    """The hash of a def's source (see the module docstring)."""
    src = textwrap.dedent("\n".join(text.splitlines()[node.lineno - 1:node.end_lineno]))
    lines = src.splitlines()
    try:
        comments = [t.start for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        comments = []  # an odd indentation inside a string: hash the text with its comments
    for row, col in reversed(comments):
        lines[row - 1] = lines[row - 1][:col]
    kept = "\n".join(x.rstrip() for x in lines if x.strip())
    return hashlib.sha256(kept.encode()).hexdigest()[:HASH_LEN]


def current_hash(dotted: str, roots: Iterable[str | Path]) -> str | None:
    """The body hash of "module:qualname" where `roots` (then sys.path) hold it; None: not there."""
    found = locate(dotted, roots)
    return body_hash(*found) if found else None


def _head(root: Path) -> tuple[Any, str] | None:
    import git
    try:
        r = git.Repo(root)
        return r, r.head.commit.hexsha
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
        return None


def _in_range(root: Path | None, commits: tuple[str, ...]) -> str | None:
    """Why the checkout at `root` is outside `commits` (None: inside)."""
    import git
    at = _head(root) if root is not None else None
    if at is None:
        return f"no git checkout to place it in its commit range {'..'.join(commits)}"
    repo, sha = at
    try:
        if not repo.is_ancestor(commits[0], sha):
            return f"checkout {sha[:10]} is before {commits[0]} (the range starts there)"
        if len(commits) > 1 and commits[1] and repo.is_ancestor(commits[1], sha):
            return f"checkout {sha[:10]} is at or after {commits[1]} (the range ends there)"
    except git.GitCommandError:
        return f"a commit of its range {'..'.join(commits)} is unknown in this repository"
    return None


def standing(source: str, body: tuple[str, ...], commits: tuple[str, ...], roots: list[str | Path],
             root: Path | None) -> dict[str, Any]:
    """Whether a deviation applies at this checkout: {"applies", "skipped" (why not), "hash_now"}.
    `roots`: where the trainer's modules are found; `root`: the checkout (for the commit range)."""
    now = current_hash(source, roots) if source else None
    why = ""
    if source and body and now is None:
        why = f"{source} is not found at this checkout"
    elif source and body and now not in body:
        why = f"the body of {source} changed: declared for hash {' or '.join(body)}, here {now}"
    elif commits:
        why = _in_range(root, commits) or ""
    return {"applies": not why, "skipped": why, "hash_now": now}
