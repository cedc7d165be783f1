"""`sentinel hunt --coverage`: which branches of each mapped function's body the catalog and
the hunt executed.

In the worker's child (`measuring`), coverage.py records branch arcs of the trainer's files
while a catalog scenario or a hunt round runs and writes one data file per child under the
hunt's coverage folder;
`spans` says where each function the boundary maps (`@implements(..., calls=...)`) lives.
In the CLI's process (`analyse`), the data files are combined and each function's body is
read off: branches total / covered, the uncovered ones with the text of their condition,
and those the adapter declares unreachable (with its reason: several processes, a GPU).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import linecache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # the report's models (pydantic): the CLI's side only, never a scenario's child
    from .reach import FunctionCoverage


@contextlib.contextmanager
def measuring(folder: str | None, roots: list[str]) -> Iterator[None]:
    """Branch coverage of the files under `roots` for the duration (nothing when `folder` is None)."""
    if not folder or not roots:
        yield
        return
    import coverage
    Path(folder).mkdir(parents=True, exist_ok=True)
    cov = coverage.Coverage(data_file=str(Path(folder) / ".coverage"), data_suffix=True, branch=True,
                            include=[str(Path(r)) + ("/*" if Path(r).is_dir() else "") for r in roots])
    cov.start()
    try:
        yield
    finally:
        cov.stop()
        cov.save()


def spans(adapter: Any, boundary: str) -> list[dict[str, Any]]:
    """Each function the adapter maps `boundary` to: {function, file, first, last} (lines of its def)."""
    out = []
    for dotted in (type(adapter).mapping().get(boundary) or {}).get("calls", []):
        module, _, qualname = dotted.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            fn = inspect.unwrap(obj)
            lines, first = inspect.getsourcelines(fn)
            out.append({"function": dotted, "file": str(Path(inspect.getsourcefile(fn) or "").resolve()),
                        "first": first, "last": first + len(lines) - 1})
        except Exception:  # noqa: BLE001 - absent at this commit, or a builtin: nothing to measure
            continue
    return out


def _declared(declared: dict[str, str], file: str, text: str, dests: list[int]) -> dict[str, list[int]]:
    """The missing arcs of one branching line by the reason declared for them ("" where none):
    a key "CONDITION -> DESTINATION" names one arc (text in the branching line, text in the line
    it jumps to); a key without " -> " names every arc of the line."""
    out: dict[str, list[int]] = {}
    for d in dests:
        target = linecache.getline(file, d).strip() if d > 0 else ""
        why = ""
        for key, reason in declared.items():
            cond, _, dest = key.partition(" -> ")
            if cond in text and (not dest or dest in target):
                why = reason
                break
        out.setdefault(why, []).append(d)
    return out


def analyse(folder: str, functions: list[dict[str, Any]], unreachable: dict[str, dict[str, str]]) -> list[FunctionCoverage]:
    """The combined data of `folder`, per function span; `unreachable`: function -> {text in
    the branching line -> the adapter's reason}."""
    import coverage

    from .reach import Branch, FunctionCoverage
    cov = coverage.Coverage(data_file=str(Path(folder) / ".coverage"), branch=True)
    cov.combine([folder], keep=True)
    cov.load()
    out, seen = [], set()
    for f in functions:
        if f["function"] in seen:
            continue
        seen.add(f["function"])
        first, last = f["first"], f["last"]
        try:
            an = cov._analyze(f["file"])  # noqa: SLF001 - the arcs per line; no public equivalent
        except Exception:  # noqa: BLE001 - never executed: no data for the file
            out.append(FunctionCoverage(function=f["function"], file=f["file"], lines=[first, last]))
            continue
        counts = an.exit_counts() if callable(an.exit_counts) else an.exit_counts  # a method before coverage 7.6
        exits = {ln: n for ln, n in counts.items() if first < ln <= last and n > 1}
        missing = {ln: sorted(d) for ln, d in an.missing_branch_arcs().items() if ln in exits}
        declared = unreachable.get(f["function"], {})
        unreach, uncovered = [], []
        for ln, dests in sorted(missing.items()):
            text = linecache.getline(f["file"], ln).strip()
            for why, arcs in _declared(declared, f["file"], text, dests).items():
                (unreach if why else uncovered).append(Branch(line=ln, condition=text, missing=arcs, reason=why))
        total = sum(exits.values())
        out.append(FunctionCoverage(
            function=f["function"], file=f["file"], lines=[first, last], branches_total=total,
            branches_covered=total - sum(len(d) for d in missing.values()), branches_unreachable=unreach,
            uncovered=uncovered, lines_missing=[ln for ln in an.missing if first <= ln <= last]))
    return out
