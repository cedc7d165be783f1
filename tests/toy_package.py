"""A toy trainer and its adapter package, written to a folder and registered as a target through a
distribution's entry point, on the path of this process and of the CLI's (the tests of a
third-party target)."""

from __future__ import annotations

import os
from pathlib import Path

from sentinel import targets


def install(folder: Path, monkeypatch, packages: dict[str, dict[str, str]], dist: str, entry: str) -> Path:
    """`packages` (name -> file name -> text) under `folder`, and the metadata of distribution `dist`
    (`name-version`) registering `entry` (`target = module:Class`); the registry forgets what it found."""
    for pkg, files in packages.items():
        (folder / pkg).mkdir()
        (folder / pkg / "__init__.py").write_text("")
        for name, text in files.items():
            (folder / pkg / name).write_text(text)
    info = folder / f"{dist}.dist-info"
    info.mkdir()
    name, version = dist.rsplit("-", 1)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[rl_sentinel.targets]\n{entry}\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    targets.registry.cache_clear()
    return folder
