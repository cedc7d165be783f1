"""Benchmark: `sentinel gate` against a bare `import torch`, and the harness's per-scenario
overhead against a direct call of the reference function. Everything is measured in this
run and printed as ratios; nothing here is a pass/fail test.

    python benchmarks/bench_gate.py [--repeat 5] [--baseline DIR]

Aim: gate wall time within 1.1x of `python -c "import torch"` (issue 24). Also timed: the gate
with a shared zygote already listening (`python -m sentinel.zygote_server --listen PATH`, as a
CI job that calls `sentinel` several times starts once): torch is then imported before the
command, not in it. `--baseline DIR`
(a source tree of another commit: `git archive REV | tar -x -C DIR`) also times the gate of
that tree (first on PYTHONPATH), interleaved with this one's, for a before / after in one run.
Both trees' packages are byte-compiled first, as `pip install` does: where the environment sets
PYTHONDONTWRITEBYTECODE (this project's machines do), an editable checkout would otherwise
compile ~50 modules from source in every process, which no installed sentinel does.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
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


def shared_zygote(folder: str) -> tuple[subprocess.Popen, str]:
    """A listening zygote (torch imported), and its socket's path once it listens."""
    path = os.path.join(folder, "z.sock")
    proc = subprocess.Popen([sys.executable, "-m", "sentinel.zygote_server", "--listen", path], cwd=folder,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"the shared zygote did not listen at {path} (exit {proc.poll()})")
        time.sleep(0.05)
    return proc, path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", type=Path, help="also time the gate of this source tree, interleaved")
    args = ap.parse_args()
    py = sys.executable
    sentinel = [str(Path(py).with_name("sentinel"))]
    if not Path(sentinel[0]).exists():
        sentinel = ["sentinel"]

    from sentinel.catalog import catalog_path
    from sentinel.runner import TargetSpec, run
    from sentinel.spec import load_paths
    n = len(load_paths([catalog_path()]))

    import sentinel as pkg
    import sentinel_adapters
    for tree in [Path(pkg.__file__).parent, Path(sentinel_adapters.__file__).parent] + \
            ([args.baseline / "sentinel", args.baseline / "adapters"] if args.baseline else []):
        compileall.compile_dir(str(tree), quiet=1)
    gate = [*sentinel, "gate", "-o", "-", "--json"]
    base_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(args.baseline.resolve()) if args.baseline else "", os.environ.get("PYTHONPATH", "")) if p)}
    times: dict[str, list[float]] = {"torch": [], "gate": [], "baseline": [], "shared": []}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as folder:
        zygote, sock = shared_zygote(folder)
        try:
            for _ in range(args.repeat):  # interleaved: a change of load shows in every column alike
                times["torch"].append(wall([py, "-c", "import torch"], 1))
                times["gate"].append(wall(gate, 1))
                times["shared"].append(wall(gate, 1, env={**os.environ, "SENTINEL_ZYGOTE_SOCKET": sock}))
                if args.baseline:
                    times["baseline"].append(wall(gate, 1, env=base_env))
                loads.append(os.getloadavg()[0])
        finally:
            zygote.terminate()
            zygote.wait(30)
    torch_s, gate_s = statistics.median(times["torch"]), statistics.median(times["gate"])
    shared_s = statistics.median(times["shared"])

    one = [s for s in load_paths([catalog_path()]) if s.id == "opsm-mixed-advantage"]
    with tempfile.TemporaryDirectory():
        t0 = time.perf_counter()
        rep = run(one * 1, [TargetSpec("reference")])
        single_s = time.perf_counter() - t0
    per_scenario = statistics.median(r.duration_s for r in run(load_paths([catalog_path()]), [TargetSpec("reference")]).results)
    direct = direct_call_s(args.repeat)

    print(f"catalog: {n} scenarios, median of {args.repeat} runs, python {sys.version.split()[0]}, "
          f"load average {min(loads):.1f}-{max(loads):.1f}; bytecode compiled first"
          f"{' (PYTHONDONTWRITEBYTECODE is set)' if os.environ.get('PYTHONDONTWRITEBYTECODE') else ''}")
    print(f"python -c 'import torch'        {torch_s:8.3f} s")
    print(f"sentinel gate                   {gate_s:8.3f} s   ratio gate / import torch = {gate_s / torch_s:.2f}x (aim <= 1.1x)")
    print(f"sentinel gate, shared zygote    {shared_s:8.3f} s   ratio {shared_s / torch_s:.2f}x (torch imported before "
          f"the command: python -m sentinel.zygote_server --listen PATH; SENTINEL_ZYGOTE_SOCKET=PATH)")
    if args.baseline:
        base_s = statistics.median(times["baseline"])
        print(f"sentinel gate of {args.baseline}  {base_s:8.3f} s   ratio {base_s / torch_s:.2f}x; "
              f"this tree / baseline = {gate_s / base_s:.2f}x")
    print(f"one scenario, whole harness     {single_s:8.3f} s   (worker start + import + call + verdict; {rep.results[0].verdict})")
    print(f"one scenario inside the worker  {per_scenario * 1e3:8.2f} ms  (median over the catalog: its runs, timed in the batch's child)")
    print(f"direct reference call (opsm)    {direct * 1e3:8.3f} ms  ratio in-worker / direct = {per_scenario / direct:.0f}x")


if __name__ == "__main__":
    main()
