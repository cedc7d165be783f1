"""`sentinel history --hunt SECONDS`: the differential hunt between neighbouring samples.

Each pair of neighbouring samples whose loss-path files changed is hunted for `seconds` with
`sentinel.hunt.differential` (the same drawn inputs through both revisions, seeded, so a
re-scan draws the same inputs); each finding comes back as a scenario file that joins the
scan's scenarios, so its verdict over the range is sampled and bisected like a catalog
scenario's. Only findings an invariant family explains (`fixed`, `regressed`) join: a
`changed` finding pins base's values, and which side is right is for a person to decide, so
it is counted and its scenario left for reading, never reported as a regression.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

SEED = 0  # one seed for every pair: a difference found on one pair only is not a draw's luck


def hunt_pairs(pairs: list[tuple[str, str]], *, target: str, repo: str, seconds: float, out_dir: Path,
               device: str = "cpu", on_pair: Callable[[int, int, str, str], None] | None = None
               ) -> tuple[list[Path], list[Path]]:
    """Hunt each (base, head) pair: the scenario files (under `out_dir`) of the findings a
    family explains, and of the `changed` ones."""
    from ..hunt.driver.differential import differential  # Hypothesis and the hunt only when --hunt is given
    from ..runner import TargetSpec

    explained: list[Path] = []
    changed: list[Path] = []
    for i, (base, head) in enumerate(pairs):
        if on_pair:
            on_pair(i, len(pairs), base, head)
        rep = differential(TargetSpec(target, repo, base, device), TargetSpec(target, repo, head, device),
                           seconds=seconds, seed=SEED, out_dir=out_dir / f"{base[:12]}-{head[:12]}")
        for f in rep.hunt.findings if rep.hunt else []:
            if f.file:
                (changed if f.classification == "changed" else explained).append(Path(f.file))
    return explained, changed
