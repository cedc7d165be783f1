"""`sentinel report --format markdown`: a pull-request section that leads with the verdict and
the violations, shows per-token grids as tables, links sources to the exact commit, and shows
no path of this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from report_fakes import checkout, compare_report, errored, holds, report, violated

from sentinel.catalog import catalog_path
from render_helpers import markdown, report_command
from sentinel.report import FunctionInfo, Target
from sentinel.spec import load_paths

REPO = Path(__file__).resolve().parents[1]
SENTINEL = Path(sys.executable).with_name("sentinel")


@pytest.fixture(scope="module")
def plant(plant_gate):
    """The gate on the OPSM planted bug: the catalog holds but for opsm-mixed-advantage (the
    session's run, conftest.plant_gate)."""
    p, path = plant_gate
    assert p.returncode == 1, p.stderr
    return path


def test_plant_markdown_starts_with_the_violation_and_its_grid(plant):
    done = report_command(plant, "--format", "markdown")
    assert done.exit_code == 1  # the report holds a violation: `sentinel report` exits with its code
    md = done.stdout
    lines = md.splitlines()
    # the rest of the catalog holds (scenarios written for other targets are not run on the reference)
    held = len([sc for sc in load_paths([catalog_path()]) if sc.applies_to("reference")]) - 1
    assert lines[0] == f"## RL-Sentinel FAIL: `opsm-mixed-advantage` violated · {held} hold"
    sections = [ln for ln in lines if ln.startswith("### ")]
    assert sections == ["### `opsm-mixed-advantage` violated: OPSM rejects a whole off-policy sequence, not some of its tokens"]
    # the per-token grid is a markdown table: rows are sequences, the offending cell in bold with the expected value
    grid = lines.index("| row | t0 | t1 | t2 |")
    assert lines[grid + 1] == "|---:|---:|---:|---:|"
    assert lines[grid + 2] == "| 0 | 0 | **1** ≠ 0 | 0 |"
    # holds are collapsed, after the violation; the target is described once
    assert md.index(f"<details><summary>{held} hold</summary>") > grid
    assert md.count("planted bug opsm-token-level") == 1
    # scalars read as values, not as positions [[]]
    assert "observed `-0.030656620860099792`, expected `0.0`" in md
    assert "[[]]" not in md and "positions" not in md
    # no path of this machine: the scenario file is relative, the report file named by its name only
    assert str(REPO) not in md and str(plant.parent) not in md
    assert "`scenarios/seeds/opsm-mixed-advantage.yaml`" in md
    assert "sentinel gate --plant opsm-token-level -o plant.json" in md


def test_masked_cells_show_as_masked():
    md = markdown(report([violated()]))
    assert "| row | t0 | t1 | t2 |" in md
    assert "| 0 | 0 | **1** ≠ 0 | · |" in md  # loss_mask[0][2] == 0
    assert "| 1 | 1 | **-1** ≠ 1 | 0.25 |" in md
    assert "`·`: masked, loss_mask 0" in md


def test_a_checkout_run_links_sources_to_the_commit_and_leaks_no_local_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repo, sha = checkout(tmp_path)
    fn = FunctionInfo(module="slime.utils.ppo_utils", qualname="compute_opsm_mask", file="slime/utils/ppo_utils.py",
                      line=1, also=[FunctionInfo(module="torch", qualname="where", file="/opt/elsewhere/torch/functional.py")])
    worktree = f"/tmp/sentinel-wt-abc/{sha[:12]}/slime/utils/ppo_utils.py"
    results = [violated(file=str(repo / "scenarios" / "opsm.yaml"), function=fn),
               errored("raises", f"boom in {repo}/slime/x.py and {worktree} and /home/alice/.cache/y.py"),
               holds("kl-k1")]
    rep = report(results, {"slime": Target(name="slime", repo=str(repo), commit=sha, subject="opsm")},
                 command=["sentinel", "run", str(repo / "scenarios"), "--repo", str(repo), "-o", "/home/alice/r.json"])
    md = markdown(rep, source="/home/alice/r.json")
    assert str(tmp_path) not in md and "/home/alice" not in md and "/opt/elsewhere" not in md and "/tmp/" not in md
    assert f"([slime/utils/ppo_utils.py:1](https://github.com/THUDM/slime/blob/{sha}/slime/utils/ppo_utils.py#L1))" in md
    assert f"[`{sha[:10]}`](https://github.com/THUDM/slime/commit/{sha})" in md
    assert "`scenarios/opsm.yaml`" in md
    assert "boom in slime/x.py and slime/utils/ppo_utils.py and …/y.py" in md
    assert "; also `torch.where`" in md  # a file outside every root is not shown
    # reproduce: each path relative to where the command ran (and there), the commit that ran pinned
    line = f"sentinel run {repo.relative_to(tmp_path)}/scenarios --repo {repo.relative_to(tmp_path)} -o r.json --commit {sha}"
    assert line in md and (tmp_path / repo.relative_to(tmp_path)).is_dir()
    # violations first, then errors, then the holds collapsed
    assert md.index("### `opsm-masked`") < md.index("### `raises`") < md.index("<details><summary>1 hold</summary>")


def test_a_remote_elsewhere_gives_plain_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repo, sha = checkout(tmp_path, remote="https://gitlab.com/THUDM/slime.git")
    fn = FunctionInfo(module="slime.utils.ppo_utils", qualname="compute_opsm_mask", file="slime/utils/ppo_utils.py", line=1)
    md = markdown(report([violated(function=fn)], {"slime": Target(name="slime", repo=str(repo), commit=sha)}))
    assert "(`slime/utils/ppo_utils.py:1`)" in md and "https://gitlab" not in md and "/blob/" not in md


def test_compare_leads_with_the_compare_verdicts():
    md = markdown(compare_report())
    first, *rest = md.splitlines()
    assert first == "## RL-Sentinel compare FAIL: `kl-k2` regressed · `opsm-masked` fixed · 1 holds-both"
    table = md.index("| scenario | base | head | compare |")
    assert table < md.index("### ")
    assert md.index("| `kl-k2` | holds | violated | **regressed** |") < md.index("| `opsm-masked` | violated | holds | **fixed** |")
    assert "<details><summary>1 hold on both</summary>" in md
    assert "- **base**: slime aaaaaaaaaa (buggy)" in md  # each target described once, in the header
    assert md.index("### `kl-k2` regressed (base holds, head violated)") < md.index("### `opsm-masked` fixed")
    assert "#### on **head**: violated" in md
    assert "hold</summary>" not in md  # what holds on both is in the compare table only


def test_the_markdown_fits_a_pull_request_comment():
    rep = report([violated(f"v{i}", title="x" * 2000) for i in range(80)], command=["sentinel", "gate"])
    md = markdown(rep, source="reports/latest.json", limit=60_000)
    assert len(md.encode()) <= 60_000
    assert "more section(s) are in the full report (`sentinel report reports/latest.json`)" in md
    assert md.rstrip().endswith("```") and "sentinel gate" in md  # the reproduce block survives the cut




def test_a_relational_family_names_its_two_runs_not_an_expectation(tmp_path):
    """masked_invariance compares a run with perturbed masked values against the base run: its
    values are the "variant run" and the "base run", never an "expected" value."""
    out = tmp_path / "r.json"
    p = subprocess.run([str(SENTINEL), "run", str(REPO / "scenarios" / "kl" / "gspo-seq-kl.yaml"), "--plant",
                        "masked-kl-leak", "-o", str(out)], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 1, p.stderr
    assert "variant run" in p.stdout and "base run" in p.stdout
    md = report_command(out, "--format", "markdown").stdout
    line = next(x for x in md.splitlines() if "masked_invariance" in x and "changed" in x)
    assert "≠ base run" in md and "expected" not in line
    html = tmp_path / "r.html"
    report_command(out, "--format", "html", "-o", str(html))
    assert "variant run <code>masked_invariance</code>" in html.read_text() and "base run <code>" in html.read_text()
