"""Benchmark: peak memory of each worker of `sentinel gate`, as a ratio to a bare torch import.

    python benchmarks/bench_memory.py [--target reference] [--repo PATH] [--interval 0.02]

The command runs while every process under it is sampled from /proc (Linux only) until it ends:
- `peak RSS` (VmHWM, the kernel's high-water mark, read at each sample) counts every page a
  process maps, the ones it shares with the process that forked it included: a forked worker's
  RSS is mostly the zygote's torch;
- `peak PSS` (smaps_rollup) divides each shared page among the processes sharing it: what one
  more worker really costs.
Roles come from the process tree: the CLI, the zygote (`sentinel.zygote_server`), its forks (the
workers) and theirs (a scenario's child). Rows with SENTINEL_ZYGOTE on and off, in one run, beside
a bare `python -c "import torch"` sampled the same way. Aim (issue 24): a worker's peak <= 1.5x
the bare import. Nothing here passes or fails; it prints the figures and the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

PROC = Path("/proc")


def _kib(path: Path, field: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in PROC.iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _role(pid: int, depth: int, parent_role: str) -> str:
    try:
        cmd = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if depth == 0:
        return "command"
    if "zygote_server" in cmd:
        return "zygote" if parent_role == "command" else ("worker" if parent_role == "zygote" else "scenario child")
    if "sentinel.worker" in cmd:
        return "worker"
    return "scenario child" if parent_role == "worker" else "other"


def sample(cmd: list[str], interval: float, env: dict[str, str]) -> tuple[dict[str, tuple[int, int]], float]:
    """Peak (RSS, PSS) in KiB per role over the life of `cmd`, and its wall time."""
    peaks: dict[str, tuple[int, int]] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    roles: dict[int, str] = {}
    while proc.poll() is None:
        kids = _children()
        todo = [(proc.pid, 0, "")]
        while todo:
            pid, depth, parent = todo.pop()
            role = roles.get(pid) or _role(pid, depth, parent)
            roles[pid] = role
            rss = _kib(PROC / str(pid) / "status", "VmHWM") or 0
            pss = _kib(PROC / str(pid) / "smaps_rollup", "Pss") or 0
            todo.extend((k, depth + 1, role) for k in kids.get(pid, []))
            if not rss:  # gone between the listing and the read
                continue
            old = peaks.get(role, (0, 0))
            peaks[role] = (max(old[0], rss), max(old[1], pss))
        time.sleep(interval)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"bench_memory: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
    return peaks, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="reference")
    ap.add_argument("--repo", help="the trainer checkout (targets other than the reference)")
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between samples")
    args = ap.parse_args()
    if not PROC.joinpath("self", "smaps_rollup").exists():
        sys.exit("bench_memory: needs Linux /proc (smaps_rollup)")
    py = sys.executable
    sentinel = str(Path(py).with_name("sentinel"))
    bare, _ = sample([py, "-c", "import torch, time; time.sleep(0.3)"], args.interval, {})
    torch_rss, torch_pss = bare["command"]
    print(f"bare `import torch`: peak RSS {torch_rss / 1024:.0f} MiB, PSS {torch_pss / 1024:.0f} MiB "
          f"(load average {os.getloadavg()[0]:.1f})")
    gate = [sentinel, "gate", "--target", args.target, "-o", os.devnull, "--json"]
    if args.repo:
        gate += ["--repo", args.repo]
    for zyg in ("on", "off"):
        peaks, wall = sample(gate, args.interval, {"SENTINEL_ZYGOTE": zyg})
        print(f"sentinel gate --target {args.target}, SENTINEL_ZYGOTE={zyg} ({wall:.1f} s, "
              f"load average {os.getloadavg()[0]:.1f}):")
        for role in ("command", "zygote", "worker", "scenario child"):
            if role in peaks:
                rss, pss = peaks[role]
                print(f"  {role:15s} peak RSS {rss / 1024:6.0f} MiB = {rss / torch_rss:4.2f}x   "
                      f"peak PSS {pss / 1024:6.0f} MiB = {pss / torch_pss:4.2f}x the bare import")


if __name__ == "__main__":
    main()
