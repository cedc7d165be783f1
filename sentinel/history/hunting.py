"""`sentinel history --hunt SECONDS`: the differential hunt between neighbouring samples.

Each pair of neighbouring samples whose loss-path files changed is hunted for `seconds` with
`sentinel.hunt.differential` (the same drawn inputs through both revisions, seeded, so a
re-scan draws the same inputs); each finding comes back as a scenario file that joins the
scan's scenarios, so its verdict over the range is sampled and bisected like a catalog
scenario's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

SEED = 0  # one seed for every pair: a difference found on one pair only is not a draw's luck


def hunt_pairs(pairs: list[tuple[str, str]], *, target: str, repo: str, seconds: float, out_dir: Path,
               device: str = "cpu", on_pair: Callable[[int, int, str, str], None] | None = None) -> list[Path]:
    """Hunt each (base, head) pair; the scenario files of what was found (under `out_dir`)."""
    from ..hunt.differential import differential  # Hypothesis and the hunt only when --hunt is given
    from ..runner import TargetSpec

    files: list[Path] = []
    for i, (base, head) in enumerate(pairs):
        if on_pair:
            on_pair(i, len(pairs), base, head)
        rep = differential(TargetSpec(target, repo, base, device), TargetSpec(target, repo, head, device),
                           seconds=seconds, seed=SEED, out_dir=out_dir / f"{base[:12]}-{head[:12]}")
        files += [Path(f.file) for f in (rep.hunt.findings if rep.hunt else []) if f.file]
    return files
