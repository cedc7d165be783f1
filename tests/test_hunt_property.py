"""Adding a hunt property is one declaration: a family (here a toy one, in tests/toy_family.py,
outside sentinel as a plugin's would be) with `hunt = (hunted(...),)` beside it. The registry
finds it, `sentinel hunt --list` lists it, `sentinel hunt --property NAME` hunts it (the worker
imports the family's module), and the hunt report has its verdict; `sentinel list invariants`,
`sentinel run` and every report format know the family."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sentinel.hunt.properties import PROPERTIES
from sentinel.invariants import REGISTRY, RunObservation

HERE = Path(__file__).resolve().parent
NAME = "kl.toy_shape"


@pytest.fixture(autouse=True)
def toy():
    """The toy family registered for each test here and removed afterwards: a family left in
    the registry would change every other test's view of it (the schema, the teeth)."""
    import toy_family
    if "toy_shape" not in REGISTRY:  # unregistered after an earlier test here: register it again
        importlib.reload(toy_family)
    yield toy_family.ToyShape
    REGISTRY.pop("toy_shape", None)
    PROPERTIES.forget("toy_shape")


def test_the_toy_family_can_fail():
    """A check that cannot fail is a defect: a KL of the wrong shape violates it."""
    from sentinel.spec import load_text
    (sc,) = load_text("id: t\ntitle: t\nboundary: kl\ninputs: {log_probs: [[0.0, 0.0]], ref_log_probs: [[0.0, 0.0]], "
                      "loss_mask: [[1, 1]]}\ninvariants: [{toy_shape: {}}]\n")
    inv = sc.invariants[0]
    run = lambda kl: {"base": RunObservation(inputs=sc.inputs, outputs={"kl": kl})}  # noqa: E731
    assert inv.evaluate(run(np.zeros((1, 2))), sc).verdict == "held"
    assert inv.evaluate(run(np.zeros((1, 3))), sc).verdict == "violated"


def test_a_property_declared_in_a_test_is_found_by_the_registry_cli_and_report(toy, tmp_path, monkeypatch):
    from sentinel import hunt as H
    from sentinel.cli import app
    assert REGISTRY["toy_shape"] is toy
    prop = H.PROPERTIES[NAME]
    assert (prop.family, prop.boundary, prop.origin) == ("toy_shape", "kl", "toy_family")
    assert NAME in [p.name for p in H.select(families=["toy_shape"])]

    listed = CliRunner().invoke(app, ["hunt", "--list"], catch_exceptions=False, env={"COLUMNS": "300"})
    assert listed.exit_code == 0 and NAME in listed.output, listed.output

    # the worker imports the family's module (its origin) from PYTHONPATH to find the property
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    report = tmp_path / "hunt.json"
    done = CliRunner().invoke(app, ["hunt", "--property", NAME, "--seed", "0", "--no-db", "-n", "30",
                                    "--min-examples", "10", "--time", "600", "--out", str(tmp_path / "found"),
                                    "-o", str(report), "--json"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    rep = json.loads(report.read_text())
    (p,) = rep["hunt"]["properties"]
    assert (p["property"], p["family"], p["status"]) == (NAME, "toy_shape", "holds") and p["examples"] >= 10, p
    (r,) = rep["results"]
    assert (r["id"], r["verdict"]) == (NAME, "holds")


def test_the_toy_family_is_found_by_list_run_and_every_report_format(tmp_path):
    """The family half of the same declaration: `sentinel list invariants` shows it, a scenario
    names it, `sentinel run` evaluates it and every report format renders its verdict."""
    from sentinel.cli import app
    listed = CliRunner().invoke(app, ["list", "invariants"], catch_exceptions=False, env={"COLUMNS": "300"})
    assert listed.exit_code == 0 and "toy_shape" in listed.output, listed.output
    (tmp_path / "t.yaml").write_text("id: toy\ntitle: t\nboundary: kl\ninputs: {log_probs: [[-0.5, -1.0]], "
                                     "ref_log_probs: [[-0.25, -1.0]], loss_mask: [[1, 1]]}\n"
                                     "invariants: [{toy_shape: {}}]\n")
    report = tmp_path / "r.json"
    done = CliRunner().invoke(app, ["run", str(tmp_path / "t.yaml"), "-o", str(report)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    (r,) = json.loads(report.read_text())["results"]
    assert r["verdict"] == "holds" and [i["family"] for i in r["invariants"]] == ["toy_shape"]
    for fmt in ("text", "markdown", "junit", "html"):
        shown = CliRunner().invoke(app, ["report", str(report), "-f", fmt, "-v", "-o", str(tmp_path / f"r.{fmt}")])
        assert shown.exit_code == 0, (fmt, shown.output)
        # markdown and JUnit name a passing scenario (its invariants folded); text -v and HTML each invariant
        assert ('name="toy"' if fmt == "junit" else "`toy`" if fmt == "markdown" else "toy_shape") in \
            (tmp_path / f"r.{fmt}").read_text(), fmt
