"""Trainer options on the real adapters (issue 19 item 1): the options the trainer's own code
reads are recorded, and a drawn trainer option (`trainer:<name>`, adapters/options.py) reaches
the trainer and changes what it computes. TRL from the installed package; OpenRLHF's policy
loss from the checkout SENTINEL_OPENRLHF_REPO names (its PolicyLoss at HEAD takes
`vllm_is_correction_type`), its advantages from that checkout or the installed package."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

from sentinel.adapters import options

T = torch.tensor
needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None or importlib.util.find_spec("transformers") is None,
                               reason="trl not installed (pip install --no-deps trl==1.16.0 && "
                                      "pip install 'rl-sentinel[trl]')")
needs_openrlhf = pytest.mark.skipif(importlib.util.find_spec("openrlhf") is None,
                                    reason="openrlhf is not installed (pip install --no-deps openrlhf==0.11.2 && "
                                           "pip install 'rl-sentinel[openrlhf]')")
REPO = os.environ.get("SENTINEL_OPENRLHF_REPO")
pytestmark = pytest.mark.slow


def _call(adapter, root: str, boundary: str, inputs: dict, config: dict) -> tuple[dict, dict]:
    """(outputs, the options the trainer read: option -> values)."""
    options.drain()
    with options.recording(boundary, [root]):
        out = adapter.call(boundary, inputs, config).outputs
    return out, options.drain().get(boundary, {})


def _policy_batch() -> dict:
    return {"log_probs": T([[-0.5, -1.0, -0.3]]), "old_log_probs": T([[-0.6, -0.9, -0.3]]),
            "advantages": T([[1.0, 1.0, 1.0]]), "loss_mask": T([[1, 1, 0]]),
            "rollout_log_probs": T([[-0.2, -2.0, -0.3]])}


@needs_trl
def test_trl_reads_the_drawn_trainer_options():
    import trl

    from sentinel_adapters.trl import TRLAdapter
    adapter = TRLAdapter(None, torch.device("cpu"))
    adapter.facts = adapter.load()
    root = str(Path(trl.__file__).parent)
    base, reads = _call(adapter, root, "policy_loss", _policy_batch(), {})
    assert reads["beta"] == [0.0] and reads["loss_type"] == ["bnpo"], reads
    assert "args.report_to" not in options.drain()  # drained: nothing left over
    drawn, reads = _call(adapter, root, "policy_loss", _policy_batch(),
                         {"trainer:beta": 0.04, "trainer:loss_type": "dr_grpo", "trainer:use_vllm": True,
                          "trainer:vllm_importance_sampling_correction": True})
    assert reads["beta"] == [0.04] and reads["loss_type"] == ["dr_grpo"], reads
    assert reads["use_vllm"] == [True] and reads["vllm_importance_sampling_correction"] == [True], reads
    assert float(drawn["loss"]) != pytest.approx(float(base["loss"]))
    declared = {k.partition(":")[2] for k in TRLAdapter.option_domains["policy_loss"]}
    pinned = set(TRLAdapter.pins("policy_loss"))
    canonical = {"epsilon_low", "epsilon_high", "args.delta", "importance_sampling_level", "max_completion_length",
                 "loss_type"}  # set from the boundary's own config (eps_clip, eps_clip_c, loss_agg, ...)
    assert set(reads) - declared - pinned - canonical - {f"args.{d}" for d in declared} == set(), reads


@pytest.fixture(scope="module")
def orl():
    """OpenRLHF from the checkout where one is named (one interpreter holds one openrlhf), else
    the installed package; with the folder its code is read from."""
    # an earlier test of this process may have imported the installed openrlhf: set aside while
    # this module uses the checkout's, put back after (the loader refuses two copies at once)
    ours = lambda name: name == "openrlhf" or name.startswith("openrlhf.")  # noqa: E731
    saved = {n: m for n, m in sys.modules.items() if ours(n)} if REPO else {}
    for n in saved:
        del sys.modules[n]
    from sentinel_adapters.openrlhf import OpenRLHFAdapter
    adapter = OpenRLHFAdapter(Path(REPO) if REPO else None, torch.device("cpu"))
    adapter.facts = adapter.load()
    import openrlhf
    yield adapter, str(Path(openrlhf.__file__).parent)
    if saved:
        for n in [n for n in sys.modules if ours(n)]:
            del sys.modules[n]
        sys.modules.update(saved)


@needs_openrlhf
def test_openrlhf_advantages_read_the_drawn_whitening_option(orl):
    adapter, root = orl
    inp = {"rewards": T([1.0, 0.0]), "loss_mask": T([[1, 1, 0], [1, 0, 0]]),
           "values": T([[0.1, 0.2, 0.3], [0.5, 0.0, 0.0]])}
    cfg = {"estimator": "gae", "gamma": 0.9, "lam": 0.95, "normalize_advantages": True}
    white, reads = _call(adapter, root, "advantages", inp, cfg)
    assert [False] in (reads.get("algo.advantage.no_std_norm"), reads.get("no_advantage_std_norm")), reads
    centred, reads = _call(adapter, root, "advantages", inp, {**cfg, "trainer:no_advantage_std_norm": True})
    assert [True] in (reads.get("algo.advantage.no_std_norm"), reads.get("no_advantage_std_norm")), reads
    m = inp["loss_mask"].bool()
    assert float(centred["advantages"][m].mean()) == pytest.approx(0.0, abs=1e-6)  # still centred
    assert float(centred["advantages"][m].std()) != pytest.approx(float(white["advantages"][m].std()))


@needs_openrlhf
@pytest.mark.skipif(not REPO, reason="set SENTINEL_OPENRLHF_REPO to an OpenRLHF clone (its PolicyLoss at HEAD)")
def test_openrlhf_policy_loss_reaches_the_vllm_is_correction(orl):
    adapter, root = orl
    base, reads = _call(adapter, root, "policy_loss", _policy_batch(), {})
    assert reads.get("enable_vllm_is_correction") == [False], reads
    cfg = {"trainer:enable_vllm_is_correction": True, "trainer:vllm_is_correction_type": "icepop"}
    try:
        drawn, reads = _call(adapter, root, "policy_loss", _policy_batch(), cfg)
    except options_unsupported() as e:
        pytest.skip(f"this checkout's PolicyLoss has no vllm_is_correction_type: {e}")
    assert reads["enable_vllm_is_correction"] == [True] and reads["vllm_is_correction_type"] == ["icepop"], reads
    # icepop zeroes the token whose rollout ratio exp(-0.9 - -2.0) = 3.0 lies outside [0.5, 2.0]
    assert float(drawn["loss"]) != pytest.approx(float(base["loss"]))


@needs_openrlhf
@pytest.mark.skipif(not REPO, reason="set SENTINEL_OPENRLHF_REPO to an OpenRLHF clone (its get_loss_batch_info)")
def test_openrlhf_policy_loss_reaches_the_dynamic_batch_counts(orl):
    """trainer:dynamic_batch_enable: get_loss_batch_info takes the replay buffer's per-step counts
    (DYNAMIC_STEP = 3 micro-batches of 3 tokens and 2 rows each), so the token-mean loss is a
    third of the micro-batch's own; dynamic batching off, the counts stay the micro-batch's."""
    adapter, root = orl
    batch = {**_policy_batch(), "loss_mask": T([[1, 1, 0], [1, 0, 0]]), "log_probs": T([[-0.5, -1.0, -0.3]] * 2),
             "old_log_probs": T([[-0.6, -0.9, -0.3]] * 2), "advantages": T([[1.0, 1.0, 1.0]] * 2)}
    batch.pop("rollout_log_probs")
    base = adapter.call("policy_loss", batch, {}).outputs["loss"]
    on = {"trainer:dynamic_batch_enable": True}
    try:
        dynamic = adapter.call("policy_loss", batch, on).outputs["loss"]
    except options_unsupported() as e:
        pytest.skip(f"this checkout's get_loss_batch_info has no dynamic batching: {e}")
    assert float(dynamic) == pytest.approx(float(base) / 3)
    seq = {"loss_agg": "seq-mean-token-mean"}  # the row count (global_batch_size) divides this one
    per_seq = adapter.call("policy_loss", batch, {**seq, **on}).outputs
    assert float(per_seq["loss"]) == pytest.approx(float(adapter.call("policy_loss", batch, seq).outputs["loss"]) / 3)


def options_unsupported():
    from sentinel.errors import Unsupported
    return Unsupported


@needs_openrlhf
def test_openrlhf_reward_norm_reaches_the_drawn_estimator(orl):
    """trainer:advantage_estimator on reward_norm: rloo's leave-one-out mean and reinforce_baseline's
    group mean, read by the experience maker as algo.advantage.estimator (or advantage_estimator)."""
    adapter, root = orl
    inp = {"rewards": T([1.0, 0.0, 0.5, 0.5]), "group": T([0, 0, 1, 1])}
    cfg = {"mean_level": "group", "std_level": "group", "group_size": 2}
    rloo, reads = _call(adapter, root, "reward_norm", inp, {**cfg, "trainer:advantage_estimator": "rloo"})
    assert ["rloo"] in (reads.get("algo.advantage.estimator"), reads.get("advantage_estimator")), reads
    assert rloo["rewards"].tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])  # r - the other sample's reward
    base, _ = _call(adapter, root, "reward_norm", inp, {**cfg, "trainer:advantage_estimator": "reinforce_baseline"})
    assert base["rewards"].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
