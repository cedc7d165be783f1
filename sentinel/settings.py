"""`[tool.sentinel]` in the nearest pyproject.toml: a repository's own defaults for the CLI.

    [tool.sentinel]
    target = "mytrainer_adapter:MyAdapter"   # --target
    repo = "."                                # --repo (relative to this pyproject.toml)
    paths = ["scenarios", "more/scenarios"]   # scenario files or folders (run, gate, compare)
    timeout = 120                             # --timeout, seconds
    device = "cpu"                            # --device: cpu, cuda or auto
    output = "reports"                        # the folder reports go to (--output FOLDER/latest.json)

A flag on the command line wins over a setting; a setting wins over the built-in default.
They reach the commands as Click's `default_map`, so `--help` shows them as the defaults.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: Optional[str] = None
    repo: Optional[str] = None
    paths: Optional[list[str]] = None
    timeout: Optional[float] = Field(None, gt=0)
    device: Optional[Literal["cpu", "cuda", "auto"]] = None
    output: Optional[str] = None


# which command takes which setting, under the parameter name the command gives it
_COMMANDS = {
    "run": ("target", "repo", "paths", "timeout", "device", "output"),
    "gate": ("target", "repo", "paths", "timeout", "device", "output"),
    "compare": ("target", "repo", "paths", "timeout", "device", "output"),
    "bisect": ("target", "repo", "timeout", "device"),
    "hunt": ("target", "repo", "device"),
}


def find(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above `start` (the working folder) with a [tool.sentinel] table."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and re.search(r"^\s*\[tool\.sentinel\]", candidate.read_text(errors="replace"), re.M):
            return candidate
    return None


def _line(text: str, key: str) -> int | None:
    """The line of `key = ...` inside [tool.sentinel] (tomllib gives values, not lines)."""
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("["):
            inside = line.strip() == "[tool.sentinel]"
        elif inside and re.match(rf"\s*{re.escape(key)}\s*=", line):
            return n
    return None


def load(path: Path) -> Settings:
    """The [tool.sentinel] table of `path`, relative paths resolved against its folder;
    UsageError naming file, line and key for anything wrong."""
    text = path.read_text(errors="replace")
    try:
        table = tomllib.loads(text).get("tool", {}).get("sentinel", {})
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: {e}") from None
    if isinstance(table.get("paths"), str):
        table["paths"] = [table["paths"]]
    try:
        settings = Settings.model_validate(table)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            key = str(err["loc"][0]) if err["loc"] else ""
            line = _line(text, key)
            what = "not a setting (known: " + ", ".join(Settings.model_fields) + ")" \
                if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{path}{f':{line}' if line else ''}: [tool.sentinel] {key}: {what}")
        raise UsageError("\n".join(problems)) from None
    base = path.parent
    def rebase(p: str) -> str:  # relative to the pyproject's folder; shown relative to the working one
        full = Path(p) if Path(p).is_absolute() else (base / p).resolve()
        try:
            return str(full.relative_to(Path.cwd().resolve())) or "."
        except ValueError:
            return str(full)
    return settings.model_copy(update={
        "repo": rebase(settings.repo) if settings.repo else None,
        "paths": [rebase(p) for p in settings.paths] if settings.paths else None,
        "output": rebase(settings.output) if settings.output else None,
    })


def default_map(start: Path | None = None) -> dict[str, dict[str, Any]]:
    """{command: {parameter: default}} for Click, from the nearest [tool.sentinel]; {} without one."""
    path = find(start)
    if path is None:
        return {}
    s = load(path)
    values = {"target": s.target, "repo": s.repo, "paths": s.paths, "timeout": s.timeout, "device": s.device,
              "output": str(Path(s.output) / "latest.json") if s.output else None}
    out = {cmd: {k: values[k] for k in keys if values[k] is not None} for cmd, keys in _COMMANDS.items()}
    if s.target or s.repo:  # `sentinel init ci` writes the same choices into the workflow
        out["init"] = {"ci": {k: v for k, v in (("target", [s.target] if s.target else None),
                                                 ("repo_path", _relative(s.repo))) if v}}
    return {cmd: v for cmd, v in out.items() if v}


def _relative(repo: str | None) -> str | None:
    return None if repo is None or Path(repo).is_absolute() else repo  # the workflow takes a path inside the repo
