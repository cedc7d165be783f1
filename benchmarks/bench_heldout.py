"""Benchmark detection on held-out real fixes: for each entry of benchmarks/heldout.yaml (a
real upstream fix no scenario or issue names), does the catalog or a seeded differential hunt
tell the parent from the fix?

    python benchmarks/bench_heldout.py [--set benchmarks/heldout.yaml] [--only ID ...]
        [--time 30] [--max-examples 300] [--seed 0] [--shrink-time 10] [--out DIR]

The trainers' checkouts come from SENTINEL_<TARGET>_REPO (as for the tests). For each entry:
- catalog: `sentinel compare scenarios/ --target T --repo R --base PARENT --head FIX`; detected
  when some scenario's verdict differs between the two sides (listed as id base->head).
- hunt: `sentinel hunt --target T --repo R --base PARENT --head FIX -b B ... --seed S --time T
  --max-examples N --no-db`, only on the entry's boundaries (those that reach the changed
  function); detected when it reports a finding (property, classification, first words).
Both commands' JSON reports go under --out (default: a fresh temporary folder), with
summary.json. Rows carry the wall time and the 1-minute load average at the end of each
command. Nothing here passes or fails: it prints the table; reading each miss (why it was not
seen) is done by hand into benchmarks/results/heldout-*.txt.

The set is held out: nothing may be tuned on it (see the comment at the top of the YAML).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SENTINEL = [sys.executable, "-m", "sentinel"]
# exit codes that are answers, not failures: compare 0/1/3/5, hunt 0/1/3/5 (3: a side did not load)
ANSWERS = (0, 1, 3, 5)


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _repo(target: str) -> str:
    var = f"SENTINEL_{target.upper()}_REPO"
    path = os.environ.get(var)
    if not path or not Path(path).is_dir():
        sys.exit(f"bench_heldout: set {var} to a checkout of {target}")
    return path


def _run(cmd: list[str], log: Path) -> tuple[int, float, float]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    log.write_text(f"$ {' '.join(cmd)}\nexit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    if p.returncode not in ANSWERS:
        sys.exit(f"bench_heldout: {' '.join(cmd)} failed ({p.returncode}); see {log}")
    return p.returncode, wall, _load()


def _load_errors(rep: dict) -> dict[str, str]:
    """Each side that did not load: the error's type and message (the traceback stays in the JSON)."""
    return {side: f"{t['load_error'].get('type')}: "
                  f"{t['load_error'].get('message', '').replace(sys.prefix, '<venv>')[:160]}"
            for side, t in (rep.get("targets") or {}).items() if t.get("load_error")}


def catalog(entry: dict, repo: str, out: Path, catalog_dir: str) -> dict:
    report = out / f"{entry['id']}-compare.json"
    cmd = [*SENTINEL, "compare", catalog_dir, "--target", entry["target"], "--repo", repo,
           "--base", entry["parent"], "--head", entry["fix"], "-o", str(report)]
    rc, wall, load = _run(cmd, out / f"{entry['id']}-compare.log")
    rep = json.loads(report.read_text())
    flips = [f"{c['id']} {c['base']}->{c['head']}" for c in rep["comparisons"] if c["base"] != c["head"]]
    load_errors = _load_errors(rep)
    ran = {side: sum(1 for c in rep["comparisons"] if c[side] in ("holds", "violated"))
           for side in ("base", "head")}
    return {"exit": rc, "wall_s": round(wall, 1), "load": load, "flips": flips, "detected": bool(flips),
            "ran": ran, "scenarios": len(rep["comparisons"]), "load_errors": load_errors}


def hunt(entry: dict, repo: str, out: Path, args) -> dict:
    report = out / f"{entry['id']}-hunt.json"
    cmd = [*SENTINEL, "hunt", "--target", entry["target"], "--repo", repo, "--base", entry["parent"],
           "--head", entry["fix"], "--seed", str(args.seed), "--time", str(args.time),
           "--max-examples", str(args.max_examples), "--shrink-time", str(args.shrink_time), "--no-db",
           "--out", str(out / f"{entry['id']}-findings"), "-o", str(report)]
    for b in entry["boundaries"]:
        cmd += ["-b", b]
    rc, wall, load = _run(cmd, out / f"{entry['id']}-hunt.log")
    if not report.is_file():  # a side that did not load may leave no report
        return {"exit": rc, "wall_s": round(wall, 1), "load": load, "findings": [], "detected": False,
                "properties": {}, "examples": 0, "error": "no report (see the log)"}
    rep = json.loads(report.read_text())
    h = rep.get("hunt") or {}
    findings = [f"{f['property']} {f.get('classification') or ''}: {f['message'][:90]}" for f in h.get("findings", [])]
    props = {p["property"]: p["status"] for p in h.get("properties", [])}
    load_errors = _load_errors(rep)
    return {"exit": rc, "wall_s": round(wall, 1), "load": load, "findings": findings, "detected": bool(findings),
            "properties": props, "examples": h.get("examples", 0), "load_errors": load_errors}


def _cell(found: bool, what: list[str]) -> str:
    return ("YES " + "; ".join(what)) if found else "no"


def table(rows: list[dict]) -> str:
    lines = [f"{'entry':30} {'catalog':7} {'hunt':5} {'cat s':>6} {'hunt s':>6} {'load':>5}"]
    for r in rows:
        c, h = r["catalog"], r["hunt"]
        lines.append(f"{r['id']:30} {'YES' if c['detected'] else 'no':7} {'YES' if h['detected'] else 'no':5} "
                     f"{c['wall_s']:6.1f} {h['wall_s']:6.1f} {h['load']:5.1f}")
        lines.append(f"    catalog: {_cell(c['detected'], c['flips'])}  (decided base {c['ran']['base']}, "
                     f"head {c['ran']['head']} of {c['scenarios']}; exit {c['exit']})"
                     + (f"  load errors: {c['load_errors']}" if c["load_errors"] else ""))
        lines.append(f"    hunt: {_cell(h['detected'], h['findings'])}  ({h['examples']} examples; "
                     f"{', '.join(f'{k}={v}' for k, v in h['properties'].items())}; exit {h['exit']})"
                     + (f"  load errors: {h.get('load_errors')}" if h.get("load_errors") else ""))
    n = len(rows)
    cat = sum(r["catalog"]["detected"] for r in rows)
    hun = sum(r["hunt"]["detected"] for r in rows)
    either = sum(r["catalog"]["detected"] or r["hunt"]["detected"] for r in rows)
    lines.append(f"detected: catalog {cat}/{n}, hunt {hun}/{n}, either {either}/{n}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default=str(HERE / "heldout.yaml"), help="the held-out set (YAML)")
    ap.add_argument("--only", nargs="*", default=None, help="entry ids to run (default: all)")
    ap.add_argument("--catalog", default="scenarios/", help="the catalog compared (default scenarios/)")
    ap.add_argument("--time", type=float, default=30.0, help="hunt: seconds of search per entry")
    ap.add_argument("--max-examples", type=int, default=300, help="hunt: examples per property")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shrink-time", type=float, default=10.0, help="hunt: seconds of shrinking per finding")
    ap.add_argument("--out", default=None, help="folder for the raw JSON reports (default: a temp dir)")
    args = ap.parse_args()

    entries = yaml.safe_load(Path(args.set).read_text())["entries"]
    if args.only:
        unknown = set(args.only) - {e["id"] for e in entries}
        if unknown:
            sys.exit(f"bench_heldout: no such entry: {sorted(unknown)}")
        entries = [e for e in entries if e["id"] in args.only]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="heldout-"))
    out.mkdir(parents=True, exist_ok=True)
    shown = Path(args.set).resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    print(f"held-out set {shown}: {len(entries)} entries; hunt --time {args.time} --max-examples "
          f"{args.max_examples} --seed {args.seed} --shrink-time {args.shrink_time}; load {_load()}; raw JSON in {out}",
          flush=True)
    t0 = time.perf_counter()
    rows = []
    for e in entries:
        repo = _repo(e["target"])
        row = {"id": e["id"], "target": e["target"], "parent": e["parent"], "fix": e["fix"],
               "catalog": catalog(e, repo, out, args.catalog), "hunt": hunt(e, repo, out, args)}
        rows.append(row)
        print(f"  {e['id']}: catalog {'YES' if row['catalog']['detected'] else 'no'}, "
              f"hunt {'YES' if row['hunt']['detected'] else 'no'}", flush=True)
    total = time.perf_counter() - t0
    (out / "summary.json").write_text(json.dumps({"rows": rows, "wall_s": round(total, 1), "args": vars(args)},
                                                 indent=1))
    print(table(rows))
    print(f"total wall {total:.0f} s, load {_load()}")


if __name__ == "__main__":
    main()
