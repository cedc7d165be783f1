"""The result cache: one JSON file per (target, commit, scenario), so a scan that is killed
resumes where it stopped and a re-scan of an unchanged range runs nothing.

An entry is keyed by the target, the commit, the scenario's content, the tool (its version
and the code that decides a verdict) and the adapter (its source): editing any of them makes
old entries unreachable instead of wrong. Transient failures (a timeout, a worker that died)
are not stored, so the next scan tries them again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..report import ScenarioResult, Target, write_atomic
from ..spec import Scenario

DEFAULT_DIR = Path(".sentinel") / "history-cache"
TRANSIENT = ("Timeout", "WorkerDied")
# the harness code that turns a target's answer into a verdict
_TOOL_CODE = ("runner.py", "worker.py", "observe.py", "contracts.py", "verdicts.py", "boundaries.py", "spec.py",
              "expr.py", "tensors.py", "invariants")


def hash_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            if f.is_file():
                h.update(f.name.encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def tool_version() -> str:
    here = Path(__file__).resolve().parent.parent
    return f"{__version__}+{hash_files([here / n for n in _TOOL_CODE])}"


def adapter_version(adapter: str) -> str:
    """A hash of the adapter's source (the package that holds it, or its lone module) and the
    adapter framework (sentinel/adapters/), found without importing it."""
    module = adapter.split(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return "unknown"
    origin = Path(spec.origin)
    own = origin.parent if origin.name == "__init__.py" or "." in module else origin
    return hash_files([own, Path(__file__).resolve().parents[1] / "adapters"])


def scenario_hash(sc: Scenario) -> str:
    return hashlib.sha256(json.dumps(sc.raw, sort_keys=True, default=repr).encode()).hexdigest()[:16]


@dataclass
class Entry:
    result: ScenarioResult
    target: Target
    environment: dict[str, Any]


class Cache:
    def __init__(self, root: Path | None, target: str, adapter: str, device: str = "cpu"):
        self.root = Path(root) if root else None
        self.target, self.device = target, device
        self.tool, self.adapter = tool_version(), adapter_version(adapter)

    def _path(self, commit: str, sc: Scenario) -> Path:
        key = json.dumps([self.target, commit, scenario_hash(sc), self.tool, self.adapter, self.device])
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.target)
        return self.root / safe / commit / f"{sc.id}-{digest}.json"

    def get(self, commit: str, sc: Scenario) -> Entry | None:
        if self.root is None:
            return None
        try:
            d = json.loads(self._path(commit, sc).read_text())
            return Entry(ScenarioResult.model_validate(d["result"]), Target.model_validate(d["target"]),
                         d.get("environment", {}))
        except (OSError, ValueError, KeyError):  # absent, or cut short by a kill: evaluate again
            return None

    def put(self, commit: str, sc: Scenario, entry: Entry) -> None:
        if self.root is None or (entry.result.exception_info and entry.result.exception_info.type in TRANSIENT):
            return
        write_atomic(self._path(commit, sc), json.dumps(
            {"result": json.loads(entry.result.model_dump_json()), "target": json.loads(entry.target.model_dump_json()),
             "environment": entry.environment}))
