"""The wheel a release would publish: built from this checkout as `python -m build` does, it
carries every package folder under its installed name and the whole YAML catalog, and its
version comes from git (setuptools-scm), not from a number written in a file."""

from __future__ import annotations

import importlib.util
import subprocess
import zipfile
from pathlib import Path

import pytest

from checkout_copy import build_wheel

ROOT = Path(__file__).resolve().parents[1]


def _setup_py():
    spec = importlib.util.spec_from_file_location("sentinel_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("build")
    pytest.importorskip("setuptools_scm")
    out = tmp_path_factory.mktemp("dist")
    leftovers = [ROOT / "build", ROOT / "rl_sentinel.egg-info"]
    before = [p for p in leftovers if p.exists()]
    r = build_wheel(out, tmp_path_factory.mktemp("tree"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert [p for p in leftovers if p.exists()] == before, "the build wrote into this checkout"
    (whl,) = out.glob("*.whl")
    return whl


def test_wheel_carries_every_package_and_the_catalog(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for package, folder in _setup_py().packages(ROOT).items():
        init = package.replace(".", "/") + "/__init__.py"
        assert init in names, f"{folder} ({package}) is missing from {wheel.name}"
    catalog = sorted(p.relative_to(ROOT / "scenarios").as_posix() for p in (ROOT / "scenarios").rglob("*.yaml"))
    assert len(catalog) > 20
    missing = [c for c in catalog if f"sentinel_catalog/{c}" not in names]
    assert not missing, missing
    assert "sentinel/export/templates/" in "".join(sorted(names))  # package data beside code
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "adapters/", "scenarios/"))]


def test_wheel_version_comes_from_git(wheel):
    """Untagged: X.Y.devN+gHASH with HEAD's hash; on a tag vX.Y.Z: X.Y.Z (setuptools-scm)."""
    import re
    meta = zipfile.ZipFile(wheel).read(next(n for n in zipfile.ZipFile(wheel).namelist()
                                            if n.endswith(".dist-info/METADATA"))).decode()
    version = re.search(r"^Version: (\S+)$", meta, re.M).group(1)
    assert wheel.name.split("-")[1] == version
    git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()
    head, tag = git("rev-parse", "HEAD"), git("describe", "--tags", "--exact-match", "HEAD")
    if tag and not git("status", "--porcelain", "--untracked-files=no"):
        assert version == tag.lstrip("v")
    else:
        commit = re.search(r"\+g([0-9a-f]{7,})", version)
        assert commit and head.startswith(commit.group(1)), version
