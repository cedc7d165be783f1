"""`sentinel history`: verdicts over a commit range, each flip bisected to the commit that made it.

- `walk`: the first-parent range, which commits touch the target's loss-path files, the sample
- `task`: one (commit, scenario batch) evaluated in its own worktree, answered as JSON
- `executors`: where tasks run (this machine, -j at a time, or Ray), behind one interface
- `cache`: results on disk, so a killed scan resumes and a re-scan runs nothing
- `scan`: the phases (walk, evaluate the sample, hunt, bisect each flip, assemble the report)
- `hunting`: `--hunt`, the differential hunt between neighbouring samples
- its views (timeline, markdown, HTML, `--plot`) are in sentinel/views
"""

from __future__ import annotations

from .scan import Options, Scan, exit_code

__all__ = ["Options", "Scan", "exit_code"]
