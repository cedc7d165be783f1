"""The OpenRLHF adapter against OpenRLHF's real code (the installed package; a checkout's
history where SENTINEL_OPENRLHF_REPO names one), and a planted-bug copy of it.

Install the target with: pip install --no-deps openrlhf==0.11.2 && pip install 'rl-sentinel[openrlhf]'
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from sentinel.catalog import catalog_path
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths
from sentinel.errors import Unsupported

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("openrlhf") is None,
    reason="openrlhf is not installed (pip install --no-deps openrlhf==0.11.2 && pip install 'rl-sentinel[openrlhf]')",
)]

HERE = Path(__file__).parent
REPO = os.environ.get("SENTINEL_OPENRLHF_REPO")
T = torch.tensor


@pytest.fixture(scope="module")
def orl():
    from sentinel_adapters.openrlhf import OpenRLHFAdapter

    adapter = OpenRLHFAdapter(None, torch.device("cpu"))
    adapter.facts = adapter.load()
    return adapter


def test_load_facts(orl):
    facts = orl.facts
    assert facts["version"] and facts["version"] != "unknown"
    assert {"openrlhf/models/loss.py", "openrlhf/trainer/ppo_utils/experience_maker.py"} <= set(facts["module_files"])
    assert "openrlhf" not in facts["stubs"] and "torch" not in facts["stubs"]
    assert "optional_module_errors" not in facts


def test_every_declared_call_resolves(orl):
    from sentinel_adapters.openrlhf import OpenRLHFAdapter
    from sentinel.adapters.binding import resolve

    calls = {c for row in OpenRLHFAdapter.mapping().values() for c in row["calls"]}
    assert calls and [c for c in sorted(calls) if resolve(c) is None] == []


def test_log_probs_take_the_torch_path(orl):
    """A stubbed flash_attn must not send log_probs_from_logits down its Triton path."""
    if importlib.util.find_spec("flash_attn") is not None and "flash_attn" not in orl.stubs:
        pytest.skip("a real flash_attn is installed")
    with pytest.raises(ImportError):
        importlib.import_module("flash_attn.ops.triton.cross_entropy")
    logits = torch.randn(2, 3, 5)
    labels = torch.randint(0, 5, (2, 3))
    lp = orl.mods["openrlhf.models.utils"].log_probs_from_logits(logits.clone(), labels)
    want = logits.log_softmax(-1).gather(-1, labels[..., None])[..., 0]
    assert torch.allclose(lp, want, atol=1e-6)


def test_policy_loss_token_mean_and_gradient(orl):
    lp = T([[-0.5, -1.0, -0.3]], requires_grad=True)
    inputs = {"log_probs": lp, "old_log_probs": T([[-0.6, -0.9, -0.3]]), "advantages": T([[1.0, 1.0, 1.0]]),
              "loss_mask": T([[1, 1, 0]])}
    res = orl.call("policy_loss", inputs, {"eps_clip": 0.2})
    assert res.function.qualname == "PolicyLoss.forward"
    r0, r1 = math.exp(0.1), math.exp(-0.1)
    assert res.outputs["pg_loss"][0, :2].tolist() == pytest.approx([-r0, -r1], abs=1e-6)
    assert res.outputs["loss"].item() == pytest.approx(-(r0 + r1) / 2, abs=1e-6)
    res.outputs["loss"].backward()
    assert lp.grad[0].tolist() == pytest.approx([-r0 / 2, -r1 / 2, 0.0], abs=1e-6)


def test_policy_loss_dual_clip_and_gspo(orl):
    # A < 0 and ratio e^2: PPO's loss -A * clip(r) = 1.2 > ... dual clip caps it at -A * c = 3
    inputs = {"log_probs": T([[1.5, -1.0]]), "old_log_probs": T([[-0.5, -1.0]]), "advantages": T([[-1.0, -1.0]]),
              "loss_mask": T([[1, 1]])}
    res = orl.call("policy_loss", inputs, {"eps_clip": 0.2, "eps_clip_c": 3.0})
    assert res.outputs["pg_loss"][0].tolist() == pytest.approx([3.0, 1.0], abs=1e-6)
    # GSPO: one sequence ratio exp(mean(lp - old)) = e^1 clipped to 1.2 for A > 0 at every token
    res = orl.call("policy_loss", {**inputs, "advantages": T([[1.0, 1.0]])},
                   {"importance_sampling_level": "sequence", "loss_agg": "seq-mean-token-mean"})
    assert res.outputs["pg_loss"][0].tolist() == pytest.approx([-1.2, -1.2], abs=1e-6)
    with pytest.raises(Unsupported, match="seq-mean-token-mean"):
        orl.call("policy_loss", inputs, {"importance_sampling_level": "sequence", "loss_agg": "token-mean"})


def test_policy_loss_that_skips_aggregate_loss_is_an_error(orl, monkeypatch):
    """A version that has aggregate_loss but a forward that returns the per-token loss unreduced
    is changed code (a trainer's backward would fail on it), not a missing symbol: an error."""
    mod = orl.mods["openrlhf.models.loss"]
    if not callable(getattr(mod, "aggregate_loss", None)):
        pytest.skip("this openrlhf reduces inline (no aggregate_loss)")

    def unreduced(self, log_probs, old_log_probs, advantages, action_mask=None, rollout_log_probs=None,
                  dp_size=1, batch_num_tokens=None, global_batch_size=None):
        return -(log_probs - old_log_probs).exp() * advantages, None, None, None

    monkeypatch.setattr(mod.PolicyLoss, "forward", unreduced)
    inputs = {"log_probs": T([[-0.5, -1.0]]), "old_log_probs": T([[-0.6, -0.9]]), "advantages": T([[1.0, 1.0]]),
              "loss_mask": T([[1, 1]])}
    with pytest.raises(RuntimeError, match="did not call aggregate_loss"):
        orl.call("policy_loss", inputs, {"eps_clip": 0.2})


def test_is_correction_weights(orl):
    inputs = {"log_probs": T([[-1.0, -0.5, -2.0]]), "old_log_probs": T([[-1.0, -0.5, -2.0]]),
              "rollout_log_probs": T([[-1.1, -0.2, -2.9]]), "advantages": T([[1.0, -0.5, 2.0]]),
              "loss_mask": T([[1, 1, 1]])}
    tis = orl.call("is_correction", inputs, {"method": "vanilla_tis", "tis_clip": 2.0})
    assert tis.outputs["weights"][0].tolist() == pytest.approx([math.exp(0.1), math.exp(-0.3), 2.0], abs=1e-6)
    assert not tis.outputs["weights"].requires_grad
    ice = orl.call("is_correction", inputs, {"method": "icepop", "tis_clip_low": 0.5, "tis_clip": 2.0})
    assert ice.outputs["weights"][0].tolist() == pytest.approx([math.exp(0.1), math.exp(-0.3), 0.0], abs=1e-6)
    with pytest.raises(Unsupported, match="pi_theta / pi_rollout"):
        orl.call("is_correction", inputs, {"method": "off_policy_is"})


def test_loss_agg_and_kl(orl):
    values, mask = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), T([[1, 1, 0], [0, 0, 0]])
    assert float(orl.call("loss_agg", {"values": values, "loss_mask": mask}, {"mode": "token-mean"}).outputs["loss"]) \
        == pytest.approx(1.5)
    # seq-mean-token-mean excludes the fully masked row
    assert float(orl.call("loss_agg", {"values": values, "loss_mask": mask},
                          {"mode": "seq-mean-token-mean"}).outputs["loss"]) == pytest.approx(1.5)
    lp, ref = T([[-0.5, -1.0]]), T([[-0.6, -0.9]])
    for kl_type, want in (("k1", [0.1, -0.1]), ("k2", [0.005, 0.005]),
                          ("k3", [math.exp(-0.1) - 1 + 0.1, math.exp(0.1) - 1 - 0.1])):
        kl = orl.call("kl", {"log_probs": lp, "ref_log_probs": ref, "loss_mask": T([[1, 1]])}, {"kl_type": kl_type})
        assert kl.outputs["kl"][0].tolist() == pytest.approx(want, abs=1e-6)


def test_gae_carries_lastgaelam_through_an_interior_hole(orl):
    """The finding gae-interior-hole-discount: one observation token between two actions adds one
    gamma * lambda step (0.9025 where skipping it gives 0.95)."""
    inputs = {"token_rewards": T([[0.0, 0.0, 1.0]]), "values": T([[0.0, 0.0, 0.0]]), "loss_mask": T([[1, 0, 1]])}
    res = orl.call("gae", inputs, {"gamma": 1.0, "lam": 0.95})
    assert res.function.qualname.endswith("get_advantages_and_returns")
    assert res.outputs["advantages"][0].tolist() == pytest.approx([0.9025, 0.95, 1.0], abs=1e-6)
    no_hole = orl.call("gae", {**inputs, "loss_mask": T([[1, 1, 1]])}, {"gamma": 1.0, "lam": 0.95})
    assert no_hole.outputs["advantages"][0].tolist() == pytest.approx([0.9025, 0.95, 1.0], abs=1e-6)


def test_advantages_estimators(orl):
    mask = T([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    rewards, group = T([1.0, 0.0, 2.0, 1.0]), T([0, 1, 0, 1])
    grpo = orl.call("advantages", {"rewards": rewards, "loss_mask": mask, "group": group}, {"estimator": "grpo"})
    # group_norm: groups {0, 2} and {1, 3}: (r - mean) / (std + 1e-9), std unbiased = 0.7071
    z = 1 / math.sqrt(2)
    assert grpo.outputs["advantages"][:, 0].tolist() == pytest.approx([-z, -z, z, z], abs=1e-6)
    dr = orl.call("advantages", {"rewards": rewards, "loss_mask": mask, "group": group},
                  {"estimator": "grpo", "reward_norm": {"mean_level": "group", "std_level": None}})
    assert dr.outputs["advantages"][:, 0].tolist() == pytest.approx([-0.5, -0.5, 0.5, 0.5], abs=1e-6)
    rloo = orl.call("advantages", {"rewards": rewards, "loss_mask": mask, "group": group}, {"estimator": "rloo"})
    assert rloo.outputs["advantages"][:, 0].tolist() == pytest.approx([-1.0, -1.0, 1.0, 1.0], abs=1e-6)
    # gae, gamma 0.9 lambda 0.95, reward at each row's last action token; before OpenRLHF's whitening
    inp = {"rewards": T([1.0, 0.0]), "loss_mask": T([[1, 1, 0], [1, 0, 0]]),
           "values": T([[0.1, 0.2, 0.3], [0.5, 0.0, 0.0]])}
    gae = orl.call("advantages", inp, {"estimator": "gae", "gamma": 0.9, "lam": 0.95})
    assert gae.outputs["advantages"][0, :2].tolist() == pytest.approx([0.764, 0.8], abs=1e-6)
    assert gae.outputs["advantages"][1, 0] == pytest.approx(-0.5)
    assert gae.outputs["token_rewards"].tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    white = orl.call("advantages", inp, {"estimator": "gae", "gamma": 0.9, "lam": 0.95, "normalize_advantages": True})
    valid = white.outputs["advantages"][inp["loss_mask"].bool()]
    assert float(valid.mean()) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(Unsupported, match="does not normalise"):
        orl.call("advantages", {"rewards": rewards, "loss_mask": mask, "group": group},
                 {"estimator": "grpo", "normalize_advantages": True})
    with pytest.raises(Unsupported, match="groups of sizes"):
        orl.call("advantages", {"rewards": rewards, "loss_mask": mask, "group": T([0, 0, 0, 1])}, {"estimator": "grpo"})


def _planted(fn, old: str, new: str):
    """The code of `fn` (a decorated method: the function under the decorator) with one line
    changed, compiled in its module's namespace as `sentinel mutate` applies a mutant."""
    import inspect

    from sentinel.mutate.apply import compiled

    fn = inspect.unwrap(fn)
    src = inspect.getsource(fn)
    assert src.count(old) == 1, f"the plant's line is not in {fn.__qualname__} at this version"
    return fn, compiled(fn, src.replace(old, new), fn.__code__.co_firstlineno)


def test_experiences_are_split_as_the_trainer_splits_them(orl, monkeypatch):
    """advantages hands the maker the experiences split_rollout_samples makes: one per
    micro-batch of rows (rollout.micro_batch_size, 1 by default), or dynamic batching's
    seqlen-balanced partition, whose experiences interleave prompts. OpenRLHF's answer is the
    same under every layout; a maker that hands the shaped rewards back in prompt order instead
    of its experiences' (the `[indices]` dropped) is told apart only under dynamic batching."""
    mask = T([[1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0],
              [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]])
    inputs = {"rewards": T([1.0, 0.0, 3.0, 2.0, 0.5, -1.0]), "loss_mask": mask, "group": T([0, 0, 0, 1, 1, 1])}
    layouts = {"per row": {}, "at once": {"trainer:micro_rollout_batch_size": 256},
               "dynamic": {"trainer:dynamic_batch_enable": True}}

    def advantages(layout: str) -> torch.Tensor:
        res = orl.call("advantages", inputs, {"estimator": "grpo", **layouts[layout]})
        return res.outputs["advantages"]

    real = {k: advantages(k) for k in layouts}
    assert torch.equal(real["per row"], real["at once"]) and torch.equal(real["per row"], real["dynamic"])
    cls = orl._maker_class("compute_advantages_and_returns", "advantages")
    fn, code = _planted(cls.compute_advantages_and_returns, "rewards = rewards.reshape(-1)[indices].split(exp_len)",
                        "rewards = rewards.reshape(-1).split(exp_len)")
    monkeypatch.setattr(fn, "__code__", code)
    planted = {k: advantages(k) for k in layouts}
    assert torch.equal(planted["per row"], real["per row"]) and torch.equal(planted["at once"], real["at once"])
    assert not torch.allclose(planted["dynamic"], real["dynamic"])


def test_mask_no_eos_is_the_stop_properly_penalty(orl):
    """mask_no_eos_with_zero: ProRL's stop_properly_penalty_coef 0 on the truncated rows."""
    inputs = {"rewards": T([1.0, 5.0]), "loss_mask": T([[1, 1, 0], [1, 1, 1]]),
              "attention_mask": T([[1, 1, 0], [1, 1, 1]])}  # row 1 never emitted EOS
    res = orl.call("advantages", inputs, {"estimator": "reinforce_plus_plus", "mask_no_eos_with_zero": True})
    assert res.outputs["returns"].tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]


def test_reward_norm_one_token_responses(orl):
    r = T([1.0, 0.0, 2.0, 1.0])
    out = orl.call("reward_norm", {"rewards": r, "group": T([0, 0, 1, 1])},
                   {"mean_level": "group", "std_level": None}).outputs["rewards"]
    assert out.tolist() == pytest.approx([0.5, -0.5, 0.5, -0.5])
    out = orl.call("reward_norm", {"rewards": r}, {"mean_level": "batch", "std_level": "batch"}).outputs["rewards"]
    assert out.tolist() == pytest.approx(((r - r.mean()) / (r.std() + 1e-9)).tolist(), abs=1e-6)
    with pytest.raises(Unsupported, match="no row mask"):
        orl.call("reward_norm", {"rewards": r, "mask": T([1, 1, 0, 1])}, {"mean_level": "batch", "std_level": None})


# --- the catalog, the planted copy, the hunt --------------------------------------------------

@pytest.fixture(scope="module")
def catalogs(tmp_path_factory):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    scenarios = load_paths([catalog_path()])
    rep = run(scenarios, [TargetSpec("openrlhf"), TargetSpec("planted_targets:PlantedOpenRLHFAdapter")])
    return {t: {r.id: r for r in rep.results if r.target == t}
            for t in ("openrlhf", "planted_targets:PlantedOpenRLHFAdapter")}


def test_catalog_runs_without_errors(catalogs):
    real = catalogs["openrlhf"]
    assert real and not [r.id for r in real.values() if r.verdict == "error"]
    assert real["gae-interior-hole-discount"].verdict == "violated"
    assert real["ppo-gradient-unclipped"].verdict == "holds" and real["ppo-dual-clip"].verdict == "holds"
    assert sum(r.verdict == "holds" for r in real.values()) >= 10


def test_catalog_catches_the_planted_copy(catalogs):
    """An invariant that holds on OpenRLHF is violated on the copy with the padding-counting
    aggregate_loss."""
    real, planted = catalogs["openrlhf"], catalogs["planted_targets:PlantedOpenRLHFAdapter"]
    flipped = {(sid, i.family) for sid, r in planted.items() for k, i in enumerate(r.invariants)
               if i.verdict == "violated" and real[sid].invariants[k].verdict == "held"}
    assert ("loss-agg-token-mean", "padding_invariant") in flipped, flipped


MAKER = "openrlhf.trainer.ppo_utils.experience_maker"
ADV = "RemoteExperienceMaker.compute_advantages_and_returns"


@pytest.mark.parametrize("scenario, plant", [
    # the group mean of group_norm taken over the whole batch
    ("grpo-equal-groups-interleaved", [MAKER, ADV, "rewards = (rewards - rewards.mean(-1, keepdim=True)) / ",
                                       "rewards = (rewards - rewards.mean()) / "]),
    # rloo's leave-one-out sum taken over the whole batch
    ("rloo-equal-groups-interleaved", [MAKER, ADV, "baseline = (rewards.sum(-1, keepdim=True) - rewards)",
                                       "baseline = (rewards.sum() - rewards)"]),
    # the reward clipped from below only
    ("reinforce-pp-reward-clip", ["openrlhf.models.utils", "compute_reward",
                                  "r = r.clamp(min=reward_clip_range[0], max=reward_clip_range[1])",
                                  "r = r.clamp(min=reward_clip_range[0])"]),
])
def test_advantage_scenarios_catch_a_one_line_plant(scenario, plant, monkeypatch):
    """Each advantages scenario OpenRLHF runs (groups of one size; reward_clip) holds on its real
    code and is violated with one line of it changed."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("SENTINEL_TEST_PLANT", json.dumps(plant))
    # the planted copy is OpenRLHF under another name: a scenario written for openrlhf runs on it too
    scenarios = [dataclasses.replace(s, targets=["*"]) for s in load_paths([catalog_path()]) if s.id == scenario]
    assert scenarios
    rep = run(scenarios, [TargetSpec("openrlhf"), TargetSpec("planted_targets:OneLinePlantedOpenRLHF")])
    got = {r.target: r for r in rep.results}
    assert got["openrlhf"].verdict == "holds", got["openrlhf"].reason
    assert got["planted_targets:OneLinePlantedOpenRLHF"].verdict == "violated", \
        got["planted_targets:OneLinePlantedOpenRLHF"].reason


def test_hunt_catches_the_planted_copy(tmp_path):
    from planted_targets import hunt_both

    planted, real = hunt_both("planted_targets:PlantedOpenRLHFAdapter", "openrlhf", "loss_agg.padding_invariant", tmp_path)
    assert [f.family for f in planted.hunt.findings] == ["padding_invariant"] and planted.hunt.findings[0].reproduced is True
    assert real.hunt.findings == [] and {p.status for p in real.hunt.properties} == {"holds"}


# --- a checkout's history ----------------------------------------------------------------------

needs_repo = pytest.mark.skipif(not REPO, reason="set SENTINEL_OPENRLHF_REPO to an OpenRLHF clone with history")


@needs_repo
@pytest.mark.parametrize("rev", ["v0.5.0", "v0.8.0", "HEAD"])
def test_history_loads(rev):
    """The oldest supported release, a flat-args one and HEAD load, compute PPO's loss, and carry
    GAE through an interior hole (the finding's "since v0.5.0")."""
    if subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", f"{rev}^{{commit}}"],
                      capture_output=True).returncode:
        pytest.skip(f"{rev} is not in {REPO}")
    ids = ("ppo-clip-masked-batch", "gae-interior-hole-discount")
    rep = run([s for s in load_paths([catalog_path()]) if s.id in ids], [TargetSpec("openrlhf", REPO, rev)])
    got = {r.id: r for r in rep.results}
    assert got["ppo-clip-masked-batch"].verdict != "error", got["ppo-clip-masked-batch"].reason
    assert got["gae-interior-hole-discount"].verdict == "violated", got["gae-interior-hole-discount"].reason
