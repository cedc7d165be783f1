"""`sentinel findings`: the local bug database, from the catalog's findings and seeds, the
reports already on disk and the export bundles under reports/export/ (bundle.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..catalog import catalog_path
from ..spec import load_file

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
            tinfo = data.get("targets") or {}
            for r in data["results"]:
                if not isinstance(r, dict) or "scenario" not in r:
                    continue
                t = tinfo.get(r.get("target"), {}) if isinstance(tinfo, dict) else {}
                version = (t.get("commit") or "")[:12] or t.get("version") or ""
                seen.setdefault(r["scenario"], []).append({"target": r.get("target"), "version": version,
                                                           "verdict": r.get("verdict"), "report": str(f)})
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
