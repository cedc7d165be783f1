"""The CI files RL-Sentinel offers users work as written: the GitHub workflow's own commands
run here, and the pre-commit hook rejects a bad scenario file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from sentinel import scaffold
from sentinel.catalog import catalog_path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BAD = "id: bad\ntitle: bad\nboundary: loss_agg\nconfig: {mode: seq-mean-tokn-mean}\ninputs:\n  values: [[1.0]]\n" \
      "  loss_mask: [[1]]\ninvariants:\n  - finite: {}\n"


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_workflow_commands_run_locally(tmp_path):
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "kl.yaml").write_text((catalog_path() / "kl" / "kl-estimators.yaml").read_text())
    p = subprocess.run([str(BIN / "sentinel"), "init", "ci"], cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    workflow = yaml.safe_load((tmp_path / scaffold.GITHUB_WORKFLOW).read_text())
    steps = {s.get("name"): s for s in workflow["jobs"]["gate"]["steps"]}
    summary = tmp_path / "summary.md"
    for name in ("Gate", "Job summary"):  # installing is the runner's business; these are ours
        p = subprocess.run(["bash", "-ec", steps[name]["run"]], cwd=tmp_path, capture_output=True, text=True,
                           env={**_env(), "GITHUB_STEP_SUMMARY": str(summary)}, timeout=180)
        assert p.returncode == 0, (name, p.stderr)
    uploaded = steps["Upload the report"]["with"]["path"].split()
    assert all((tmp_path / f).exists() for f in uploaded), uploaded
    assert summary.read_text().startswith("## RL-Sentinel PASS")
    # a second init refuses to overwrite
    p = subprocess.run([str(BIN / "sentinel"), "init", "ci"], cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert p.returncode == 2 and "--force" in p.stderr


def test_pre_commit_hook_rejects_a_bad_scenario(tmp_path):
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    files = re.compile(hook["files"])
    assert files.search("scenarios/seeds/x.yaml") and files.search("pkg/scenarios/a/b.yml")
    assert not files.search("config/train.yaml")
    (tmp_path / "scenarios").mkdir()
    good = tmp_path / "scenarios" / "kl.yaml"
    good.write_text((catalog_path() / "kl" / "kl-estimators.yaml").read_text())
    run = lambda *f: subprocess.run(f"{hook['entry']} {' '.join(f)}", shell=True, cwd=tmp_path, env=_env(),  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    assert run("scenarios/kl.yaml").returncode == 0
    (tmp_path / "scenarios" / "bad.yaml").write_text(BAD)
    p = run("scenarios/kl.yaml", "scenarios/bad.yaml")
    assert p.returncode == 2 and "scenarios/bad.yaml:4: config.mode" in p.stderr, p.stderr


def test_new_adapter_template_runs_as_written(tmp_path):
    """`sentinel new adapter` writes an adapter and a test that pass as written, from the folder
    a user would run them in."""
    p = subprocess.run([str(BIN / "sentinel"), "new", "adapter", "my-trainer"], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["my_trainer_adapter.py", "test_my_trainer_adapter.py"]
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_trainer_adapter.py"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    assert test.returncode == 0, test.stdout + test.stderr
    kl = catalog_path() / "kl" / "kl-estimators.yaml"
    run = subprocess.run([str(BIN / "sentinel"), "run", str(kl), "--target", "my_trainer_adapter:MyTrainerAdapter",
                          "-o", "-"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and "kl-k1" in run.stdout and "holds" in run.stdout, run.stdout + run.stderr
    again = subprocess.run([str(BIN / "sentinel"), "new", "adapter", "my-trainer"], cwd=tmp_path, env=_env(),
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "--force" in again.stderr
