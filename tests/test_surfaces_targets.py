"""The surfaces beside the loss on the real trainers: the logprobs, values, metrics and
masked_reduce scenarios of the catalog (and the findings they led to) on verl and AReaL (the
installed packages) and slime (SENTINEL_SLIME_REPO), in one run with a worker per target.

Install the packages with: pip install --no-deps areal==1.0.4 verl==0.9.1 (and the README's
light dependencies); point SENTINEL_SLIME_REPO at a slime checkout."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from sentinel.catalog import catalog_path
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths
from sentinel_adapters.areal import ArealAdapter
from sentinel_adapters.slime import SlimeAdapter
from sentinel.adapters.spying import spy
from sentinel_adapters.verl import VerlAdapter

SURFACES = ("logprobs", "values", "metrics", "masked_reduce")
FINDINGS = ("whiten-nan-at-masked-position", "areal-approx-kl-sign")
SLIME = os.environ.get("SENTINEL_SLIME_REPO")


def _targets() -> dict[str, TargetSpec]:
    out = {}
    if importlib.util.find_spec("verl") is not None:
        out["verl"] = TargetSpec("verl")
    if importlib.util.find_spec("areal") is not None:
        out["areal"] = TargetSpec("areal")
    if SLIME:
        out["slime"] = TargetSpec("slime", SLIME)
    return out


@pytest.fixture(scope="module")
def verdicts():
    targets = _targets()
    if not targets:
        pytest.skip("no real target: install verl / areal, or set SENTINEL_SLIME_REPO")
    root = Path(catalog_path())
    scenarios = [sc for sc in load_paths([root]) if sc.boundary in SURFACES]
    report = run(scenarios, list(targets.values()))
    out: dict[str, dict] = {}
    for r in report.results:
        out.setdefault(r.target, {})[r.id] = r
    return {name: out[spec.key] for name, spec in targets.items()}


def _need(verdicts, name):
    if name not in verdicts:
        pytest.skip(f"{name} is not available here")
    return verdicts[name]


@pytest.mark.parametrize("cls", (SlimeAdapter, ArealAdapter, VerlAdapter), ids=lambda c: c.name)
def test_every_surface_is_mapped_or_declined_with_its_reason(cls):
    mapping = cls.mapping()
    for b in SURFACES:
        row = mapping[b]
        assert row["calls"] or (row["declined"] and not row["declined"].startswith("target ")), (cls.name, b)


def test_verl(verdicts):
    v = _need(verdicts, "verl")
    for sid in ("logprobs-temperature-once", "logprobs-unit-temperature", "ppo-metrics-token-mean",
                "ppo-metrics-finite-under-masked-nan", "masked-mean-nan-under-mask", "masked-row-mean-fully-masked-row",
                "masked-var-unbiased", "masked-whiten", *FINDINGS):
        assert v[sid].verdict == "holds", (sid, v[sid].reason)
    assert v["values-equal-value-head"].verdict == "unsupported"
    assert "FSDPEngineWithValueHead.prepare_model_outputs" in v["values-equal-value-head"].reason
    assert v["ppo-metrics-seq-mean"].verdict == "unsupported"  # verl's metrics are masked means over tokens
    assert v["logprobs-temperature-once"].function.qualname == "logprobs_from_logits"


def test_areal(verdicts):
    a = _need(verdicts, "areal")
    for sid in ("logprobs-temperature-once", "logprobs-unit-temperature"):
        assert a[sid].verdict == "holds", (sid, a[sid].reason)
    kl = a["areal-approx-kl-sign"]
    assert kl.verdict == "violated" and kl.invariants[0].observed == pytest.approx(-0.125)
    assert a["ppo-metrics-token-mean"].verdict == "violated"  # the same sign, on the catalog's metrics
    held = {i.config["close"]["output"] for i in a["ppo-metrics-token-mean"].invariants
            if i.verdict == "held" and i.family == "close"}
    assert {"clipfrac", "clipfrac_lower", "ratio_mean", "ratio_max", "ratio_min"} <= held
    whiten = a["whiten-nan-at-masked-position"]
    assert whiten.verdict == "violated" and [i.verdict for i in whiten.invariants] == ["violated", "violated"]
    assert a["values-equal-value-head"].verdict == "unsupported"


def test_slime(verdicts):
    s = _need(verdicts, "slime")
    for sid in ("logprobs-temperature-once", "logprobs-unit-temperature", "values-equal-value-head",
                "ppo-metrics-token-mean", "ppo-metrics-seq-mean", "areal-approx-kl-sign"):
        assert s[sid].verdict == "holds", (sid, s[sid].reason)
    assert s["whiten-nan-at-masked-position"].verdict == "violated"
    # its loss reducer multiplies by the mask (the masked-token-nan-reaches-loss finding): the metrics share it
    assert s["ppo-metrics-finite-under-masked-nan"].verdict == "violated"
    assert s["masked-mean-nan-under-mask"].verdict == "unsupported"


# --- every canonical position reaches the trainer's function ----------------------------------

@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")
def test_verl_reductions_see_every_position_masked_ones_included():
    adapter = VerlAdapter(None, torch.device("cpu"))
    adapter.facts = adapter.load()
    values = torch.tensor([[1.0, 2.0, 9.0], [4.0, 7.0, 8.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    with spy(adapter._verl_F(), "masked_mean") as calls:
        adapter.call("masked_reduce", {"values": values, "loss_mask": mask}, {"op": "mean", "dim": "row"})
    (args, _), = calls
    assert torch.equal(args["values"], values) and args["mask"].tolist() == mask.tolist()
    logits = torch.tensor([[[0.0, 1.0, 2.0], [5.0, 5.0, 5.0]]], requires_grad=True)
    res = adapter.call("logprobs", {"logits": logits, "tokens": torch.tensor([[2, 0]]),
                                    "loss_mask": torch.tensor([[1.0, 0.0]])}, {"temperature": 0.5})
    res.outputs["log_probs"][0, 0].backward()
    assert logits.grad[0, 0].abs().sum() > 0  # the gradient reaches the caller's logits
