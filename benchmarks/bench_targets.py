"""Benchmark, per target: the bare import of the target's boundary modules (a fresh process
that imports torch and loads the adapter, nothing else) against the wall time of running the
whole catalog on it (`sentinel run scenarios/ --target T`), and their difference.

    SENTINEL_SLIME_REPO=~/src/slime python benchmarks/bench_targets.py

Targets: reference always; areal and verl when installed; slime / areal@HEAD / verl@HEAD
when SENTINEL_SLIME_REPO / SENTINEL_AREAL_REPO / SENTINEL_VERL_REPO name checkouts.
Aim: catalog wall time within 1 s of the import time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from timing import wall

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = {"reference": "reference.adapter:ReferenceAdapter", "slime": "slime:SlimeAdapter",
            "areal": "areal:ArealAdapter", "verl": "verl:VerlAdapter"}


def targets() -> list[tuple[str, str, str | None]]:
    out = [("reference", "reference", None)]
    for name in ("areal", "verl"):
        if importlib.util.find_spec(name) is not None:
            out.append((f"{name}@installed", name, None))
    for name, env in (("slime", "SENTINEL_SLIME_REPO"), ("areal", "SENTINEL_AREAL_REPO"), ("verl", "SENTINEL_VERL_REPO")):
        if os.environ.get(env):
            out.append((f"{name}@checkout", name, os.environ[env]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"catalog {ROOT / 'scenarios'}, median of {a.repeat}, {os.cpu_count()} cores")
    print(f"{'target':20} {'import s':>9} {'catalog s':>10} {'difference':>11}")
    for label, name, repo in targets():
        mod, cls = ADAPTERS[name].split(":")
        load = (f"import os; os.environ.setdefault('TORCHDYNAMO_DISABLE', '1'); import torch; from pathlib import Path; "
                f"from sentinel_adapters.{mod} import {cls} as A; "
                f"A({('Path(' + repr(repo) + ')') if repo else None}, torch.device('cpu')).load()")
        imp = wall([sys.executable, "-c", load], a.repeat)
        cmd = [sys.executable, "-m", "sentinel", "run", str(ROOT / "scenarios"), "--target", name, "-o", "-", "--json"]
        if repo:
            cmd += ["--repo", repo]
        cat = wall(cmd, a.repeat)
        print(f"{label:20} {imp:9.2f} {cat:10.2f} {cat - imp:+10.2f} s  (aim: within +1 s)")


if __name__ == "__main__":
    main()
