"""This checkout as it stands, copied where a build may write: setuptools writes build/ and
rl_sentinel.egg-info beside setup.py, and written into the checkout they were read as an
installed rl-sentinel by a test running meanwhile on the other pytest worker (test_ci_files),
and stayed behind after the run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_copy(dest: Path) -> Path:
    """HEAD plus uncommitted and untracked files (ignored ones left out), in a clone of its own:
    setuptools-scm reads the version from the clone's git as from the checkout's."""
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(dest)], check=True, timeout=120)
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src, dst = ROOT / rel, dest / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif dst.is_file():  # deleted here, not yet committed
            dst.unlink()
    return dest


def build_wheel(outdir: Path, scratch: Path) -> subprocess.CompletedProcess:
    """`python -m build --wheel` of a copy of this checkout (in `scratch`), the wheel in `outdir`.
    --no-isolation: the test extra's setuptools and setuptools-scm, no download."""
    tree = tree_copy(scratch / "rl-sentinel")
    return subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir),
                           str(tree)], capture_output=True, text=True, timeout=300)
