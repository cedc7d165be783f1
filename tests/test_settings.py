"""Settings and selection: `[tool.sentinel]` defaults under the flags, `-k EXPR` as pytest's,
and shell completion through Typer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel import keywords
from sentinel.catalog import catalog_path
from sentinel.errors import UsageError

BIN = Path(sys.executable).parent
KL = catalog_path() / "kl" / "kl-estimators.yaml"


def _sentinel(cwd, *args, env=None):
    return subprocess.run([str(BIN / "sentinel"), *args], cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("expr, chosen", [
    ("kl", {"kl-k1", "kl-k2"}),
    ("k1 or k2", {"kl-k1", "kl-k2"}),
    ("kl and not k2", {"kl-k1"}),
    ("not (k1 or opsm)", {"kl-k2"}),
    ("SEED", {"opsm-x"}),  # a tag, case-insensitive
    ("policy_loss", {"opsm-x"}),  # the boundary
    ("", {"kl-k1", "kl-k2", "opsm-x"}),
])
def test_keyword_expressions(expr, chosen):
    items = {"kl-k1": ["kl-k1", "kl", "kl"], "kl-k2": ["kl-k2", "kl"], "opsm-x": ["opsm-x", "policy_loss", "seed"]}
    assert {k for k, names in items.items() if keywords.compile(expr)(names)} == chosen


@pytest.mark.parametrize("expr, where", [("kl and", "at the end"), ("(kl", "at the end"), ("kl k2", "column 4"),
                                         ("or kl", "column 1"), ("kl )", "column 4")])
def test_bad_keyword_expressions_name_the_column(expr, where):
    with pytest.raises(UsageError, match=where):
        keywords.compile(expr)


def test_k_selects_scenarios_of_a_run(tmp_path):
    r = _sentinel(tmp_path, "run", str(KL), "-k", "k1 or k3", "--json", "-o", "-")
    assert r.returncode == 0, r.stderr
    assert sorted(x["id"] for x in json.loads(r.stdout)["results"]) == ["kl-k1", "kl-k3"]
    none = _sentinel(tmp_path, "run", str(KL), "-k", "nosuch", "-o", "-")
    assert none.returncode == 5 and "selects none" in none.stderr
    bad = _sentinel(tmp_path, "gate", "--path", str(KL), "-k", "k1 and", "-o", "-")
    assert bad.returncode == 2 and "expected a name" in bad.stderr


def test_k_selects_hunt_properties(tmp_path):
    r = _sentinel(tmp_path, "hunt", "-k", "nosuchproperty", "--time", "1", "-o", "-")
    assert r.returncode == 2 and "-k" in r.stderr


def test_tool_sentinel_settings_are_defaults_under_the_flags(tmp_path):
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "kl.yaml").write_text(KL.read_text())
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.sentinel]\ntarget = "reference"\n'
                                             'paths = ["cases"]\ntimeout = 30\noutput = "out"\n')
    sub = tmp_path / "sub"  # found from a folder below, paths relative to the pyproject
    sub.mkdir()
    r = _sentinel(sub, "gate")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "out" / "latest.json").read_text())
    assert {x["id"] for x in report["results"]} >= {"kl-k1", "kl-k3"} and report["targets"]
    # a flag wins over the setting
    r = _sentinel(sub, "gate", "--path", str(KL), "-k", "k2", "-o", str(tmp_path / "flag.json"))
    assert r.returncode == 0, r.stderr
    assert [x["id"] for x in json.loads((tmp_path / "flag.json").read_text())["results"]] == ["kl-k2"]
    # `sentinel run` with no path runs the configured catalog
    r = _sentinel(sub, "run", "-k", "k1", "-o", "-", "--json")
    assert r.returncode == 0 and [x["id"] for x in json.loads(r.stdout)["results"]] == ["kl-k1"], r.stderr


@pytest.mark.parametrize("body, message", [
    ('target = "reference"\ntimout = 3\n', "pyproject.toml:3: [tool.sentinel] timout: not a setting"),
    ('device = "tpu"\n', "pyproject.toml:2: [tool.sentinel] device:"),
    ('timeout = -1\n', "pyproject.toml:2: [tool.sentinel] timeout:"),
    ('timeout = [\n', "pyproject.toml"),
])
def test_bad_settings_are_usage_errors_naming_file_and_line(tmp_path, body, message):
    (tmp_path / "pyproject.toml").write_text("[tool.sentinel]\n" + body)
    r = _sentinel(tmp_path, "gate", "--path", str(KL))
    assert r.returncode == 2 and message in r.stderr.replace("\n", ""), r.stderr


def test_shell_completion(tmp_path):
    help_text = _sentinel(tmp_path, "--help", env={"COLUMNS": "200"}).stdout
    assert "--install-completion" in help_text and "[tool.sentinel]" in help_text
    # the shell named, not detected: detection reads the parent processes, which under CI or nohup
    # may hold no shell at all (Typer then takes --show-completion as a flag and "bash" as extra)
    script = _sentinel(tmp_path, "--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert script.returncode == 0 and "_SENTINEL_COMPLETE" in script.stdout
    done = _sentinel(tmp_path, env={"_SENTINEL_COMPLETE": "complete_bash", "COMP_WORDS": "sentinel ga",
                                    "COMP_CWORD": "1"})
    assert done.stdout.split() == ["gate"]
    opts = _sentinel(tmp_path, env={"_SENTINEL_COMPLETE": "complete_bash", "COMP_WORDS": "sentinel gate --ti",
                                    "COMP_CWORD": "2"})
    assert "--timeout" in opts.stdout.split()
