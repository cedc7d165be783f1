"""CUDA isolation and verdicts on a GPU machine (run by benchmarks/gpu_check.sh).

1. The whole catalog on the reference, with --device cpu and --device cuda: the same verdict
   for every scenario and invariant, values within float tolerance.
2. A planted module-state mutation on cuda does not leak into the next scenario (each
   scenario runs in its own forked child that initialises CUDA).
3. A hanging target with an 8 s timeout on cuda costs about 8 s, not the 38 s it took when
   CUDA scenarios ran in the worker itself.
Prints a table; exit 0 only when all hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "/tmp"))
SENTINEL = [sys.executable, "-m", "sentinel.cli"]


def catalog(device: str) -> dict:
    path = OUT / f"catalog-{device}.json"
    subprocess.run([*SENTINEL, "run", "scenarios/", "--device", device, "-o", str(path)], cwd=ROOT,
                   capture_output=True, text=True)
    return json.loads(path.read_text())


def _close(a, b) -> bool:
    try:
        return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-4, atol=1e-5, equal_nan=True)
    except (TypeError, ValueError):
        return a == b


def main() -> int:
    rows, ok = [], True
    cpu, cuda = catalog("cpu"), catalog("cuda")
    assert cuda["environment"]["device"].startswith("cuda"), cuda["environment"]
    by = {r["id"]: r for r in cpu["results"]}
    same = diff = 0
    for r in cuda["results"]:
        c = by[r["id"]]
        inv_same = [a["verdict"] for a in r["invariants"]] == [a["verdict"] for a in c["invariants"]]
        values = all(_close(r["observations"].get(k), v) for k, v in c["observations"].items())
        if r["verdict"] == c["verdict"] and inv_same and values:
            same += 1
        else:
            diff += 1
            print("DIFFERS", r["id"], c["verdict"], "->", r["verdict"], r["reason"][:200])
    ok &= diff == 0 and cuda["statistics"]["holds"] == len(cuda["results"])
    rows.append(("catalog cpu vs cuda (reference)", f"{same} same, {diff} differ; cuda: {cuda['statistics']}",
                 cuda["environment"].get("device_name")))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    sys.path.insert(0, str(ROOT / "tests"))
    from faulty_adapter import CODES  # noqa: E402

    def scenario(sid, mode, expected=2.0):
        return (f"id: {sid}\ntitle: {mode}\nboundary: loss_agg\ninputs:\n  values: [[1.0, 2.0, 3.0, {CODES[mode]}]]\n"
                f"  loss_mask: [[1, 1, 1, 0]]\ninvariants:\n  - close: {{output: loss, expected: {expected}}}\n")
    leak = OUT / "leak.yaml"
    leak.write_text(scenario("mutates", "mutate") + "---\n" + scenario("reads-state", "read-state", 0.0))
    p = subprocess.run([*SENTINEL, "run", str(leak), "--device", "cuda", "--target", "faulty_adapter:FaultyAdapter",
                        "-o", str(OUT / "leak.json")], cwd=ROOT, env=env, capture_output=True, text=True)
    res = {r["id"]: r["verdict"] for r in json.loads((OUT / "leak.json").read_text())["results"]}
    ok &= res.get("reads-state") == "holds"
    rows.append(("module state mutated on cuda leaks?", f"reads-state: {res.get('reads-state')} (holds = no leak)", p.returncode))

    hang = OUT / "hang.yaml"
    hang.write_text(scenario("hangs", "hang") + "---\n" + scenario("after", "ok"))
    t0 = time.monotonic()
    subprocess.run([*SENTINEL, "run", str(hang), "--device", "cuda", "--target", "faulty_adapter:FaultyAdapter",
                    "--timeout", "8", "-o", str(OUT / "hang.json")], cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.monotonic() - t0
    res = {r["id"]: (r["verdict"], r["reason"][:80]) for r in json.loads((OUT / "hang.json").read_text())["results"]}
    ok &= res["hangs"][0] == "error" and res["after"][0] == "holds" and took < 20
    rows.append(("8 s timeout on cuda", f"{took:.1f} s wall; hangs: {res['hangs']}; after: {res['after'][0]}", ""))

    print("\n| check | result | note |\n|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print("ALL OK" if ok else "SOME CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
