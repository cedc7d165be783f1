"""Where the bundled scenario catalog lives (inside the wheel as `sentinel_catalog`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def catalog_path() -> Path:
    return Path(str(resources.files("sentinel_catalog")))
