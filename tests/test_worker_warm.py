"""A scenario's child imports nothing: the worker imports its job path once, before it forks.

Each scenario runs in a child forked from the warm worker (sentinel/worker.py), and whatever
the child imports is imported again by the next child. One lazy import of the report's models
(pydantic, via sentinel.coverage) in the scenario path cost ~0.15 s per scenario idle and
~1 s under load: `sentinel gate` took 8x a bare torch import instead of ~1.5x.
The check runs in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

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
    scenarios = load_paths([catalog_path()])
    one_per_boundary = list({sc.boundary: sc for sc in scenarios}.values())
    jobs = [runner.job(sc, runner.plan(sc)) for sc in one_per_boundary]
    out = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(jobs), capture_output=True, text=True,
                         timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(seen["verdicts"]) == {"ok"}, seen["verdicts"]  # the jobs really ran
    assert seen["new"] == [], f"imported in every scenario's child: {seen['new']}"
