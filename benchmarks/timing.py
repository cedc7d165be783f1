"""Shared by the benchmarks: the median wall time of a command, failing loudly when the
command itself fails (exit codes 0, 1 and 3 are verdicts, not failures)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def wall(cmd: list[str], repeat: int, ok: tuple[int, ...] = (0, 1, 3), env: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        if p.returncode not in ok:
            sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return statistics.median(times)
