"""Running a bundle's validate.py and unit test on one side (the trainer at a revision, or
with a patch applied), each in its own subprocess, in a temporary worktree that is removed
afterwards; the user's checkout is never written to."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .. import git


@dataclass
class Side:
    """What one side gave: validate.py's JSON and exit code, the unit test's command and outcome."""

    label: str
    revision: str | None
    validate_rc: int | None = None
    validate: dict[str, Any] = field(default_factory=dict)
    test_rc: int | None = None
    test_command: str = ""
    test_output: str = ""
    validate_command: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class PatchError(git.GitError):
    pass


@contextmanager
def tree(repo: str | None, rev: str | None, patch: str | None = None) -> Iterator[tuple[Path | None, str | None]]:
    """(folder to import the trainer from, commit): a temporary worktree of `repo` at `rev`
    (HEAD when None), with `patch` applied when given; (None, None) for an installed package."""
    if not repo:
        yield None, None
        return
    with git.checkout(Path(repo), rev or "HEAD", private=True) as co:  # the patch is written there
        if patch is not None:
            proc = subprocess.run(["git", "-C", str(co.path), "apply", "--whitespace=nowarn", "-"], input=patch,
                                  text=True, capture_output=True)
            if proc.returncode:
                raise PatchError(f"the patch does not apply at {co.commit[:12]}: {proc.stderr.strip()}")
        yield co.path, co.commit


def run_side(label: str, bundle: Path, test_name: str, repo: str | None, rev: str | None, patch: str | None,
             timeout: float = 300.0) -> Side:
    with tree(repo, rev, patch) as (path, commit):
        side = Side(label, commit)
        where = str(path) if path else ""
        cmd = [sys.executable, str(bundle / "validate.py"), where]
        side.validate_command = f"python validate.py {'TRAINER_CHECKOUT' if path else ''}".strip()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        side.validate_rc = proc.returncode
        try:
            side.validate = json.loads(proc.stdout)
        except json.JSONDecodeError:
            side.validate = {"status": "error", "error": (proc.stderr or proc.stdout).strip()[-2000:]}
        tmp = None
        if path is None:  # an installed package: a scratch folder stands in for the checkout
            tmp = Path(tempfile.mkdtemp(prefix="sentinel-export-"))
            path = tmp
        try:
            tests = path / "tests"
            tests.mkdir(exist_ok=True)
            shutil.copy(bundle / test_name, tests / test_name)
            args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-o", "addopts=",
                    f"tests/{test_name}"]
            side.test_command = "python " + " ".join(args)
            env = {**__import__("os").environ, "TRAINER_REPO": where}
            proc = subprocess.run([sys.executable, *args], cwd=path, capture_output=True, text=True, timeout=timeout,
                                  env=env)
            side.test_rc = proc.returncode
            side.test_output = _tail(proc.stdout + proc.stderr)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        return side


def _tail(text: str, lines: int = 12) -> str:
    keep = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(keep[-lines:])
