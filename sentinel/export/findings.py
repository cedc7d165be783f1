"""`sentinel findings`: the local bug database, from the catalog's findings and seeds, the
reports already on disk and the export bundles under reports/export/ (bundle.json)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from ..catalog import catalog_path
from ..errors import SentinelError
from ..spec import load_file
from ..zygote import module_command

URL = re.compile(r"https?://\S+")


def catalog() -> list[Any]:
    root = Path(catalog_path())
    out = []
    for folder in ("seeds", "findings"):
        for f in sorted((root / folder).glob("*.yaml")):
            out.extend(load_file(f))
    return out


def cached_verdicts(folders: tuple[str, ...] = ("reports",)) -> dict[str, list[dict[str, Any]]]:
    """scenario id -> [{target, version, verdict, report}] from every JSON report on disk."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for folder in folders:
        for f in sorted(Path(folder).rglob("*.json")) if Path(folder).is_dir() else []:
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict) or not isinstance(data.get("results"), list):
                continue
            _add(seen, data, str(f))
    return seen


def _add(seen: dict[str, list[dict[str, Any]]], data: dict[str, Any], report: str) -> None:
    """A run report's verdicts (its results name the scenario by `id`)."""
    tinfo = data.get("targets") or {}
    for r in data["results"]:
        sid = r.get("id") if isinstance(r, dict) else None
        if not sid:
            continue
        t = tinfo.get(r.get("target"), {}) if isinstance(tinfo, dict) else {}
        version = (t.get("commit") or "")[:12] or t.get("version") or ""
        seen.setdefault(sid, []).append({"target": r.get("target"), "version": version,
                                         "verdict": r.get("verdict"), "report": report})


def run_now(target: str, repo: str | None, commit: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The verdicts of the seeds and findings on `target` now: one `sentinel run` (a subprocess,
    as the CLI runs it) over the catalog's seeds/ and findings/."""
    root = Path(catalog_path())
    cmd = [*module_command("sentinel"), "run", str(root / "seeds"), str(root / "findings"), "-t", target, "--json"]
    cmd += ["--repo", repo] if repo else []
    cmd += ["--commit", commit] if commit else []
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise SentinelError(f"sentinel run on {target} failed: {(proc.stderr or proc.stdout).strip()[-800:]}") from None
    seen: dict[str, list[dict[str, Any]]] = {}
    _add(seen, data, f"run now ({target})")
    return seen


def bundles(root: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in sorted(root.rglob("bundle.json")) if root.is_dir() else []:
        try:
            b = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        out.setdefault(b.get("scenario"), []).append({"folder": str(f.parent), "target": b.get("target"),
                                                      "document": b.get("document")})
    return out


def database(target: str | None, bundle_root: Path, fresh: dict[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    cached = fresh if fresh is not None else cached_verdicts()
    made = bundles(bundle_root)
    rows = []
    for sc in catalog():
        seen = [v for v in cached.get(sc.id, []) if target is None or (v["target"] or "").split("@")[0].split("+")[0] == target]
        prov = [str(p) for p in sc.provenance]
        rows.append({"id": sc.id, "boundary": sc.boundary, "title": sc.title or "",
                     "reproduces": sorted({f"{v['target']} {v['version']}".strip() for v in seen if v["verdict"] == "violated"}),
                     "holds": sorted({f"{v['target']} {v['version']}".strip() for v in seen if v["verdict"] == "holds"}),
                     "provenance": prov, "links": [u for p in prov for u in URL.findall(p)],
                     "bundles": made.get(sc.id, [])})
    return rows
