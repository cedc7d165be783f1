"""Benchmark: how much of OpenRLHF's and TRL's history the adapters load.

For commits sampled evenly from a checkout's first-parent history since a tag (OpenRLHF since
v0.5.0, TRL since v0.17.0, where GRPOTrainer._compute_loss arrived), each in a fresh process:
export the tree (``git archive``, the checkout is only read), load the adapter from it
(`Adapter.load`: the target's boundary modules, import shims) and call one boundary
(policy_loss, seq-mean-token-mean: every version has it). A commit *loads* when `load`
succeeds; the call then holds a verdict or a one-line reason (unsupported / error).

    SENTINEL_OPENRLHF_REPO=~/src/OpenRLHF SENTINEL_TRL_REPO=~/src/trl \\
        python benchmarks/bench_import_openrlhf_trl.py --samples 40 --jobs 2

Prints, per target, the import rate and the failure reasons; aim >= 95 %.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TARGETS = {  # name -> (environment variable, adapter, first tag)
    "openrlhf": ("SENTINEL_OPENRLHF_REPO", "sentinel_adapters.openrlhf:OpenRLHFAdapter", "v0.5.0"),
    "trl": ("SENTINEL_TRL_REPO", "sentinel_adapters.trl:TRLAdapter", "v0.17.0"),
}

# Run in the child: load the adapter from the exported tree, call policy_loss once.
CHILD = r"""
import importlib, json, sys, torch
from pathlib import Path
mod, cls = sys.argv[2].split(":")
adapter = getattr(importlib.import_module(mod), cls)(Path(sys.argv[1]), torch.device("cpu"))
out = {}
try:
    out["version"] = adapter.load().get("version")
except Exception as e:
    print(json.dumps({"load": "failed", "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}))
    sys.exit(0)
T = torch.tensor
inputs = {"log_probs": T([[-0.5, -1.0, -0.3]], requires_grad=True), "old_log_probs": T([[-0.6, -0.9, -0.3]]),
          "advantages": T([[1.0, 1.0, 1.0]]), "loss_mask": T([[1, 1, 0]])}
try:
    res = adapter.call("policy_loss", inputs, {"loss_agg": "seq-mean-token-mean"})
    loss = float(res.outputs["loss"])
    out["call"] = "ok" if abs(loss + 1.0050) < 1e-3 else f"loss {loss}"
except Exception as e:
    out["call"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
print(json.dumps({"load": "ok", **out}))
"""


def commits(repo: Path, tag: str, n: int) -> list[str]:
    """`n` commits spread evenly over the first-parent history from `tag` to HEAD (both ends in)."""
    revs = subprocess.run(["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", f"{tag}..HEAD"],
                          capture_output=True, text=True, check=True).stdout.split()
    revs = [subprocess.run(["git", "-C", str(repo), "rev-parse", f"{tag}^{{commit}}"], capture_output=True,
                           text=True, check=True).stdout.strip()] + revs
    if len(revs) <= n:
        return revs
    step = (len(revs) - 1) / (n - 1)
    return [revs[round(i * step)] for i in range(n)]


def one(repo: Path, sha: str, adapter: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-") as tmp:
        archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha], capture_output=True,
                                 check=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        p = subprocess.run([sys.executable, "-c", CHILD, tmp, adapter], capture_output=True, text=True, timeout=300)
    try:
        row = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        row = {"load": "failed", "reason": f"child exited {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"}
    return {"commit": sha[:9], **row}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args()
    rows_all = {}
    for name, (env, adapter, tag) in TARGETS.items():
        repo = os.environ.get(env)
        if not repo:
            print(f"{name}: skipped (set {env} to a checkout)")
            continue
        shas = commits(Path(repo), tag, args.samples)
        with ThreadPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(lambda s: one(Path(repo), s, adapter), shas))
        rows_all[name] = rows
        loaded = [r for r in rows if r["load"] == "ok"]
        print(f"{name}: {len(loaded)}/{len(rows)} commits since {tag} load "
              f"({100 * len(loaded) / len(rows):.1f} %); policy_loss ok at {sum(r.get('call') == 'ok' for r in loaded)}")
        for why, k in Counter(r["reason"] for r in rows if r["load"] != "ok").most_common():
            print(f"  load failed x{k}: {why}")
        for why, k in Counter(r["call"] for r in loaded if r.get("call") != "ok").most_common():
            print(f"  policy_loss x{k}: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows_all, indent=1))


if __name__ == "__main__":
    main()
