"""Contracts a user can see: `sentinel list boundaries [--target T]` and the scenario schema give
each input and output its kind and shape, and the adapter template returns what the trainer
returned (an adapter never multiplies an output by a mask)."""

from __future__ import annotations

import ast
import importlib.util

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from sentinel import boundaries, scaffold
from sentinel.cli import app, info
from sentinel.schema import scenario_schema
from sentinel.spec import ScenarioModel


def _table_rows(monkeypatch, *args: str) -> dict[str, str]:
    """`sentinel list ARGS` on a console wide enough not to fold, as {boundary: the text of its row}."""
    monkeypatch.setattr(info, "out", Console(width=2000, no_color=True))
    r = CliRunner().invoke(app, ["list", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows: dict[str, str] = {}
    current = None
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if not cells:
            continue
        if cells[0]:
            current = cells[0]
            rows[current] = ""
        if current:
            rows[current] += " | " + " | ".join(cells)
    return rows


@pytest.mark.parametrize("args", [("boundaries",), ("boundaries", "--target", "reference")])
def test_list_boundaries_prints_kind_and_shape_of_every_port(monkeypatch, args):
    rows = _table_rows(monkeypatch, *args)
    assert set(boundaries.BOUNDARIES) <= set(rows), set(boundaries.BOUNDARIES) - set(rows)
    for b in boundaries.BOUNDARIES.values():
        for p in (*b.inputs, *b.outputs):
            assert f"{p.name}: {p.contract()}" in rows[b.name], (b.name, p.name, rows[b.name])
    # the case a user tripped on: clipfrac is per token on policy_loss and a scalar on metrics
    assert "clipfrac: token [B, T] float (optional)" in rows["policy_loss"]
    assert "clipfrac: scalar [] float" in rows["metrics"]
    assert "logits: vocab [B, T, V] float" in rows["logprobs"]
    assert "rewards: row [B] float" in rows["reward_norm"]
    assert "whitened: token [B, T] float (required under op whiten)" in rows["masked_reduce"]


def test_list_boundaries_of_a_target_keeps_its_mapping(monkeypatch):
    rows = _table_rows(monkeypatch, "boundaries", "--target", "reference")
    assert "b_kl" in rows["kl"]


@pytest.mark.parametrize("target", ["slime", "verl", "trl", "areal", "openrlhf"])
def test_a_log_wide_table_still_names_each_boundary(monkeypatch, target):
    """At the width of a CI log (not a terminal), the long reasons column once took every column's width:
    the boundary, port and calls columns printed empty, so the table named nothing."""
    monkeypatch.setattr(info, "out", Console(width=140, no_color=True))
    r = CliRunner().invoke(app, ["list", "boundaries", "--target", target], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    firsts = {line.split("│")[1].strip() for line in r.stdout.splitlines() if line.count("│") > 2}
    mapped = set(info.target_registry.adapter_class(target).mapping())
    assert mapped <= firsts, mapped - firsts


def test_the_scenario_schema_says_the_same_contracts():
    s = scenario_schema(ScenarioModel.model_json_schema())
    per_boundary = {c["if"]["properties"]["boundary"]["const"]: c["then"] for c in s["allOf"]}
    assert set(per_boundary) == set(boundaries.BOUNDARIES)
    for b in boundaries.BOUNDARIES.values():
        then = per_boundary[b.name]
        for p in (*b.inputs, *b.outputs):
            assert f"{p.name}: {p.contract()}" in then["description"], (b.name, p.name)
        for p in b.inputs:
            assert then["properties"]["inputs"]["properties"][p.name]["description"].startswith(p.contract())
    assert "clipfrac: scalar [] float" in per_boundary["metrics"]["description"]
    assert "clipfrac: token [B, T] float (optional)" in per_boundary["policy_loss"]["description"]


def _mask_products(source: str) -> list[str]:
    """Every `a * b` in `source` where one side names a mask (`x * loss_mask`, `x * inputs["loss_mask"]`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.Mult):
            sides = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
            if any("mask" in ast.unparse(side) for side in sides):
                found.append(ast.unparse(node))
    return found


def test_mask_product_finder_sees_the_old_template_line():
    """The check below can fail: it finds the line the template used to have."""
    assert _mask_products('kl = f(inputs["log_probs"], inputs["ref_log_probs"]) * inputs["loss_mask"]')
    assert _mask_products("x *= loss_mask")
    assert not _mask_products("x = a * b")


def test_adapter_template_never_multiplies_outputs_by_masks(tmp_path, monkeypatch):
    files = scaffold.adapter_files("my-trainer")
    source = files["my_trainer_adapter.py"]
    assert _mask_products(source) == []
    # and what it returns at a masked position is the trainer's own value, not a zero
    (tmp_path / "my_trainer_adapter.py").write_text(source)
    spec = importlib.util.spec_from_file_location("my_trainer_adapter", tmp_path / "my_trainer_adapter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    adapter = module.MyTrainerAdapter(None, torch.device("cpu"))
    adapter.load()
    inputs = {"log_probs": torch.tensor([[-0.5, -1.0, -0.2]]), "ref_log_probs": torch.tensor([[-0.6, -0.8, -0.7]]),
              "loss_mask": torch.tensor([[1.0, 1.0, 0.0]])}
    kl = adapter.call("kl", inputs, {"kl_type": "k1"}).outputs["kl"]
    assert torch.allclose(kl, inputs["log_probs"] - inputs["ref_log_probs"])
    assert kl[0, 2].item() == pytest.approx(0.5)  # masked, and still the trainer's value
