"""The bundled reference math, by hand: seed-bug numbers (correct and planted) and small cases."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

try:
    import sentinel_adapters  # noqa: F401
except ImportError:  # not installed: map the adapters/ folder to its import name
    _spec = importlib.machinery.ModuleSpec("sentinel_adapters", None, is_package=True)
    _spec.submodule_search_locations = [str(Path(__file__).resolve().parents[1] / "adapters")]
    sys.modules["sentinel_adapters"] = importlib.util.module_from_spec(_spec)

from sentinel.boundaries import BOUNDARIES
from sentinel_adapters.reference import ops as R
from sentinel_adapters.reference.plants import PLANTS
from sentinel_adapters.reference.adapter import ReferenceAdapter

t = torch.tensor


def call(boundary, inputs, config=None, plant=None):
    cfg = {**BOUNDARIES[boundary].config, **(config or {})}
    return ReferenceAdapter(options={"plant": plant}).call(boundary, inputs, cfg).outputs


def test_adapter_speaks_every_boundary_and_every_plant_replaces_a_table_entry():
    assert set(ReferenceAdapter().supported()) == set(BOUNDARIES)
    assert all(p.replaces in R.REFERENCE_OPS for p in PLANTS.values())
    assert all(callable(p.code) and p.hunt in BOUNDARIES for p in PLANTS.values())
    assert ReferenceAdapter().load()["version"]


# --- seed 1: OPSM ----------------------------------------------------------------------

OPSM = dict(log_probs=t([[0.0, 0.0, 0.0]]), old_log_probs=t([[1.0, 1.0, 1.0]]),
            advantages=t([[-0.5, 0.25, -0.25]]), loss_mask=t([[1.0, 1.0, 1.0]]))
OPSM_CFG = {"opsm_delta": 0.1, "eps_clip": 0.2, "eps_clip_high": 0.2}


def test_opsm_rejects_the_whole_sequence():
    out = call("opsm_mask", OPSM, OPSM_CFG)
    assert out["opsm_mask"].tolist() == [[0.0, 0.0, 0.0]]
    assert out["opsm_clipfrac"].item() == 1.0
    assert out["reduced_policy_loss"].item() == 0.0


def test_planted_opsm_token_level_reproduces_seed_numbers():
    out = call("opsm_mask", OPSM, OPSM_CFG, plant="opsm-token-level")
    assert out["opsm_mask"].tolist() == [[0.0, 1.0, 0.0]]
    assert out["opsm_clipfrac"].item() == pytest.approx(0.6666666865348816, abs=1e-7)
    assert out["pg_loss"][0, 1].item() == pytest.approx(-0.09196986258029938, abs=1e-7)
    assert out["reduced_policy_loss"].item() == pytest.approx(-0.030656620860099792, abs=1e-7)


def test_opsm_ignores_masked_tokens_in_the_decision():
    inputs = {**OPSM, "log_probs": t([[0.0, 0.0, float("nan")]]), "advantages": t([[-0.5, 0.25, 9.0]]),
              "loss_mask": t([[1.0, 1.0, 0.0]])}
    out = call("opsm_mask", inputs, OPSM_CFG)
    assert out["opsm_mask"].tolist() == [[0.0, 0.0, 0.0]]
    assert out["opsm_clipfrac"].item() == 1.0 and out["reduced_policy_loss"].item() == 0.0


# --- seed 2: reward normalisation before the no-EOS mask ---------------------------------

NO_EOS = dict(attention_mask=t([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]), loss_mask=t([[0.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))
NO_EOS_CFG = {"estimator": "gae", "reward_norm": {"mean_level": "batch", "std_level": None},
              "mask_no_eos_with_zero": True, "reward_clip": 1000.0, "kl_coef": 0.0, "gamma": 1.0, "lam": 1.0}


@pytest.mark.parametrize("plant, shift", [(None, 0.0), ("reward-norm-before-no-eos", -49.5)])
def test_no_eos_outlier_reward(plant, shift):
    base = call("advantages", {**NO_EOS, "rewards": t([1.0, 1.0])}, NO_EOS_CFG, plant)["advantages"]
    outlier = call("advantages", {**NO_EOS, "rewards": t([1.0, 100.0])}, NO_EOS_CFG, plant)["advantages"]
    assert (outlier - base).tolist() == [[0.0, shift, 0.0], [0.0, 0.0, 0.0]]


def test_reward_norm_boundary_excludes_masked_rows():
    out = call("reward_norm", dict(rewards=t([1.0, 3.0, 1000.0]), mask=t([1.0, 1.0, 0.0])), {"eps": 0.0})
    s = math.sqrt(2.0)  # unbiased std of [1, 3]
    assert out["rewards"].tolist() == pytest.approx([-1 / s, 1 / s, 0.0])


# --- seed 3: the logged KL stays raw ------------------------------------------------------

KL_IN = dict(rewards=t([1.0, 2.0]), log_probs=t([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]),
             ref_log_probs=t([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), loss_mask=t([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]))


def test_logged_kl_is_raw_and_token_rewards_are_shaped():
    out = call("advantages", KL_IN, {"estimator": "gae", "kl_coef": 0.05})
    raw = t([[0.1, 0.2, 0.0], [0.4, 0.5, 0.6]])
    assert torch.allclose(out["logged_kl"], raw)
    shaped = -0.05 * raw + t([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    assert torch.allclose(out["token_rewards"], shaped)
    assert torch.allclose(out["advantages"], shaped.flip(1).cumsum(1).flip(1) * KL_IN["loss_mask"])


def test_planted_kl_inplace_shaping_overwrites_logged_kl():
    out = call("advantages", KL_IN, {"estimator": "gae", "kl_coef": 0.05}, plant="kl-inplace-shaping")
    assert torch.equal(out["logged_kl"], out["token_rewards"])
    assert not torch.allclose(out["logged_kl"], t([[0.1, 0.2, 0.0], [0.4, 0.5, 0.6]]))


# --- seed 4: off-policy IS -----------------------------------------------------------------

def _is(method, lp, plant=None, **cfg):
    lp = lp.clone().requires_grad_(True)
    inputs = dict(log_probs=lp, old_log_probs=t([[0.1, -0.2, 0.05]]), rollout_log_probs=t([[0.0, 0.0, 0.0]]),
                  advantages=t([[1.0, -1.0, 2.0]]), loss_mask=t([[1.0, 1.0, 1.0]]))
    out = call("is_correction", inputs, {"method": method, **cfg}, plant)
    out["loss"].backward()
    return out, lp.grad


def test_off_policy_is_gradient_is_minus_w_a_over_n_and_equals_vanilla_tis():
    lp = t([[0.1, -0.2, 0.05]])
    out, grad = _is("off_policy_is", lp)
    adv = t([[1.0, -1.0, 2.0]])
    assert not out["weights"].requires_grad
    assert torch.allclose(out["weights"], torch.exp(lp).clamp(0.8, 1.2))
    assert torch.allclose(grad, -out["weights"] * adv / 3)
    _, tis_grad = _is("vanilla_tis", lp, tis_clip_low=0.8, tis_clip=1.2)  # log_probs == old_log_probs
    assert torch.allclose(grad, tis_grad)


def test_icepop_zeroes_weights_outside_the_band():
    out, _ = _is("icepop", t([[0.1, -0.2, 0.05]]), tis_clip_low=0.9, tis_clip=1.2)
    assert torch.allclose(out["weights"], t([[math.exp(0.1), 0.0, math.exp(0.05)]]))


def test_planted_attached_is_weight_carries_gradient():
    lp = t([[0.1, -0.2, 0.05]])
    out, grad = _is("off_policy_is", lp, plant="is-weight-attached")
    assert out["weights"].requires_grad
    assert not torch.allclose(grad, -out["weights"].detach() * t([[1.0, -1.0, 2.0]]) / 3)


# --- policy losses -------------------------------------------------------------------------

def test_ppo_asymmetric_and_dual_clip():
    ratio = t([1.5, 0.5, 5.0, 5.0])
    adv = t([1.0, -1.0, -1.0, 1.0])
    loss, clipfrac = R.ppo_policy_loss(ratio.log(), torch.zeros(4), adv, 0.2, 0.28)
    assert loss.tolist() == pytest.approx([-1.28, 0.8, 5.0, -1.28])
    assert clipfrac.tolist() == [1.0, 1.0, 0.0, 1.0]
    dual, _ = R.ppo_policy_loss(ratio.log(), torch.zeros(4), adv, 0.2, 0.28, eps_clip_c=3.0)
    assert dual.tolist() == pytest.approx([-1.28, 0.8, 3.0, -1.28])  # only A<0 is capped
    same, _ = R.ppo_policy_loss(ratio.log(), torch.zeros(4), adv, 0.2, None)
    assert same[0].item() == pytest.approx(-1.2)


def test_cispo_gradient_flows_through_log_pi_even_when_clipped():
    lp = t([[1.0, -0.05]], requires_grad=True)  # ratio e (clipped to 1.28), ratio ~0.95 (not)
    out = call("cispo_loss", dict(log_probs=lp, old_log_probs=t([[0.0, 0.0]]), advantages=t([[2.0, 2.0]]),
                                  loss_mask=t([[1.0, 1.0]])), {"eps_clip": 1.0, "eps_clip_high": 0.28})
    out["loss"].backward()
    w = t([[1.28, math.exp(-0.05)]])
    assert out["clipfrac"].tolist() == [[1.0, 0.0]]
    assert torch.allclose(lp.grad, -w * 2.0 / 2)


def test_gspo_seq_kl_excludes_masked_positions():
    lp = t([[0.0, -1.0, float("nan")]], requires_grad=True)
    old = t([[0.5, 0.5, float("inf")]])
    out = call("gspo_kl", dict(log_probs=lp, old_log_probs=old, loss_mask=t([[1.0, 1.0, 0.0]])))
    assert torch.allclose(out["seq_kl"], t([[1.0, 1.0, 1.0]]))
    out["seq_kl"][0, 0].backward()
    assert torch.equal(lp.grad, t([[-0.5, -0.5, 0.0]]))


def test_planted_masked_kl_leak():
    out = call("gspo_kl", dict(log_probs=t([[0.0, -1.0, float("nan")]]), old_log_probs=t([[0.5, 0.5, 0.0]]),
                               loss_mask=t([[1.0, 1.0, 0.0]])), plant="masked-kl-leak")
    assert torch.isnan(out["seq_kl"]).all()


# --- KL estimators -------------------------------------------------------------------------

@pytest.mark.parametrize("kl_type, f", [
    ("k1", lambda x: x), ("k2", lambda x: x * x / 2), ("k3", lambda x: math.exp(-x) - 1 + x),
    ("low_var_kl", lambda x: min(math.exp(-x) - 1 + x, 10.0))])
def test_kl_estimators(kl_type, f):
    lp, ref = t([[0.3, -0.2, -15.0, float("nan")]]), t([[0.1, 0.4, 0.0, 0.0]])
    out = call("kl", dict(log_probs=lp, ref_log_probs=ref, loss_mask=t([[1.0, 1.0, 1.0, 0.0]])), {"kl_type": kl_type})
    expected = [f(a - b) for a, b in zip(lp[0, :3].tolist(), ref[0, :3].tolist())] + [0.0]
    assert out["kl"][0].tolist() == pytest.approx(expected, rel=1e-5)


def test_planted_input_mutation_writes_into_ref_log_probs():
    lp, ref = t([[0.3, -0.2]], requires_grad=True), t([[0.1, 0.4]])
    call("kl", dict(log_probs=lp, ref_log_probs=ref, loss_mask=t([[1.0, 1.0]])))
    assert ref[0].tolist() == pytest.approx([0.1, 0.4])
    call("kl", dict(log_probs=lp, ref_log_probs=ref, loss_mask=t([[1.0, 1.0]])), plant="input-mutation")
    assert ref[0].tolist() == pytest.approx([0.2, -0.6])


# --- GAE and estimators ---------------------------------------------------------------------

def test_gae_by_hand_and_masked_tokens_skipped():
    # gamma 0.9, lam 0.8: d2 = 1 - .1 = .9; d1 = .9*.1 - .2 = -.11; d0 = .9*.2 - .5 = -.32
    # A2 = .9; A1 = -.11 + .72*.9 = .538; A0 = -.32 + .72*.538 = .06736
    out = call("gae", dict(token_rewards=t([[0.0, 0.0, 1.0]]), values=t([[0.5, 0.2, 0.1]]),
                           loss_mask=t([[1.0, 1.0, 1.0]])), {"gamma": 0.9, "lam": 0.8})
    assert out["advantages"][0].tolist() == pytest.approx([0.06736, 0.538, 0.9], abs=1e-6)
    assert out["returns"][0].tolist() == pytest.approx([0.56736, 0.738, 1.0], abs=1e-6)
    nan = float("nan")
    padded = call("gae", dict(token_rewards=t([[0.0, nan, 0.0, 1.0, 7.0]]), values=t([[0.5, nan, 0.2, 0.1, 3.0]]),
                              loss_mask=t([[1.0, 0.0, 1.0, 1.0, 0.0]])), {"gamma": 0.9, "lam": 0.8})
    assert padded["advantages"][0].tolist() == pytest.approx([0.06736, 0.0, 0.538, 0.9, 0.0], abs=1e-6)


def test_grpo_variable_size_groups():
    rewards, group = t([1.0, 0.0, 1.0, 5.0, 3.0]), t([7, 7, 7, 2, 2])
    out = call("advantages", dict(rewards=rewards, group=group, loss_mask=torch.ones(5, 2)), {"estimator": "grpo"})
    g0, g1 = rewards[:3], rewards[3:]
    expected = torch.cat([(g0 - g0.mean()) / (g0.std() + 1e-6), (g1 - g1.mean()) / (g1.std() + 1e-6)])
    assert torch.allclose(out["advantages"], expected[:, None].expand(5, 2))
    dr = call("advantages", dict(rewards=rewards, group=group, loss_mask=torch.ones(5, 2)),
              {"estimator": "grpo", "reward_norm": {"mean_level": "group", "std_level": None}})
    assert dr["advantages"][:, 0].tolist() == pytest.approx([1 / 3, -2 / 3, 1 / 3, 1.0, -1.0])


def test_normalize_advantages_whitens_valid_tokens_only():
    mask = t([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    out = call("advantages", dict(rewards=t([1.0, 4.0]), loss_mask=mask), {"normalize_advantages": True})
    valid = out["advantages"][mask.bool()]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-6) and valid.std().item() == pytest.approx(1.0, abs=1e-5)
    assert out["advantages"][~mask.bool()].tolist() == [0.0, 0.0, 0.0]


def test_planted_grpo_cross_group_and_row_order():
    rewards, group, mask = t([1.0, 0.0, 5.0, 3.0]), t([0, 1, 0, 1]), torch.ones(4, 1)
    cfg = {"estimator": "grpo", "reward_norm": {"mean_level": "group", "std_level": None}}
    ref = call("advantages", dict(rewards=rewards, group=group, loss_mask=mask), cfg)["advantages"][:, 0]
    assert ref.tolist() == [-2.0, -1.5, 2.0, 1.5]
    cross = call("advantages", dict(rewards=rewards, group=group, loss_mask=mask), cfg, "grpo-cross-group")
    assert cross["advantages"][:, 0].tolist() == [-1.25, -2.25, 2.75, 0.75]
    chunked = call("advantages", dict(rewards=rewards, group=group, loss_mask=mask), cfg, "row-order")
    assert chunked["advantages"][:, 0].tolist() == [0.5, -0.5, 1.0, -1.0]


def test_reinforce_plus_plus_and_baseline():
    inputs = dict(rewards=t([1.0, 3.0]), log_probs=t([[0.2, 0.4], [0.0, 0.0]]), ref_log_probs=torch.zeros(2, 2),
                  loss_mask=t([[1.0, 1.0], [1.0, 1.0]]), group=t([0, 0]))
    rpp = call("advantages", inputs, {"estimator": "reinforce_plus_plus", "kl_coef": 0.5, "gamma": 0.5})
    # token rewards row 0: [-0.1, -0.2 + 1]; returns: [-0.1 + 0.5 * 0.8, 0.8]
    assert rpp["advantages"][0].tolist() == pytest.approx([0.3, 0.8])
    base = call("advantages", inputs, {"estimator": "reinforce_plus_plus_baseline", "kl_coef": 0.5})
    assert torch.allclose(base["advantages"], t([[-1.1, -1.2], [1.0, 1.0]]))


# --- loss aggregation ------------------------------------------------------------------------

def test_loss_aggregation_modes_and_padding_plant():
    values, mask = t([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [5.0, 5.0, 5.0]]), t([[1.0, 1.0, 1.0], [1.0, 0, 0], [0, 0, 0]])
    loss = {m: call("loss_agg", dict(values=values, loss_mask=mask), {"mode": m})["loss"].item()
            for m in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")}
    assert loss == {"token-mean": 2.5, "seq-mean-token-mean": 3.0, "seq-mean-token-sum": 5.0}
    planted = call("loss_agg", dict(values=values, loss_mask=mask), plant="loss-agg-counts-padding")["loss"].item()
    assert planted == pytest.approx(10 / 9)


# --- no boundary writes to its inputs ---------------------------------------------------------

def _inputs(boundary):
    g = torch.Generator().manual_seed(0)
    out = {}
    for p in BOUNDARIES[boundary].inputs:
        shape = {"token": (3, 4), "vocab": (3, 4, 5)}.get(p.kind, (3,))
        if p.dtype == "mask":
            out[p.name] = torch.ones(shape) if p.kind == "row" or p.name == "attention_mask" else t(
                [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
        elif p.dtype == "int":
            out[p.name] = torch.randint(0, 5, shape, generator=g) if p.kind == "token" else t([0, 1, 0])
        else:
            out[p.name] = -torch.rand(shape, generator=g)
    return out


@pytest.mark.parametrize("boundary", sorted(BOUNDARIES))
def test_reference_never_mutates_inputs(boundary):
    inputs = _inputs(boundary)
    before = {k: v.clone() for k, v in inputs.items()}
    call(boundary, inputs, {"kl_coef": 0.1, "estimator": "gae"} if boundary == "advantages" else {})
    assert all(torch.equal(before[k], inputs[k]) for k in inputs)


def test_gspo_token_log_ratio_is_the_sequence_ratio_with_per_token_gradient():
    lp = t([[-1.0, -0.2, -1.5, 9.0]], requires_grad=True)
    old = t([[-1.1, -0.9, -1.2, 0.0]])
    m = t([[1.0, 1.0, 1.0, 0.0]])
    r = R.gspo_token_log_ratio(lp, old, m)
    assert r[0, :3].tolist() == pytest.approx([(0.1 + 0.7 - 0.3) / 3] * 3)  # the padding's 9.0 is not in it
    r[0, 1].backward()
    assert lp.grad.tolist() == [[0.0, 1.0, 0.0, 0.0]]  # only through its own token


def test_decoupled_weight_is_detached_prox_over_behaviour():
    prox = t([[-1.05, -0.5]], requires_grad=True)
    w = R.decoupled_weight(prox, t([[-1.2, -0.4]]))
    assert w.tolist()[0] == pytest.approx([math.exp(0.15), math.exp(-0.1)])
    assert not w.requires_grad
