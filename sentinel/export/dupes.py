"""The Duplicate Checks and Related fixes of a bundle: the local findings catalog by
signature, the trainer's own git log, and the flips `sentinel history` already reported."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from ..catalog import catalog_path
from ..spec import load_file


def signature(boundary: str, checks: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(boundary, c["family"], c.get("observable") or "") for c in checks}


def catalog_matches(boundary: str, checks: list[dict[str, Any]], own_id: str) -> list[dict[str, Any]]:
    """Scenarios of the bundled catalog that check the same boundary with the same family on
    the same observable (their signature overlaps this finding's)."""
    sig = signature(boundary, checks)
    families = {s[1] for s in sig}
    found = []
    for f in sorted(Path(catalog_path()).rglob("*.yaml")):
        for sc in load_file(f):
            if sc.id == own_id or sc.boundary != boundary:
                continue
            shared = sorted({inv.family for inv in sc.invariants if inv.family in families})
            if shared:
                found.append({"id": sc.id, "file": str(f.relative_to(catalog_path())), "families": shared,
                              "provenance": [str(p) for p in sc.provenance]})
    return found


def git_log(repo: str | None, file: str | None, function: str, words: list[str], limit: int = 20) -> dict[str, Any]:
    """Commits that touched `function` in `file` (`git log -L :def NAME:file`, which follows the
    function's lines, not the whole file), each once, newest first; those whose messages name
    the function or one of `words` are marked, and listed first."""
    if not repo or not file:
        return {"command": None, "matches": [], "scanned": 0, "error": None}
    import git
    regex = rf"def {re.escape(function)}\b"
    with tempfile.TemporaryDirectory(prefix="sentinel-attr-") as tmp:
        # git's python funcname rule (an indented `def` is a function line too) for every .py
        attrs = Path(tmp, "attributes")
        attrs.write_text("*.py diff=python\n")
        try:
            out = git.Repo(repo).git(c=f"core.attributesFile={attrs}").log(
                "-L", f":{regex}:{file}", "--format=%h%x09%s", "--no-patch")
        except git.GitCommandError as e:
            return {"command": _command(regex, file), "matches": [], "scanned": 0,
                    "error": (e.stderr or "").strip().removeprefix("stderr: ").strip("' \n")[:200]}
    commits = dict(ln.split("\t", 1) for ln in out.splitlines() if "\t" in ln)  # one entry per commit
    pat = re.compile("|".join(re.escape(w) for w in [function, *words] if w), re.I)
    rows = [{"commit": h, "subject": s, "message_matches": bool(pat.search(s))} for h, s in commits.items()]
    rows.sort(key=lambda r: not r["message_matches"])  # stable: newest first within each group
    return {"command": _command(regex, file), "scanned": len(rows), "pattern": pat.pattern,
            "matched": sum(r["message_matches"] for r in rows), "matches": rows[:limit], "error": None}


def _command(regex: str, file: str) -> str:
    return f"git log -L ':{regex}:{file}' --format='%h %s' --no-patch"


def related_flips(scenario_id: str, target: str, folders: tuple[str, ...] = ("reports",)) -> list[dict[str, Any]]:
    """Flips of this scenario in history reports already written (reports/**/history*.json)."""
    flips = []
    for folder in folders:
        for f in sorted(Path(folder).rglob("history*.json")) if Path(folder).is_dir() else []:
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            hist = data.get("history") or {}
            if data.get("kind") != "history" and not hist:
                continue
            for flip in hist.get("flips", []):
                if flip.get("scenario") == scenario_id:
                    flips.append({"report": str(f), "commit": flip.get("commit"), "change": flip.get("change"),
                                  "pr": flip.get("pr"), "subject": flip.get("subject")})
    return flips
