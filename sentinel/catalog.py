"""Where scenario catalogs live, and how their files are named in reports.

The bundled catalog is installed inside the wheel as `sentinel_catalog` (the repository's
`scenarios/` folder). A repository that keeps its own `./scenarios` gets that one from
`sentinel gate`, so a scenario added there is gated at once.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED_NAME = "scenarios"  # what the bundled catalog is called in the source repository


def catalog_path() -> Path:
    """The bundled catalog."""
    return Path(str(resources.files("sentinel_catalog")))


def local_catalog(cwd: Path | None = None) -> Path | None:
    """`./scenarios` when it holds scenario files, else None."""
    p = (cwd or Path.cwd()) / "scenarios"
    if p.is_dir() and any(p.rglob("*.yaml")):
        return p
    return None


def display_path(path: str | Path) -> str:
    """How a scenario file is named in every output: relative to the working directory when
    inside it, `scenarios/...` for the bundled catalog (its place in the source repository),
    else as given. Never an absolute path into site-packages."""
    p = Path(path)
    if not p.is_absolute():
        return str(path)
    resolved = p.resolve()
    for root, prefix in ((Path.cwd().resolve(), ""), (catalog_path().resolve(), BUNDLED_NAME)):
        try:
            rel = resolved.relative_to(root)
        except ValueError:
            continue
        return str(Path(prefix) / rel) if prefix else str(rel)
    return str(path)
