"""What a worker imports: the CLI's own `sentinel`, and nothing more once a scenario runs.

A worker (and the zygote it is forked from) imports `sentinel` from where the CLI's is, not
from a `sentinel` folder in the current directory (`python -m` puts it first on sys.path).

A scenario's child imports nothing: the worker imports its job path once, before it forks.

Each scenario runs in a child forked from the warm worker (sentinel/worker.py), and whatever
the child imports is imported again by the next child. One lazy import of the report's models
(pydantic, via sentinel.coverage) in the scenario path cost ~0.15 s per scenario idle and
~1 s under load: `sentinel gate` took 8x a bare torch import instead of ~1.5x.
The check runs in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel import runner
from sentinel.catalog import catalog_path
from sentinel.spec import load_paths

PROBE = """
import io, json, sys
from sentinel import worker
w = worker.Worker({"target": "reference", "root": None, "device": "cpu", "timeout": 60,
                   "options": {"plant": None, "compile": False}}, io.BytesIO(), b"k" * 16)
w.load()
jobs = json.load(sys.stdin)
before = set(sys.modules)
verdicts = [w._measured(job)["status"] for job in jobs]  # what each forked child runs
print(json.dumps({"new": sorted(set(sys.modules) - before), "verdicts": verdicts}))
"""


def test_a_scenario_child_imports_no_module():
    scenarios = [sc for sc in load_paths([catalog_path()]) if sc.applies_to("reference")]  # the probe's target
    one_per_boundary = list({sc.boundary: sc for sc in scenarios}.values())
    jobs = [runner.job(sc, runner.plan(sc)) for sc in one_per_boundary]
    out = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(jobs), capture_output=True, text=True,
                         timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(seen["verdicts"]) == {"ok"}, seen["verdicts"]  # the jobs really ran
    assert seen["new"] == [], f"imported in every scenario's child: {seen['new']}"


SCRIPT = Path(sys.executable).with_name("sentinel")


@pytest.mark.skipif(not SCRIPT.exists(), reason="no console script: `python -m sentinel` imports the folder's own")
@pytest.mark.parametrize("zygote", ["on", "off"])
def test_a_worker_runs_the_clis_sentinel_not_the_folders(tmp_path, zygote):
    (tmp_path / "sentinel").mkdir()
    (tmp_path / "sentinel" / "__init__.py").write_text("raise SystemExit('the folder sentinel was imported')\n")
    env = {k: v for k, v in os.environ.items() if k != "SENTINEL_ZYGOTE_SOCKET"}  # this CLI's own zygote
    env["SENTINEL_ZYGOTE"] = zygote
    p = subprocess.run([str(SCRIPT), "gate", "-k", "opsm-mixed-advantage", "-o", "report.json"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["verdict"] for r in report["results"]] == ["holds"]
