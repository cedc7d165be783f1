"""The `sentinel` command: exit codes, report files, renderers, listings, schemas, help.

Commands that run target code go through the real console script in a subprocess (several
at once, to keep the suite fast); the rest use Typer's CliRunner on `sentinel.cli.app`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import typer
from typer.testing import CliRunner

from sentinel import __version__
from sentinel.catalog import catalog_path
from sentinel.cli import app
from sentinel.report import Report, json_schema, load, schema_text, write_atomic

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SEED = catalog_path() / "seeds" / "opsm-mixed-advantage.yaml"
SENTINEL = str(Path(sys.executable).with_name("sentinel")) if Path(sys.executable).with_name("sentinel").exists() \
    else shutil.which("sentinel")

BAD_SCENARIO = """\
id: bad
title: a scenario with a wrong boundary
boundary: opsm_masks
inputs:
  log_probs: [[0.0]]
invariants:
  - unmutated: {}
"""

FAULTY_SCENARIO = """\
id: faulty-raise
title: the target raises
boundary: loss_agg
inputs:
  values:    [[1.0, 2.0, 101.0]]   # 101 at the masked position: faulty_adapter's code for "raise"
  loss_mask: [[1, 1, 0]]
invariants:
  - close: {output: loss, expected: 1.5}
"""

# faulty_adapter's code at the masked position: 109 declines the call (Unsupported), 100 answers right
UNSUPPORTED_SCENARIO = FAULTY_SCENARIO.replace("faulty-raise", "faulty-unsupported").replace("101.0", "109.0")
OK_SCENARIO = FAULTY_SCENARIO.replace("faulty-raise", "faulty-ok").replace("101.0", "100.0")
# written for another target: `run`/`gate` leave it out on this one, and say so
ELSEWHERE_SCENARIO = OK_SCENARIO.replace("faulty-ok", "for-trl-only").replace("boundary:", "targets: [trl]\nboundary:")


def env() -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    e.pop("COLUMNS", None)
    return e


def cli(*args: str, runner: CliRunner | None = None):
    return (runner or CliRunner()).invoke(app, list(args), catch_exceptions=False)


def strip_timings(x):
    """A report without its wall-clock facts: created_at and every duration."""
    if isinstance(x, dict):
        return {k: strip_timings(v) for k, v in x.items() if k not in ("created_at", "duration_s", "import_s")}
    if isinstance(x, list):
        return [strip_timings(v) for v in x]
    return x


@pytest.fixture(scope="module")
def runs(tmp_path_factory, plant_gate):
    """The slow commands, started together and awaited together; the plant gate's run is the
    session's (conftest.plant_gate, read by test_markdown_report too), copied in as plant.json."""
    d = tmp_path_factory.mktemp("cli")
    (d / "bad.yaml").write_text(BAD_SCENARIO)
    (d / "faulty.yaml").write_text(FAULTY_SCENARIO)
    (d / "unsupported.yaml").write_text(UNSUPPORTED_SCENARIO)
    (d / "mixed").mkdir()
    (d / "mixed" / "unsupported.yaml").write_text(UNSUPPORTED_SCENARIO)
    (d / "mixed" / "ok.yaml").write_text(OK_SCENARIO)
    (d / "mixed" / "elsewhere.yaml").write_text(ELSEWHERE_SCENARIO)
    cmds = {
        "gate": ["gate", "-o", str(d / "gate.json"), "--junit", str(d / "gate.xml")],
        "bad": ["run", str(d / "bad.yaml"), "-o", str(d / "bad.json")],
        "faulty": ["run", str(d / "faulty.yaml"), "--target", "faulty_adapter:FaultyAdapter", "-o", str(d / "faulty.json")],
        "unsupported": ["run", str(d / "unsupported.yaml"), "--target", "faulty_adapter:FaultyAdapter",
                        "-o", str(d / "unsupported.json")],
        "mixed": ["gate", "--path", str(d / "mixed"), "--target", "faulty_adapter:FaultyAdapter", "-o", "-"],
        "json1": ["run", str(SEED), "--plant", "opsm-token-level", "--json", "-o", "-"],
        "json2": ["run", str(SEED), "--plant", "opsm-token-level", "--json", "-o", "-"],
    }
    procs = {k: subprocess.Popen([SENTINEL, *v], cwd=d, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for k, v in cmds.items()}
    done = {}
    for k, p in procs.items():
        out, err = p.communicate(timeout=300)
        done[k] = subprocess.CompletedProcess(cmds[k], p.returncode, out, err)
    done["plant"], plant = plant_gate
    shutil.copy(plant, d / "plant.json")
    return d, done


def test_gate_exits_0_and_writes_a_valid_report(runs):
    d, done = runs
    assert done["gate"].returncode == 0, done["gate"].stderr
    rep = json.loads((d / "gate.json").read_text())
    assert rep["success"] is True and rep["kind"] == "run"
    assert rep["statistics"]["violated"] == 0 and rep["statistics"]["errors"] == 0
    assert rep["statistics"]["holds"] == rep["statistics"]["evaluated"] > 0
    assert rep["command"][:2] == ["sentinel", "gate"]
    assert "report written to" in done["gate"].stderr
    # atomic: the rename left no temporary file beside the report, and no default report in cwd
    assert sorted(p.name for p in d.iterdir() if p.name.startswith(".")) == []
    assert not (d / "reports").exists() or not (d / "reports" / "latest.json").exists()
    suite = ET.parse(d / "gate.xml").getroot()
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) == rep["statistics"]["evaluated"]


def test_gate_report_matches_the_report_schema(runs):
    jsonschema = pytest.importorskip("jsonschema")
    d, _ = runs
    checked_in = REPO / "reports" / "report.schema.json"
    schema = json.loads(checked_in.read_text()) if checked_in.exists() else json_schema()
    for name in ("gate.json", "plant.json", "faulty.json"):
        jsonschema.validate(json.loads((d / name).read_text()), schema)
    Report.model_validate_json((d / "gate.json").read_text())


def test_checked_in_report_schema_is_current():
    checked_in = REPO / "reports" / "report.schema.json"
    if not checked_in.exists():
        pytest.skip("no checked-in report schema")
    assert json.loads(checked_in.read_text()) == json_schema(), "regenerate with `sentinel schema report -o ...`"


def test_gate_with_a_plant_exits_1(runs):
    d, done = runs
    assert done["plant"].returncode == 1, done["plant"].stderr
    rep = load(d / "plant.json")
    assert not rep.success
    violated = [r.id for r in rep.results if r.verdict == "violated"]
    assert violated == ["opsm-mixed-advantage"]
    assert "opsm-mixed-advantage" in done["plant"].stdout


def test_bad_scenario_exits_2_naming_file_and_line_without_a_report(runs):
    d, done = runs
    assert done["bad"].returncode == 2
    assert "error: bad.yaml:3:" in done["bad"].stderr  # relative to the working folder
    assert "opsm_masks" in done["bad"].stderr
    assert not (d / "bad.json").exists()
    assert not (d / "reports").exists()


def test_target_error_exits_3(runs):
    d, done = runs
    assert done["faulty"].returncode == 3, done["faulty"].stderr
    (r,) = load(d / "faulty.json").results
    assert r.verdict == "error" and r.exception_info.type == "ValueError"


def test_a_run_where_nothing_ran_exits_5_and_says_so(runs):
    """Every scenario unsupported: not a pass (exit 5, as pytest's "no tests collected"); the
    report re-rendered exits the same; one scenario that holds beside it is a pass."""
    d, done = runs
    p = done["unsupported"]
    assert p.returncode == 5, p.stdout + p.stderr
    assert "NOTHING RAN" in p.stdout and "every scenario is unsupported or excluded" in p.stdout
    (r,) = load(d / "unsupported.json").results
    assert r.verdict == "unsupported"
    again = cli("report", str(d / "unsupported.json"), "-f", "markdown")
    assert again.exit_code == 5 and again.stdout.startswith("## RL-Sentinel NOTHING RAN: 1 unsupported")
    assert "nothing ran" in again.stderr
    assert done["mixed"].returncode == 0, done["mixed"].stdout + done["mixed"].stderr
    assert "1 scenario(s) written for trl are not run on faulty_adapter:FaultyAdapter" in done["mixed"].stderr
    assert "for-trl-only" not in done["mixed"].stdout


def test_scenarios_written_only_for_other_targets_are_a_usage_error_that_names_them(tmp_path):
    """Not "nothing ran, every scenario unsupported" (exit 5): that reads as a target lacking
    the functions; the scenarios were never meant for it, so the command line is wrong."""
    (tmp_path / "elsewhere.yaml").write_text(ELSEWHERE_SCENARIO)
    for cmd in (["run", str(tmp_path / "elsewhere.yaml")], ["gate", "--path", str(tmp_path)]):
        r = CliRunner().invoke(app, [*cmd, "-o", str(tmp_path / "r.json")])
        assert r.exit_code == 2, r.output
        assert "written for trl" in r.output and "--target trl" in r.output, r.output
        assert not (tmp_path / "r.json").exists()


def test_report_is_deterministic_apart_from_timings(runs):
    _, done = runs
    assert done["json1"].returncode == done["json2"].returncode == 1
    a, b = json.loads(done["json1"].stdout), json.loads(done["json2"].stdout)
    assert a["created_at"] and isinstance(a["duration_s"], float)  # recorded; its value is for benchmarks/
    assert strip_timings(a) == strip_timings(b)
    assert a["results"][0]["observations"]["opsm_mask"] == [[0.0, 1.0, 0.0]]


def test_long_paths_in_spec_errors_are_not_wrapped(tmp_path):
    """`FILE:LINE:` must survive on one line for editors and CI annotations, whatever the
    path's length and the terminal's width."""
    d = tmp_path / ("a-long-folder-name-" * 5)
    d.mkdir()
    (d / "bad.yaml").write_text(BAD_SCENARIO)
    p = subprocess.run([SENTINEL, "run", str(d / "bad.yaml"), "-o", "-"], cwd=tmp_path, env=env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert f"{d.name}/bad.yaml:3: boundary:" in p.stderr, p.stderr  # relative to the working folder


# --- usage errors (exit 2, nothing run) -----------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["run", str(SEED), "--target", "nosuchtarget"], "unknown target"),
    (["run", str(SEED), "--commit", "HEAD"], "--commit needs --repo"),
    (["run", str(SEED), "--plant", "no-such-plant"], "unknown plant"),
    (["run", str(SEED), "--target", "areal", "--plant", "opsm-token-level"], "reference target only"),
    (["run", str(SEED), "--target", "slime", "--repo", "/no/such/repo"], "does not exist"),
    (["gate", "--target", "nosuchtarget"], "unknown target"),
    (["gate", "--plant", "no-such-plant"], "unknown plant"),
])
def test_usage_errors_exit_2(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    r = cli(*args)
    assert r.exit_code == 2, r.output
    assert words in " ".join(r.stderr.split())
    assert not (tmp_path / "reports").exists()


def test_missing_scenario_file_exits_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = cli("run", "absent.yaml")
    assert r.exit_code == 2
    assert "absent.yaml" in r.stderr and "no such file" in r.stderr


# --- sentinel report --------------------------------------------------------------------

def test_report_markdown_shows_the_observed_mask_and_provenance(runs):
    d, _ = runs
    r = cli("report", str(d / "plant.json"), "--format", "markdown")
    assert r.exit_code == 1  # the report holds a violation: its own exit code
    md = r.stdout
    assert md.startswith("## RL-Sentinel FAIL: `opsm-mixed-advantage` violated")
    assert "| 0 | 0 | **1** ≠ 0 | 0 |" in md  # the observed mask, per token
    assert "https://github.com/THUDM/slime/pull/1917" in md
    assert "opsm-token-level" in md
    assert "sentinel gate --plant opsm-token-level" in md  # how to reproduce


def test_report_junit_has_one_failure(runs, tmp_path):
    d, _ = runs
    r = cli("report", str(d / "plant.json"), "--format", "junit")
    assert r.exit_code == 1  # the report holds a violation: its own exit code
    suite = ET.fromstring(r.stdout.encode())
    failures = suite.findall("testcase/failure")
    assert len(failures) == 1 and suite.get("failures") == "1"
    case = suite.find("testcase/failure/..")
    assert case.get("name") == "opsm-mixed-advantage"
    assert "[[0, 1]]" in failures[0].text and "difference" in failures[0].text
    out = tmp_path / "r.xml"
    assert cli("report", str(d / "plant.json"), "-f", "junit", "-o", str(out)).exit_code == 1
    assert ET.parse(out).getroot().get("failures") == "1"


def test_report_text_and_json(runs):
    d, _ = runs
    r = cli("report", str(d / "plant.json"), "--format", "text")
    assert r.exit_code == 1  # the report holds a violation: its own exit code
    assert "opsm-mixed-advantage" in r.stdout and "violated" in r.stdout and "FAIL" in r.stdout
    r = cli("report", str(d / "plant.json"), "--format", "json")
    assert r.exit_code == 1  # the report holds a violation: its own exit code
    assert json.loads(r.stdout) == json.loads((d / "plant.json").read_text())


def test_report_of_a_non_report_exits_2(tmp_path):
    (tmp_path / "x.json").write_text('{"not": "a report"}')
    assert cli("report", str(tmp_path / "x.json")).exit_code == 2
    assert cli("report", str(tmp_path / "absent.json")).exit_code == 2


def test_write_atomic_never_leaves_a_half_written_file(tmp_path):
    p = tmp_path / "report.json"
    write_atomic(p, '{"old": true}\n')
    with pytest.raises(UnicodeEncodeError):
        write_atomic(p, '{"new": "\ud800"}')  # fails mid-write
    assert p.read_text() == '{"old": true}\n'
    assert [x.name for x in tmp_path.iterdir()] == ["report.json"]


# --- list, schema, help, version ------------------------------------------------------------

@pytest.mark.parametrize("what, words", [
    ("scenarios", ["opsm-mixed-advantage", "kl-k1", "opsm_mask"]),
    ("boundaries", ["opsm_mask", "advantages", "loss_agg"]),
    ("targets", ["reference", "slime", "areal"]),
    ("invariants", ["sequence_uniform", "unchanged_under", "detached"]),
    ("plants", ["opsm-token-level", "kl-inplace-shaping"]),
])
def test_list_each_kind(what, words):
    r = cli("list", what)
    assert r.exit_code == 0, r.output
    for w in words:
        assert w in r.stdout, (what, w)


def test_list_scenarios_of_a_bad_path_exits_2(tmp_path):
    (tmp_path / "bad.yaml").write_text(BAD_SCENARIO)
    r = cli("list", "scenarios", "--path", str(tmp_path / "bad.yaml"))
    assert r.exit_code == 2 and "bad.yaml:3" in r.stderr


def test_schema_prints_the_scenario_schema():
    r = cli("schema")
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert "opsm_mask" in s["properties"]["boundary"]["enum"]
    assert "sequence_uniform" in json.dumps(s["properties"]["invariants"])
    assert s["$id"].endswith(".json")


def test_scenario_schema_checks_config_values_and_inputs_per_boundary():
    import jsonschema
    import yaml

    s = json.loads(cli("schema").stdout)
    validator = jsonschema.Draft7Validator(s)
    for f in catalog_path().rglob("*.yaml"):  # every catalog scenario is valid under it
        for doc in yaml.safe_load_all(f.read_text()):
            assert not list(validator.iter_errors(doc)), f
    doc = {"id": "t", "title": "t", "boundary": "loss_agg", "config": {"mode": "seq-mean-tokn-mean"},
           "inputs": {"values": [[1.0]], "loss_mask": [[1]], "log_probs": [[0.0]]}, "invariants": [{"finite": {}}]}
    messages = " ".join(e.message for e in validator.iter_errors(doc))
    assert "'seq-mean-tokn-mean' is not one of" in messages and "'log_probs' was unexpected" in messages


def test_checked_in_scenario_schema_is_current():
    assert (Path(__file__).parents[1] / "reports" / "scenario.schema.json").read_text() == cli("schema").stdout


def test_schema_report_prints_the_report_schema(tmp_path):
    r = cli("schema", "report")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == json_schema()
    assert r.stdout == schema_text()
    out = tmp_path / "s.json"
    assert cli("schema", "report", "-o", str(out)).exit_code == 0
    assert out.read_text() == schema_text()


def command_names() -> list[str]:
    return sorted(typer.main.get_command(app).commands)


def test_core_commands_exist():
    assert {"run", "gate", "report", "list", "schema"} <= set(command_names())


@pytest.mark.parametrize("command", [None, *command_names()])
def test_help_of_every_command(command):
    r = cli(*([command] if command else []), "--help")
    assert r.exit_code == 0, r.output
    assert "Usage" in r.stdout
    if command in (None, "hunt", "compare"):  # where exit codes are listed, 5 is among them
        assert "5 nothing" in " ".join(r.stdout.replace("│", " ").split()), r.stdout


def test_version():
    r = cli("--version")
    assert r.exit_code == 0 and __version__ in r.stdout


# --- gate on the repository's own catalog (issue 14) ------------------------------------------

def test_gate_uses_the_folders_scenarios_and_says_so(tmp_path):
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "ok.yaml").write_text((catalog_path() / "kl" / "kl-estimators.yaml").read_text())
    p = subprocess.run([SENTINEL, "gate", "-o", "r.json", "--junit", "j.xml"], cwd=tmp_path, env=env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "catalog: scenarios (this folder's scenarios)" in p.stderr
    assert (tmp_path / "r.json").stat().st_mode & 0o044 == 0o044  # readable by a CI artifact uploader
    assert 'file="scenarios/ok.yaml"' in (tmp_path / "j.xml").read_text()  # relative: CI annotations link
    (tmp_path / "scenarios" / "bad.yaml").write_text(BAD_SCENARIO)
    p = subprocess.run([SENTINEL, "gate", "-o", "-"], cwd=tmp_path, env=env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "scenarios/bad.yaml:3:" in p.stderr


@pytest.mark.parametrize("argv", [["hunt", "-t", "reference", "--time", "1"], ["mutate", "-t", "reference"]])
def test_an_out_folder_that_is_a_file_is_refused_before_any_work(argv, tmp_path):
    """`--out FILE` crashed with a traceback when the first finding (hunt) or the report (mutate)
    was written, the run's work lost."""
    taken = tmp_path / "taken"
    taken.write_text("{}")
    r = subprocess.run([sys.executable, "-m", "sentinel", *argv, "--out", str(taken)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "is a file" in r.stderr and "Traceback" not in r.stderr
    assert taken.read_text() == "{}"
