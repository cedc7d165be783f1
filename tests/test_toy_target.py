"""Adding a target is one package and one registry line: a toy trainer and its adapter package,
written here into a temporary folder and registered through the `rl_sentinel.targets` entry
point, are found by the registry, listed and run by the CLI, and reported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel import targets
from toy_package import install

CATALOG = Path(__file__).resolve().parents[1] / "scenarios"

TRAINER = '''
import torch

def token_mean(values, mask):
    m = mask.bool()
    return torch.where(m, values, torch.zeros_like(values)).sum() / m.sum().clamp_min(1)
'''

ADAPTER = '''
from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.adapters.trainer import TrainerAdapter
from sentinel.errors import Unsupported


class ToyAdapter(TrainerAdapter):
    name = "toy"
    description = "a toy trainer (tests/test_toy_target.py)"
    package, marker = "toytrainer", "toytrainer.losses"
    modules = lookup_modules = ("toytrainer.losses",)
    loss_path_files = ("toytrainer/losses.py",)

    @implements("loss_agg", calls=("toytrainer.losses:token_mean",))
    def b_loss_agg(self, inputs, config):
        if config["mode"] != "token-mean":
            raise Unsupported(f"toytrainer has token-mean only, not {config['mode']!r}")
        fn = self._fn("token_mean", boundary="loss_agg")
        return BoundaryResult({"loss": fn(inputs["values"], inputs["loss_mask"])}, function=self._ref(fn))
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The trainer `toytrainer`, its adapter package `toy_sentinel` and a distribution's metadata
    registering it, on the path of this process and of the CLI's."""
    yield install(tmp_path, monkeypatch, {"toytrainer": {"losses.py": TRAINER}, "toy_sentinel": {"adapter.py": ADAPTER}},
                  "toy_sentinel-0.1", "toy = toy_sentinel.adapter:ToyAdapter")
    targets.registry.cache_clear()


def sentinel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sentinel.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


def test_the_registry_finds_the_toy_target(toy):
    assert "toy" in targets.names()
    cls = targets.adapter_class("toy")
    assert cls.loss_path_files == ("toytrainer/losses.py",)
    assert cls.mapping()["loss_agg"]["calls"] == ["toytrainer.losses:token_mean"]


def test_the_cli_lists_runs_and_reports_the_toy_target(toy, tmp_path):
    listed = sentinel("list", "targets")
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"│ toy +│", listed.stdout) and "toytrainer/losses.py" in listed.stdout, listed.stdout
    mapping = sentinel("list", "boundaries", "--target", "toy")
    assert "toy_sentinel.adapter:ToyAdapter" in mapping.stdout, mapping.stdout + mapping.stderr
    assert "toytrainer.losses:token_mean" in mapping.stdout

    out = tmp_path / "report.json"
    run = sentinel("run", str(CATALOG / "loss_agg" / "modes.yaml"), "--target", "toy", "-o", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    assert report["targets"]["toy"]["name"] == "toy" and report["targets"]["toy"]["load_error"] is None
    verdicts = {r["id"]: r["verdict"] for r in report["results"] if r["target"] == "toy"}
    assert verdicts["loss-agg-token-mean"] == "holds"  # the toy's token_mean, called through its adapter
    assert {v for k, v in verdicts.items() if k != "loss-agg-token-mean"} == {"unsupported"}
    token_mean = next(r for r in report["results"] if r["id"] == "loss-agg-token-mean")
    assert token_mean["function"]["module"] == "toytrainer.losses"
