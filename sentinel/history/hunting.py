"""`sentinel history --hunt SECONDS`: the differential hunt between neighbouring samples.

The differential hunt (the same drawn input through two revisions of a target) lives in
`sentinel.hunt.differential`. This build looks it up once; where it is absent, `--hunt` is
refused before any work starts, with `NOT_AVAILABLE` as the reason. Where it is present,
each pair of neighbouring samples whose loss-path files changed is hunted for `seconds`, and
each finding comes back as a scenario file that joins the scan's scenarios, so its verdict
over the range is sampled and bisected like a catalog scenario's.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from ..errors import UsageError

NOT_AVAILABLE = "differential hunt not available in this build"


def differential() -> Callable[..., Any]:
    """`sentinel.hunt.differential` (a function, or a module holding one of that name), or UsageError."""
    try:
        found: Any = importlib.import_module("sentinel.hunt.differential")
    except ImportError:
        found = getattr(importlib.import_module("sentinel.hunt"), "differential", None)
    if found is not None and not callable(found):
        found = getattr(found, "differential", None)
    if not callable(found):
        raise UsageError(NOT_AVAILABLE)
    return found


def hunt_pairs(pairs: list[tuple[str, str]], *, target: str, repo: str, seconds: float) -> list[Path]:
    """Hunt each (base, head) pair; the scenario files of what was found."""
    hunt = differential()
    files: list[Path] = []
    for base, head in pairs:
        found = hunt(target=target, repo=repo, base=base, head=head, seconds=seconds)
        summary = getattr(found, "hunt", found)
        for finding in getattr(summary, "findings", None) or []:
            if getattr(finding, "file", None):
                files.append(Path(finding.file))
    return files
