"""The mutant cache: one JSON file per judged mutant, so a killed run resumes and a re-run of
an unchanged target judges nothing again.

Keyed by the target, its commit, the function's source hash, the operator, the mutant's
key, the catalog's hash, the hunt's budget and seed, the tool and adapter versions
(`history.cache`'s) and the code that judges a mutant (this engine, the mutants' code and reach
marker, the hunt, the drawing):
a change to any makes old entries unreachable, never wrong. A
transient record (a worker that died, a hunt that could not run) is not stored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..history.cache import hash_files, adapter_version, scenario_hash, tool_version
from ..report import write_atomic
from ..spec import Scenario

DEFAULT_DIR = Path(".sentinel") / "mutate-cache"
_HERE = Path(__file__).resolve().parent
JUDGE_CODE = (*(_HERE / f for f in ("engine.py", "mutants.py", "apply.py", "reach.py")), _HERE.parent / "hunt",
              _HERE.parent / "strategies.py")


def catalog_hash(scenarios: list[Scenario]) -> str:
    return hashlib.sha256("".join(sorted(scenario_hash(sc) for sc in scenarios)).encode()).hexdigest()[:16]


class Cache:
    def __init__(self, root: Path | None, target: str, adapter: str, commit: str, catalog: str, budget: Any,
                 seed: int, device: str = "cpu"):
        self.root = Path(root) if root else None
        self.target, self.commit = target, commit
        self.fixed = [target, commit, catalog, budget, seed, device, tool_version(), adapter_version(adapter),
                      hash_files(list(JUDGE_CODE))]

    def _path(self, m: dict[str, Any]) -> Path:
        key = json.dumps([*self.fixed, m["function_hash"], m["function"], m["operator"], m["key"]])
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.target)
        return self.root / safe / (self.commit or "-")[:16] / f"{digest}.json"

    def get(self, m: dict[str, Any]) -> dict[str, Any] | None:
        if self.root is None:
            return None
        try:
            rec = json.loads(self._path(m).read_text())
        except (OSError, ValueError):  # absent, or cut short by a kill: judge it again
            return None
        return rec if "reached" in rec else None  # made before reach was measured: judge it again

    def put(self, m: dict[str, Any], record: dict[str, Any]) -> None:
        if self.root is None or record.get("transient"):
            return
        write_atomic(self._path(m), json.dumps(record))
