"""Straight-through KL estimators (`kl_type: k1+ / k3+`, verl PR 2953): the value of k1 / k3 with
the gradient of k2. The `straight_through` family, the reference's implementation and its plant
(catalog and hunt), and where a target has them: decided by its KL function's code."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from sentinel.adapters.trainer import TrainerAdapter, straight_through
from sentinel.catalog import catalog_path
from sentinel.errors import TargetError, Unsupported
from sentinel.hunt import hunt
from sentinel.invariants.base import RunObservation
from sentinel.invariants.gradient import StraightThrough
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths

import untimed

ST = catalog_path() / "kl" / "kl-straight-through.yaml"
PLANT = "kl-straight-through-k1-gradient"
VERL_REPO = os.environ.get("SENTINEL_VERL_REPO")


def _obs(value, grad) -> dict[str, RunObservation]:
    lp, ref = np.array([[-0.5, -1.0]]), np.array([[-0.6, -0.8]])
    return {"base": RunObservation({"log_probs": lp, "ref_log_probs": ref, "loss_mask": np.array([[1, 1]])},
                                   {"kl": np.asarray(value)}, grads={"kl/log_probs": np.asarray(grad)})}


def test_family_checks_the_value_and_the_gradient():
    inv = StraightThrough(output="kl", value="log_probs - ref_log_probs", wrt="log_probs",
                          gradient="log_probs - ref_log_probs", where="loss_mask")
    k1, k2_grad = [[0.1, -0.2]], [[0.1, -0.2]]
    assert inv.evaluate(_obs(k1, k2_grad), None).verdict == "held"
    wrong_grad = inv.evaluate(_obs(k1, [[1.0, 1.0]]), None)  # k1's own gradient
    assert wrong_grad.verdict == "violated" and "gradient" in wrong_grad.message
    wrong_value = inv.evaluate(_obs([[0.005, 0.02]], k2_grad), None)  # k2's value
    assert wrong_value.verdict == "violated" and "value" in wrong_value.message


def test_reference_holds_and_the_plant_is_caught_by_the_catalog():
    report = run(load_paths([ST]), [TargetSpec("reference"), TargetSpec("reference", plant=PLANT)])
    verdicts = {(r.target, r.id): r.verdict for r in report.results}
    ref, plant = TargetSpec("reference").key, TargetSpec("reference", plant=PLANT).key
    assert {v for (t, _), v in verdicts.items() if t == ref} == {"holds"}, verdicts
    assert {v for (t, _), v in verdicts.items() if t == plant} == {"violated"}, verdicts
    failed = {i.family for r in report.results if r.target == plant for i in r.invariants if i.verdict == "violated"}
    assert failed == {"straight_through"}


def test_the_hunt_finds_the_plant_on_kl(tmp_path):
    rep = hunt(TargetSpec("reference", plant=PLANT), seed=0, db=None, out_dir=tmp_path, boundaries=["kl"],
               first=True, max_examples=40, **untimed.HUNT)
    f, = rep.hunt.findings
    assert f.family == "straight_through" and f.reproduced is True


def _kl_penalty_with_plus(logprob, ref_logprob, kl_penalty):
    if kl_penalty.endswith("+"):
        return logprob - ref_logprob
    return logprob - ref_logprob


def _kl_penalty_without_plus(logprob, ref_logprob, kl_penalty):
    return logprob - ref_logprob


def test_a_target_has_straight_through_where_its_code_tests_a_plus_suffix():
    assert straight_through(_kl_penalty_with_plus) and not straight_through(_kl_penalty_without_plus)
    adapter = TrainerAdapter.__new__(TrainerAdapter)
    adapter.kl_names = {"k1": "kl", "k3": "low_var_kl"}
    assert adapter._kl_name("k3+", "k3+", _kl_penalty_with_plus) == "low_var_kl+"
    assert adapter._kl_name("k3+", "k3+", _kl_penalty_without_plus) is None
    assert adapter._kl_name("k1+") is None  # no function to read: no straight-through
    assert adapter._kl_name("k3") == "low_var_kl"


def test_code_whose_source_cannot_be_read_is_an_error_that_says_why_not_a_no():
    """A function compiled from a string (as a stub or a mutant is) has no file to read: neither
    'takes +' nor 'does not' (which would read `unsupported`), but an error naming the function."""
    scope: dict = {}
    exec(compile("def kl_penalty(logprob, ref_logprob, kl_penalty):\n    return logprob - ref_logprob\n",
                 "<generated>", "exec"), scope)
    with pytest.raises(TargetError, match=r"cannot read the source of 'kl_penalty' \(<generated>: OSError"):
        straight_through(scope["kl_penalty"])
    adapter = TrainerAdapter.__new__(TrainerAdapter)
    adapter.kl_names = {"k3": "low_var_kl"}
    with pytest.raises(TargetError, match="straight-through"):
        adapter._kl_name("k3+", "k3+", scope["kl_penalty"])


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")
def test_verl_0_9_1_straight_through_holds_and_a_verl_without_it_is_unsupported(monkeypatch):
    """verl 0.9.1's kl_penalty strips the '+' before its forward estimator: value of k3, gradient of
    k2. A verl whose kl_penalty tests no '+' suffix (before PR 2953) is unsupported."""
    report = run(load_paths([ST]), [TargetSpec("verl")], timeout=120)
    assert {r.id: r.verdict for r in report.results} == {"kl-k3-straight-through": "holds",
                                                           "kl-k1-straight-through": "holds"}
    from sentinel_adapters.verl import VerlAdapter
    verl = VerlAdapter(None, torch.device("cpu"))
    verl.facts = verl.load()
    inputs = {"log_probs": torch.tensor([[-0.5, -1.0]]), "ref_log_probs": torch.tensor([[-0.6, -0.8]]),
              "loss_mask": torch.tensor([[1, 1]])}
    core = next(m for m in verl.mods.values() if hasattr(m, "kl_penalty"))
    monkeypatch.setattr(core, "kl_penalty", _kl_penalty_without_plus)
    with pytest.raises(Unsupported, match="straight-through"):
        verl.call("kl", inputs, {"kl_type": "k3+"})


@pytest.mark.skipif(not VERL_REPO, reason="SENTINEL_VERL_REPO (path of a verl checkout) is not set")
def test_verl_checkout_head_fails_on_its_own_straight_through_name():
    """At the checkout's HEAD (b178a3cd5) kl_penalty tests for '+' but hands the whole name to
    kl_penalty_forward, which raises NotImplementedError on it (0.9.1 strips the '+' first): the
    scenario is an error of verl's, not unsupported."""
    report = run(load_paths([ST]), [TargetSpec("verl", VERL_REPO)], timeout=120)
    for r in report.results:
        assert r.verdict == "error" and "NotImplementedError" in r.reason, (r.id, r.verdict, r.reason)


def test_scenarios_name_the_family():
    assert Path(ST).is_file()
    assert {sc.id for sc in load_paths([ST])} == {"kl-k3-straight-through", "kl-k1-straight-through"}
