"""Benchmark: does every mapped boundary of each real target *run* at commits spread over its history?

`bench_history_import.py` measures loads; this one calls. For each target (slime, AReaL, verl,
OpenRLHF, TRL from ``$SENTINEL_<T>_REPO``; the bundled reference once), N commits (default 40)
are spread evenly over the window `sentinel history` watches: the first-parent commits that
touch the adapter's `loss_path_files`, from the first commit that holds the adapter's `marker`
module (it is what the adapter claims) to HEAD, both ends included. At each commit every
boundary the adapter maps gets one call with a small valid input and the boundary's default
config (one probe scenario per boundary, `unmutated`, all in one worker: ``runner.run_group``,
the checkout cache and the worker exactly as ``sentinel history`` uses them).

A boundary's symbol is the first trainer function its `@implements` names (its leaf name);
it exists at a commit when a ``def``/``class`` of that name is in the commit's tree (``git
grep``): decided by the symbol, wherever it moved, never by a version table. Counted:

- ok: the call returned (verdict holds or violated: the invariant was evaluated);
- absent: `unsupported` and the symbol does not exist at that commit (not counted);
- no-option: `unsupported` naming an option (or a helper) that commit lacks although the
  symbol exists (listed with its reason, not counted: the reader judges each);
- failed: an error (an adapter defect included), `unsupported` for signature drift, or a load
  error, while the symbol exists.

Prints per target ok / (ok + failed) and the failures grouped by reason (first line, without
what differs between commits) with the commits they hit. Aim: >= 95 % on every target.

    python benchmarks/bench_history_call.py [--commits 40] [--jobs 2] [--targets slime,verl] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sentinel import boundaries, targets  # noqa: E402
from sentinel.history.walk import walk  # noqa: E402
from sentinel.runner import TargetSpec, run_group  # noqa: E402
from sentinel.spec import load_text  # noqa: E402

TARGETS = ("reference", "slime", "areal", "verl", "openrlhf", "trl")

# One small batch: two rows of three tokens, the second row's last token masked.
MASK = [[1, 1, 1], [1, 1, 0]]
TOKEN = {"log_probs": [[-0.5, -1.0, -0.25], [-0.75, -0.5, -2.0]],
         "old_log_probs": [[-0.6, -0.9, -0.3], [-0.7, -0.55, -1.5]],
         "rollout_log_probs": [[-0.65, -0.95, -0.2], [-0.7, -0.6, -1.5]],
         "ref_log_probs": [[-0.4, -1.1, -0.35], [-0.8, -0.45, -1.0]],
         "advantages": [[0.5, 0.5, 0.5], [-0.25, -0.25, -0.25]],
         "values": [[0.1, 0.2, 0.3], [0.0, -0.1, 0.5]],
         "token_rewards": [[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]],
         "value_head": [[0.1, 0.2, 0.3], [0.0, -0.1, 0.5]],
         "tokens": [[1, 0, 3], [2, 4, 0]]}
ROW = {"rewards": [1.0, 0.0], "group": [0, 0], "mask": [1, 1]}
LOGITS = [[[0.1 * (i + j + k) - 0.2 * k for k in range(5)] for j in range(3)] for i in range(2)]


def git(repo: str, *args: str, check: bool = True) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=check).stdout.strip()


def candidates(boundary: str) -> list[dict]:
    """The configs a probe may use: the default first, then each other value of each choice option."""
    spec = boundaries.get(boundary)
    return [{}, *({o.name: v} for o in spec.options if o.kind == "choice" for v in o.values if v != o.default)]


def probe_yaml(boundary: str, config: dict, tag: str = "") -> str:
    """One probe scenario: every input of the boundary, `config`, `unmutated`."""
    spec = boundaries.get(boundary)
    inputs = {}
    for p in spec.inputs:
        if p.kind == "vocab":
            inputs[p.name] = LOGITS
        elif p.kind == "row":
            inputs[p.name] = ROW[p.name]
        elif p.dtype == "mask":
            inputs[p.name] = MASK
        else:
            inputs[p.name] = TOKEN[p.name]
    body = {"id": f"call-probe-{boundary}{tag}", "title": f"one call through {boundary}", "boundary": boundary,
            "config": config, "inputs": inputs, "invariants": [{"unmutated": {}}]}
    return json.dumps(body)  # JSON is YAML


def symbol(calls: list[str], package: str) -> str | None:
    """The leaf name of the first trainer function a boundary names (None: it names none)."""
    own = [c for c in calls if c.split(":")[0].split(".")[0] == package]
    return own[0].rsplit(":", 1)[1].rsplit(".", 1)[-1] if own else None


def exists(repo: str, sha: str, name: str) -> bool:
    pat = rf"^\s*(async\s+)?def {re.escape(name)}\(|^\s*class {re.escape(name)}\b"
    return subprocess.run(["git", "-C", repo, "grep", "-q", "-E", pat, sha, "--", "*.py"]).returncode == 0


def window(name: str, repo: str, n: int) -> list[str]:
    """n commits evenly over the loss-path commits from the first that holds the marker to HEAD."""
    cls = targets.adapter_class(name)
    marker = cls.marker.replace(".", "/") + ".py"
    first = git(repo, "rev-list", "--first-parent", "--reverse", "HEAD", "--", marker).splitlines()[0]
    line = [c.sha for i, c in enumerate(walk(repo, first, "HEAD", tuple(cls.loss_path_files))) if i == 0 or c.touches]
    head = git(repo, "rev-parse", "HEAD")
    if line[-1] != head:
        line.append(head)
    if len(line) <= n:
        return line
    return [line[round(i * (len(line) - 1) / (n - 1))] for i in range(n)]


def calibrate(name: str, repo: str | None, head: str | None, mapped: list[str]) -> tuple[list, dict[str, str]]:
    """At HEAD, the first candidate config of each boundary whose call runs: the probe used at
    every commit. A boundary no candidate runs at HEAD is left out, with the HEAD reason."""
    tried = [(b, i, c) for b in mapped for i, c in enumerate(candidates(b))]
    scs = [load_text(probe_yaml(b, c, f"-{i}"), f"<probe {b}>")[0] for b, i, c in tried]
    group = run_group(scs, TargetSpec(name, repo=repo, commit=head), timeout=120.0)
    by_id = {r.id: r for r in group.results}
    chosen, skipped = [], {}
    for b in mapped:
        runs = [(c, by_id[f"call-probe-{b}-{i}"]) for bb, i, c in tried if bb == b]
        ok = next((c for c, r in runs if r.verdict in ("holds", "violated")), None)
        if ok is None:
            skipped[b] = reason(runs[0][1].reason or str(runs[0][1].exception_info and runs[0][1].exception_info.message))
        else:
            chosen.append(load_text(probe_yaml(b, ok), f"<probe {b}>")[0])
    return chosen, skipped


def reason(message: str) -> str:
    """A failure's first line without what differs between commits, so one cause counts once."""
    line = (message or "").strip().splitlines()[0] if (message or "").strip() else "(no message)"
    line = re.sub(r"\S*sentinel-(?:wt|co)-[^/\s]+/[0-9a-f]+", "<checkout>", line)
    line = re.sub(r"line \d+", "line N", line)
    return re.sub(r"\b(at )?\d+\.\d+\.\d+\S*", "<version>", line)[:240]


def run_commit(name: str, repo: str | None, sha: str | None, probes, symbols: dict[str, str | None]) -> list[dict]:
    t0 = time.perf_counter()
    group = run_group(probes, TargetSpec(name, repo=repo, commit=sha), timeout=120.0)
    out = []
    for r in group.results:
        sym = symbols[r.boundary]
        there = True if repo is None or sym is None else exists(repo, sha, sym)
        if r.verdict in ("holds", "violated"):
            kind, why = "ok", ""
        elif not there:  # unsupported, or a load that needs the missing symbol
            kind, why = "absent", r.reason
        elif r.verdict == "unsupported" and "signature drift" not in r.reason:
            kind, why = "no-option", f"unsupported: {r.reason}"  # the symbol is there, the probed option not
        else:
            exc = r.exception_info
            why = f"{r.verdict}: {exc.type + ': ' + exc.message if exc else r.reason}"
            if group.target.load_error is not None:
                why = f"load: {group.target.load_error.type}: {group.target.load_error.message}"
            kind = "failed"
        out.append({"commit": (sha or "bundled")[:9], "boundary": r.boundary, "symbol": sym, "exists": there,
                    "kind": kind, "reason": reason(why) if why else ""})
    print(f"  {name}@{(sha or 'bundled')[:9]}: {Counter(o['kind'] for o in out)} ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=40, help="commits per target (default 40)")
    ap.add_argument("--jobs", type=int, default=2, help="commits side by side (default 2)")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated (default all six)")
    ap.add_argument("--json", help="write every call's outcome here")
    args = ap.parse_args()
    todo = []
    for name in args.targets.split(","):
        cls = targets.adapter_class(name)
        mapped = {b: m["calls"] for b, m in cls.mapping().items() if m["method"]}
        symbols = {b: symbol(calls, getattr(cls, "package", "")) for b, calls in mapped.items()}
        repo = os.environ.get(targets.get(name).repo_env or "") if name != "reference" else None
        if name != "reference" and not repo:
            print(f"{name}: skipped (no ${targets.get(name).repo_env})")
            continue
        shas = window(name, repo, args.commits) if repo else [None]
        probes, skipped = calibrate(name, repo, shas[-1], list(mapped))
        print(f"{name}: {len(shas)} commit(s) {(shas[0] or 'bundled')[:9]}..{(shas[-1] or 'bundled')[:9]}, "
              f"{len(probes)} of {len(mapped)} mapped boundaries run at HEAD: "
              + ", ".join(f"{sc.boundary}{sc.config or ''}" for sc in probes), flush=True)
        for b, why in skipped.items():
            print(f"  not run at HEAD with any config, left out: {b}: {why}")
        todo += [(name, repo, sha, probes, symbols) for sha in shas]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda t: (t[0], run_commit(*t)), todo))
    per: dict[str, list[dict]] = defaultdict(list)
    for name, rows in outcomes:
        per[name] += rows
    print(f"{len(todo)} commits, {sum(len(r) for r in per.values())} calls in {time.perf_counter() - t0:.0f} s")
    for name, rows in per.items():
        ok = sum(r["kind"] == "ok" for r in rows)
        failed = [r for r in rows if r["kind"] == "failed"]
        absent = sum(r["kind"] == "absent" for r in rows)
        options = [r for r in rows if r["kind"] == "no-option"]
        total = ok + len(failed)
        rate = 100 * ok / total if total else 100.0
        print(f"{name}: {ok}/{total} calls succeed where the symbol exists ({rate:.1f} %), {absent} absent "
              f"(symbol missing), "
              f"{len(options)} option missing, aim >= 95 %")
        groups: dict[str, list[str]] = defaultdict(list)
        for r in failed:
            groups[f"{r['boundary']}: {r['reason']}"].append(r["commit"])
        for why, shas in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(shas)} x {why}  [{', '.join(shas[:8])}{' ...' if len(shas) > 8 else ''}]")
        opt: dict[str, list[str]] = defaultdict(list)
        for r in options:
            opt[f"{r['boundary']}: {r['reason']}"].append(r["commit"])
        for why, shas in sorted(opt.items(), key=lambda kv: -len(kv[1])):
            print(f"  not counted, {len(shas)} x {why}  [{', '.join(shas[:8])}{' ...' if len(shas) > 8 else ''}]")
    if args.json:
        Path(args.json).write_text(json.dumps(per, indent=1))


if __name__ == "__main__":
    main()
