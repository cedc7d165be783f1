"""Benchmark: `sentinel gate` against a bare `import torch`, and the harness's per-scenario
overhead against a direct call of the reference function. Everything is measured in this
run and printed as ratios; nothing here is a pass/fail test.

    python benchmarks/bench_gate.py [--repeat 5]

Aim: gate wall time within 1.5x of `python -c "import torch"`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from timing import wall


def direct_call_s(repeat: int) -> float:
    """Median time of calling the reference OPSM boundary directly, in-process."""
    import torch

    from sentinel_adapters.reference.adapter import ReferenceAdapter
    a = ReferenceAdapter(None, torch.device("cpu"))
    inputs = {"log_probs": torch.zeros(1, 3), "old_log_probs": torch.ones(1, 3),
              "advantages": torch.tensor([[-0.5, 0.25, -0.25]]), "loss_mask": torch.ones(1, 3)}
    cfg = {"opsm_delta": 0.1, "eps_clip": 0.2, "eps_clip_high": 0.2}
    times = []
    for _ in range(max(repeat, 20)):
        t0 = time.perf_counter()
        a.b_opsm_mask(inputs, cfg)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    sentinel = [str(Path(py).with_name("sentinel"))]
    if not Path(sentinel[0]).exists():
        sentinel = ["sentinel"]

    from sentinel.catalog import catalog_path
    from sentinel.runner import TargetSpec, run
    from sentinel.spec import load_paths
    n = len(load_paths([catalog_path()]))

    torch_s = wall([py, "-c", "import torch"], args.repeat)
    gate_s = wall([*sentinel, "gate", "-o", "-", "--json"], args.repeat)

    one = [s for s in load_paths([catalog_path()]) if s.id == "opsm-mixed-advantage"]
    with tempfile.TemporaryDirectory():
        t0 = time.perf_counter()
        rep = run(one * 1, [TargetSpec("reference")])
        single_s = time.perf_counter() - t0
    per_scenario = statistics.median(r.duration_s for r in run(load_paths([catalog_path()]), [TargetSpec("reference")]).results)
    direct = direct_call_s(args.repeat)

    print(f"catalog: {n} scenarios, median of {args.repeat} runs, python {sys.version.split()[0]}")
    print(f"python -c 'import torch'        {torch_s:8.3f} s")
    print(f"sentinel gate                   {gate_s:8.3f} s   ratio gate / import torch = {gate_s / torch_s:.2f}x (aim <= 1.5x)")
    print(f"one scenario, whole harness     {single_s:8.3f} s   (worker start + import + call + verdict; {rep.results[0].verdict})")
    print(f"one scenario inside the worker  {per_scenario * 1e3:8.2f} ms  (median over the catalog; all runs + fork)")
    print(f"direct reference call (opsm)    {direct * 1e3:8.3f} ms  ratio in-worker / direct = {per_scenario / direct:.0f}x")


if __name__ == "__main__":
    main()
