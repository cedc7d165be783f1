"""CUDA isolation and verdicts on a GPU machine (run by benchmarks/gpu_check.sh).

1. The whole catalog on the reference, with --device cpu and --device cuda: the same verdict
   for every scenario and invariant, values within float tolerance.
2. A planted module-state mutation on cuda does not leak into the next scenario (each
   scenario runs in its own forked child that initialises CUDA).
3. A hanging target with an 8 s timeout on cuda costs about 8 s, not the 38 s it took when
   CUDA scenarios ran in the worker itself.
4. The precision family on cuda (bf16 and fp16 log-probs): the reference holds, the plant
   ratio-in-low-precision is violated, in the catalog and in a seeded hunt.
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

    ok &= precision(rows)

    print("\n| check | result | note |\n|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print("ALL OK" if ok else "SOME CHECK FAILED")
    return 0 if ok else 1


def precision(rows: list) -> bool:
    """4. The precision family on cuda: bf16 and fp16 log-probs beside fp32 inputs. The reference
    holds with its error and bound printed, the plant ratio-in-low-precision is violated, in the
    catalog scenario and in a seeded hunt of both precision properties."""
    import torch

    from sentinel.invariants import RunObservation
    from sentinel.observe import observe
    from sentinel.runner import plan
    from sentinel.spec import load_file
    from sentinel_adapters.reference.adapter import ReferenceAdapter

    ok = True
    (sc,) = load_file(ROOT / "scenarios" / "policy" / "precision.yaml")
    for plant in (None, "ratio-in-low-precision"):
        ad = ReferenceAdapter(options={"plant": plant} if plant else {})
        ad.load()
        obs = {}
        for r in plan(sc):
            o, _ = observe(ad, torch.device("cuda"), sc.boundary, r.inputs, r.config, r.grads, r.casts)
            obs[r.name] = RunObservation(inputs=r.inputs, **{k: v for k, v in o.items() if k != "extras"})
        for inv in sc.invariants:
            low, wide = inv.runs_named
            err = float(abs(obs[low].outputs["loss"] - obs[wide].outputs["loss"]))
            bound = inv.bound(sc, obs[low].inputs, obs[wide].outputs["loss"], None)
            verdict = inv.evaluate(obs, sc).verdict
            ok &= verdict == ("violated" if plant else "held")
            rows.append((f"precision {inv.dtype} on cuda, {plant or 'reference'}",
                         f"{verdict}: loss error {err:.3g}, fp32 bound {bound:.3g} ({err / bound:.2g}x)", ""))
    for plant, want in ((None, "holds"), ("ratio-in-low-precision", "violated")):
        path = OUT / f"precision-{plant or 'reference'}.json"
        cmd = [*SENTINEL, "run", "scenarios/policy/precision.yaml", "--device", "cuda", "-o", str(path)]
        subprocess.run(cmd + (["--plant", plant] if plant else []), cwd=ROOT, capture_output=True, text=True)
        got = json.loads(path.read_text())["results"][0]["verdict"]
        ok &= got == want
        rows.append((f"sentinel run precision.yaml --device cuda, {plant or 'reference'}", got, f"want {want}"))
        hunt_out = OUT / f"hunt-{plant or 'reference'}.json"
        cmd = [*SENTINEL, "hunt", "--device", "cuda", "--seed", "0", "-n", "80", "--time", "60", "--no-db",
               "--property", "policy_loss.precision.bf16", "--property", "policy_loss.precision.fp16",
               "--out", str(OUT / "hunt"), "-o", str(hunt_out)]
        t0 = time.monotonic()
        subprocess.run(cmd + (["--plant", plant] if plant else []), cwd=ROOT, capture_output=True, text=True)
        rep = json.loads(hunt_out.read_text())
        found = sorted({f["property"] for f in rep["hunt"]["findings"]})
        ok &= bool(found) == bool(plant)
        rows.append((f"sentinel hunt precision.* --device cuda, {plant or 'reference'}",
                     f"findings: {found or 'none'}; examples {sum(p['examples'] for p in rep['hunt']['properties'])}",
                     f"{time.monotonic() - t0:.1f} s"))
    return ok


if __name__ == "__main__":
    sys.exit(main())
