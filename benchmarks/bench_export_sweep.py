"""The `sentinel export` sweep (issue 21, "Done when"): every finding scenario on every target
where `sentinel run` shows it violated at the checkout's HEAD is exported, and the bundle's
validate.py and unit test are run in ONE separate virtual environment that has only torch,
numpy, pytest and the trainer's own light dependencies (no RL-Sentinel, no trainer wheel: the
checkout on sys.path). A second table exports the seed bugs and the history flips whose fix
commit is known with `--commit PARENT --fixed-at FIX`.

    export SENTINEL_SLIME_REPO=... SENTINEL_AREAL_REPO=... (verl, openrlhf, trl)
    python benchmarks/bench_export_sweep.py --venv /tmp/export-venv [--targets slime,areal] [--only head|fixes]

The venv is made when missing (torch==2.13.0, numpy, pytest, plus LIGHT[target]). Bundles go
to --out (default a temporary folder). Columns: export ok (the CLI wrote a bundle), validate
reproduced (exit 1, status reproduced), values match report (every observable validate.py
prints equals the report's observed value for that invariant), unit test fails (pytest exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = ROOT / "scenarios" / "findings"
TARGETS = {"slime": "SENTINEL_SLIME_REPO", "areal": "SENTINEL_AREAL_REPO", "verl": "SENTINEL_VERL_REPO",
           "openrlhf": "SENTINEL_OPENRLHF_REPO", "trl": "SENTINEL_TRL_REPO"}
# what a trainer's import path needs beyond torch / numpy (found by running the bundles here)
# TRL's package imports transformers, accelerate and datasets at its top (its own install
# requirements; stand-ins lack their __version__): run TRL with a venv of its own (--venv)
LIGHT: dict[str, list[str]] = {"slime": [], "areal": ["colorlog"], "verl": [], "openrlhf": [],
                               "trl": ["transformers", "accelerate", "datasets"]}
# seeds and history flips with a known fix commit (docs/findings.md): (target, scenario, fix)
FIXES = [("slime", "ppo-kl-metric-aliasing", "045310b2b"),  # seed, PR #2114
         ("slime", "ppo-kl-shaped-rewards", "045310b2b"),
         ("slime", "ppo-kl-shaped-rewards", "6d65fa50a"),
         ("slime", "ppo-gradient-unclipped", "763f18d5b"),
         ("verl", "loss-agg-seq-mean-token-sum", "4d722b176"),
         ("verl", "loss-agg-token-mean", "5cbad8379"),
         ("verl", "masked-token-nan-reaches-loss", "5cbad8379"),
         ("verl", "ppo-clip-masked-batch", "5cbad8379"),
         ("verl", "seq-mean-loss-nan-masked", "6a5852147"),
         ("areal", "gspo-sequence-level-ratio", "b2fb234d9")]
# regressions: the parent is the "fixed" side (docs/findings.md, regressed rows)
REGRESSIONS = [("slime", "ppo-kl-metric-aliasing", "75af5297c"), ("verl", "seq-mean-loss-nan-masked", "78014a235"),
               ("areal", "decoupled-loss-behaviour-weight", "bc9f00988")]
# seeds whose upstream fix is not in the checkout's history (no --fixed-at possible)
UNFIXED_SEEDS = [("slime", "opsm-mixed-advantage", "PR #1917 not merged"),
                 ("areal", "no-eos-outlier-reward-norm", "PR #1351 not merged"),
                 ("slime", "off-policy-is-correction", "PR #2084 not merged")]


def sentinel(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sentinel", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def make_venv(venv: Path, targets: list[str]) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "torch==2.13.0", "numpy", "pytest"], check=True)
    extra = sorted({p for t in targets for p in LIGHT.get(t, [])})
    if extra:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *extra], check=True)
    probe = subprocess.run([str(py), "-I", "-c", "import importlib.util as u; print(u.find_spec('sentinel') is None)"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        sys.exit(f"{venv} has RL-Sentinel installed: the sweep needs a venv without it")
    return py


def violated_at_head(target: str, repo: str, out: Path) -> dict[str, dict]:
    """scenario id -> its result in `sentinel run scenarios/findings/ --json` where violated
    (kept in OUT/run-TARGET.json: a rerun into the same --out reuses it)."""
    cache = out / f"run-{target}.json"
    if cache.exists():
        data = json.loads(cache.read_text())
    else:
        proc = sentinel("run", str(FINDINGS), "-t", target, "--repo", repo, "--json", "--timeout", "300")
        try:
            data = json.loads(proc.stdout)
        except json.JSONDecodeError:
            sys.exit(f"sentinel run on {target} failed: {proc.stderr[-2000:]}")
        out.mkdir(parents=True, exist_ok=True)
        cache.write_text(proc.stdout)
    return {r["id"]: r for r in data["results"] if r["verdict"] == "violated"}


def run_bundle(py: Path, bundle: Path, repo: str) -> dict:
    """validate.py and the unit test in the separate venv, the checkout read-only (no bytecode)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", TRAINER_REPO=repo)
    out: dict = {}
    proc = subprocess.run([str(py), "-I", "-B", str(bundle / "validate.py"), repo], capture_output=True, text=True,
                          env=env, timeout=600)
    out["validate_rc"] = proc.returncode
    try:
        out["validate"] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        out["validate"] = {"status": "error", "error": (proc.stderr or proc.stdout).strip()[-400:]}
    test = next(bundle.glob("test_*.py"))
    with tempfile.TemporaryDirectory(prefix="export-sweep-") as tmp:
        (Path(tmp) / "tests").mkdir()
        shutil.copy(test, Path(tmp) / "tests" / test.name)
        proc = subprocess.run([str(py), "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
                               "-o", "addopts=", f"tests/{test.name}"], cwd=tmp, capture_output=True, text=True,
                              env=env, timeout=600)
    out["test_rc"] = proc.returncode
    out["test_tail"] = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()][-3:]
    out["test_tail"] += [ln for ln in proc.stdout.splitlines() if "offending positions" in ln][:1]
    return out


def _num(x):
    if isinstance(x, list):
        return [_num(v) for v in x]
    return float(x) if isinstance(x, str) else (np.nan if x is None else x)


def values_match(validate: dict, result: dict) -> tuple[bool, str]:
    """Every observable validate.py printed equals the report's observed value of a violated
    invariant on that observable (NaN equal to NaN)."""
    seen = validate.get("observed") or {}
    if not seen:
        return False, "validate.py printed no observed values"
    by_obs: dict[str, list] = {}
    for inv in result.get("invariants", []):
        if inv.get("verdict") != "violated":
            continue
        d, cfg = inv.get("details") or {}, (inv.get("config") or {}).get(inv.get("family"), {}) or {}
        name = d.get("observable") or cfg.get("output") or (f"input:{d['input']}" if d.get("input") else None)
        if inv.get("family") == "gradient":  # the gradient of `of` by `wrt`, as validate.py names it
            name = f"grad:{cfg.get('of')}/{cfg.get('wrt')}"
        if name and inv.get("observed") is not None:
            by_obs.setdefault(name, []).append(inv["observed"])
    for name, value in seen.items():
        if name not in by_obs:
            return False, f"the report has no observed value for {name}"
        a = np.asarray(_num(value), np.float64)
        if not any(np.shape(b := np.asarray(_num(o), np.float64)) == a.shape
                   and np.allclose(a, b, atol=1e-6, rtol=1e-5, equal_nan=True) for o in by_obs[name]):
            return False, f"{name}: validate.py {value} vs report {by_obs[name][0]}"
    return True, ""


def yes(b) -> str:
    return "yes" if b else "NO"


def head_rows(py: Path, targets: list[str], out: Path, only_ids: set[str] | None = None) -> list[list[str]]:
    rows = []
    for target in targets:
        repo = os.environ[TARGETS[target]]
        for sid, result in sorted(violated_at_head(target, repo, out).items()):
            if only_ids and sid not in only_ids:
                continue
            if not (FINDINGS / f"{sid}.yaml").exists():
                continue
            folder = out / f"{sid}-{target}"
            proc = sentinel("export", sid, "-t", target, "--repo", repo, "-o", str(folder))
            if proc.returncode:
                rows.append([sid, target, "NO", "-", "-", "-", _why(folder, proc)])
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
                continue
            got = run_bundle(py, folder, repo)
            v = got["validate"]
            rep = got["validate_rc"] == 1 and v.get("status") == "reproduced"
            match, why = values_match(v, result) if rep else (False, v.get("error") or f"status {v.get('status')}")
            fails = got["test_rc"] == 1 and "offending positions" in " ".join(got["test_tail"])
            reason = why or ("" if fails else " / ".join(got["test_tail"]))
            rows.append([sid, target, "yes", yes(rep), yes(match), yes(fails), _plus(reason, folder)])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _plus(reason: str, folder: Path) -> str:
    """The reason, and what the bundle itself says it could not replay (PR / ISSUE 'not in validate.py')."""
    b = json.loads((folder / "bundle.json").read_text()) if (folder / "bundle.json").exists() else {}
    skipped = b.get("not_exported") or []
    note = "; ".join(f"not in validate.py: {s}" for s in skipped)
    return "; ".join(x for x in (reason, note) if x)


def _why(folder: Path, proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or proc.stdout).strip()  # the CLI wraps its error at 80 columns: the whole message
    return " ".join(ln.strip() for ln in text[max(text.rfind("error:"), 0):].splitlines())[:400]


def fix_rows(py: Path, targets: list[str], out: Path, only_ids: set[str] | None = None) -> list[list[str]]:
    rows = []
    plan = [(t, s, f"{f}^", f, "fix") for t, s, f in FIXES] + [(t, s, c, f"{c}^", "regression") for t, s, c in REGRESSIONS]
    for target, sid, bad, good, kind in plan:
        if target not in targets or (only_ids and sid not in only_ids):
            continue
        repo = os.environ[TARGETS[target]]
        folder = out / f"{sid}-{target}-{good.rstrip('^')}"
        proc = sentinel("export", sid, "-t", target, "--repo", repo, "--commit", bad, "--fixed-at", good,
                        "-o", str(folder))
        if proc.returncode:
            rows.append([sid, target, f"{bad} -> {good}", kind, "NO", "-", "-", "-", "-", _why(folder, proc)])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
            continue
        before = json.loads((folder / "before.json").read_text())
        after = json.loads((folder / "after.json").read_text())
        ok = [before.get("status") == "reproduced", before["test"]["exit"] == 1,
              after.get("status") == "fixed", after["test"]["exit"] == 0]
        reason = "" if all(ok) else f"after: {after.get('status')} {after.get('error', '')}".strip()
        rows.append([sid, target, f"{bad} -> {good}", kind, "yes", *map(yes, ok), _plus(reason, folder)])
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    for target, sid, why in UNFIXED_SEEDS:
        if target in targets:
            rows.append([sid, target, "-", "seed", "-", "-", "-", "-", "-", f"no fix commit: {why}"])
    return rows


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "export-venv")
    ap.add_argument("--out", type=Path, default=None, help="where the bundles are written (default: a temporary folder)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--only", choices=("head", "fixes"), default=None)
    ap.add_argument("--ids", default=None, help="only these scenario ids (comma-separated)")
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if os.environ.get(TARGETS[t])]
    py = make_venv(a.venv, targets)
    out = a.out or Path(tempfile.mkdtemp(prefix="export-sweep-"))
    ver = subprocess.run([str(py), "-c", "import torch, numpy; print(torch.__version__, numpy.__version__)"],
                         capture_output=True, text=True).stdout.split()
    heads = {t: subprocess.run(["git", "-C", os.environ[TARGETS[t]], "rev-parse", "--short=9", "HEAD"],
                               capture_output=True, text=True).stdout.strip() for t in targets}
    print(f"separate venv: torch {ver[0]}, numpy {ver[1]}, pytest; no RL-Sentinel; extra: "
          f"{ {t: LIGHT[t] for t in targets if LIGHT[t]} or 'none'}")
    print("checkout HEADs: " + ", ".join(f"{t} {h}" for t, h in heads.items()) + "\n")
    if a.only != "fixes":
        rows = head_rows(py, targets, out, set(a.ids.split(",")) if a.ids else None)
        print("## Findings violated at HEAD\n")
        print(table(["scenario", "target", "export ok", "validate reproduced", "values match report",
                     "unit test fails", "reason when not"], rows) + "\n")
    if a.only != "head":
        rows = fix_rows(py, targets, out, set(a.ids.split(",")) if a.ids else None)
        print("## Seeds and history flips with a known fix (--commit PARENT --fixed-at FIX)\n")
        print(table(["scenario", "target", "unfixed -> fixed", "kind", "export ok", "before reproduced",
                     "test fails before", "after fixed", "test passes after", "reason when not"], rows))


if __name__ == "__main__":
    main()
