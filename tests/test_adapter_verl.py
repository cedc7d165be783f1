"""The verl adapter against verl's real code (the installed package).

Install the target with: pip install '.[verl]' && pip install --no-deps verl==0.9.1
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from sentinel.catalog import catalog_path
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths
from sentinel.errors import TargetLoadError, Unsupported
from sentinel_adapters.verl import VerlAdapter

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("verl") is None,
    reason="verl is not installed (pip install '.[verl]' && pip install --no-deps verl==0.9.1)",
)

T = torch.tensor


@pytest.fixture(scope="module")
def verl() -> VerlAdapter:
    adapter = VerlAdapter(None, torch.device("cpu"))
    adapter.facts = adapter.load()
    return adapter


def test_load_facts(verl):
    facts = verl.facts
    assert facts["version"] and facts["version"] != "unknown"
    assert "verl/trainer/ppo/core_algos.py" in facts["module_files"]
    assert set(facts["stubs"]) == set(verl.stubs)
    assert "verl" not in facts["stubs"] and "torch" not in facts["stubs"] and "omegaconf" not in facts["stubs"]
    assert {"gae", "grpo", "reinforce_plus_plus"} <= set(facts["adv_estimators"])


def test_every_declared_call_resolves(verl):
    from sentinel.adapters.binding import resolve

    # the engine module (temperature scaling, boundary logprobs) and the actor's (actor_logprobs)
    # are imported on first use
    verl.call("logprobs", {"logits": T([[[0.0, 1.0]]]), "tokens": T([[1]]), "loss_mask": T([[1.0]])}, {})
    absent = set()
    try:
        verl.call("actor_logprobs", {"logits": T([[[0.0, 1.0], [1.0, 0.0]]]), "tokens": T([[0, 1]]),
                                     "attention_mask": T([[1.0, 1.0]]), "loss_mask": T([[0.0, 1.0]])}, {})
    except Unsupported as e:  # the released 0.9 wheel ships no verl/workers/actor: nothing there to resolve
        assert "workers/actor/dp_actor.py at this version" in str(e)
        absent.add("actor_logprobs")
    calls = {c for b, row in VerlAdapter.mapping().items() if b not in absent for c in row["calls"]}
    assert calls and [c for c in sorted(calls) if resolve(c) is None] == []


def test_gae_three_tokens(verl):
    # deltas [-0.1, -0.1, 0.7] (gamma 1, lambda 0.95): A2 = 0.7, A1 = -0.1 + 0.95 * 0.7,
    # A0 = -0.1 + 0.95 * A1; the reported advantages are verl's GAE before its whitening.
    inputs = {"token_rewards": T([[0.0, 0.0, 1.0]]), "values": T([[0.5, 0.4, 0.3]]), "loss_mask": T([[1, 1, 1]])}
    res = verl.call("gae", inputs, {"gamma": 1.0, "lam": 0.95})
    assert res.function.qualname == "compute_gae_advantage_return"
    assert res.function.file == "verl/trainer/ppo/core_algos.py"
    assert res.outputs["advantages"][0].tolist() == pytest.approx([0.43675, 0.565, 0.7], abs=1e-6)
    assert res.outputs["returns"][0].tolist() == pytest.approx([0.93675, 0.965, 1.0], abs=1e-6)


def test_gae_estimator_whitening_is_observed_not_undone(verl):
    # One sequence, reward 1 at its last token, zero values, gamma = lambda = 1: raw advantages
    # [1, 1, 1] (returns too); verl's gae estimator always whitens (a constant maps to 0), and
    # the adapter reports what the trainer returns whatever normalize_advantages says.
    inputs = {"rewards": T([1.0]), "values": T([[0.0, 0.0, 0.0]]), "loss_mask": T([[1, 1, 1]])}
    for normalize in (False, True):
        out = verl.call("advantages", inputs, {"estimator": "gae", "normalize_advantages": normalize}).outputs
        assert out["advantages"][0].tolist() == pytest.approx([0.0, 0.0, 0.0], abs=1e-3)
        assert out["returns"][0].tolist() == pytest.approx([1.0, 1.0, 1.0])
        assert out["token_rewards"][0].tolist() == [0.0, 0.0, 1.0]


def test_kl_in_reward(verl):
    # apply_kl_penalty: token rewards = score at the last token - kl_coef * (log p - log p_ref)
    inputs = {"rewards": T([2.0]), "log_probs": T([[-0.5, -1.0, -0.2, 0.0]]),
              "ref_log_probs": T([[-0.6, -0.8, -0.4, 0.0]]), "values": T([[0.0] * 4]),
              "loss_mask": T([[1, 1, 1, 0]])}
    out = verl.call("advantages", inputs, {"estimator": "gae", "kl_coef": 0.1, "kl_type": "k1"}).outputs
    assert out["token_rewards"][0, :3].tolist() == pytest.approx([-0.01, 0.02, 1.98], abs=1e-6)
    assert out["returns"][0, :3].tolist() == pytest.approx([1.99, 2.0, 1.98], abs=1e-6)
    assert out["logged_kl"][0, :3].tolist() == pytest.approx([0.1, -0.2, 0.2], abs=1e-6)


def test_grpo_group_normalisation(verl):
    # group 0 = rows {0, 2}: rewards {1, 0}, mean 0.5, std 0.7071;
    # group 1 = rows {1, 3, 4}: rewards {0, 1, 1}, mean 2/3, std 0.5774
    inputs = {"rewards": T([1.0, 0.0, 0.0, 1.0, 1.0]), "group": T([0, 1, 0, 1, 1]),
              "loss_mask": T([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0]])}
    for estimator in ("grpo", "grpo_vectorized"):
        res = verl.call("advantages", inputs, {"estimator": estimator})
        adv = res.outputs["advantages"][:, 0].tolist()
        assert adv == pytest.approx([1 / math.sqrt(2), -2 / math.sqrt(3), -1 / math.sqrt(2),
                                     1 / math.sqrt(3), 1 / math.sqrt(3)], abs=1e-4), estimator
        assert res.outputs["advantages"][2, 1:].tolist() == [0.0, 0.0]  # masked tokens
    dr = verl.call("advantages", inputs, {"estimator": "grpo",
                                          "reward_norm": {"mean_level": "group", "std_level": None}})
    assert dr.outputs["advantages"][:, 0].tolist() == pytest.approx([0.5, -2 / 3, -0.5, 1 / 3, 1 / 3], abs=1e-6)


def test_loss_aggregation(verl):
    inputs = {"values": T([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]]), "loss_mask": T([[1, 1, 1, 0], [1, 0, 0, 0]])}
    expected = {"token-mean": 2.5, "seq-mean-token-mean": 3.0, "seq-mean-token-sum": 5.0}
    for mode, value in expected.items():
        res = verl.call("loss_agg", inputs, {"mode": mode})
        assert res.outputs["loss"].item() == pytest.approx(value), mode
        assert res.function.qualname == "agg_loss"


def test_ppo_dual_clip(verl):
    lp = T([[0.0, 0.0, 0.0, 0.0]], requires_grad=True)
    inputs = {"log_probs": lp, "old_log_probs": T([[-2.0, 0.1, -2.0, 0.05]]),
              "advantages": T([[-1.0, -1.0, 1.0, 2.0]]), "loss_mask": T([[1, 1, 1, 1]])}
    res = verl.call("policy_loss", inputs, {"eps_clip": 0.2, "eps_clip_high": 0.2, "eps_clip_c": 3.0})
    assert res.function.qualname == "compute_policy_loss_vanilla"
    assert res.outputs["pg_loss"][0].tolist() == pytest.approx([3.0, 0.9048374, -1.2, -1.9024588], abs=1e-6)
    assert res.outputs["loss"].item() == pytest.approx((3.0 + 0.9048374 - 1.2 - 1.9024588) / 4, abs=1e-6)


def test_kl_names(verl):
    lp, ref = T([[0.0, -1.0, -2.0]]), T([[0.0, -1.5, -1.0]])
    inputs = {"log_probs": lp, "ref_log_probs": ref, "loss_mask": T([[0, 1, 1]])}
    d = lp - ref
    for kind, value in {"k1": d, "k2": d ** 2 / 2, "k3": torch.exp(-d) - 1 + d}.items():
        torch.testing.assert_close(verl.call("kl", inputs, {"kl_type": kind}).outputs["kl"], value)


def test_unsupported_and_bad_location(verl, tmp_path):
    with pytest.raises(Unsupported, match="EOS"):
        verl.call("advantages", {"rewards": T([1.0]), "loss_mask": T([[1]])},
                  {"estimator": "grpo", "mask_no_eos_with_zero": True})
    with pytest.raises(Unsupported):
        verl.call("gspo_kl", {"log_probs": T([[0.0]]), "old_log_probs": T([[0.0]]), "loss_mask": T([[1]])}, {})
    with pytest.raises(TargetLoadError, match=r"verl.*core_algos"):
        VerlAdapter(tmp_path, torch.device("cpu")).load()


def test_catalog_scenarios_through_the_runner():
    scenarios = load_paths([catalog_path() / "kl" / "kl-estimators.yaml", catalog_path() / "policy" / "ppo-clip.yaml"])
    report = run(scenarios, [TargetSpec("verl")], timeout=60)
    verdicts = {r.id: r.verdict for r in report.results}
    assert verdicts and set(verdicts.values()) == {"holds"}, verdicts


def test_rejection_sampling_thresholds_sit_on_drawn_log_ratios(verl):
    """rollout_rs's bounds (conventions.RS_THRESHOLDS) are log-ratios the hunt draws (a 1/8 grid):
    a token exactly at k1's log bounds (-0.5 and 1.0, asymmetric), at k2's 0.5 or at k3's value at
    log-ratio 1 is kept, one grid step past them is rejected, so `<=` -> `<` or a flipped log-ratio
    changes the mask, and a sequence's sum lands on them where one token carries the divergence."""
    roll = T([[-1.0, -1.0, -1.0, -1.0]])
    old = T([[-0.5, -0.375, -2.0, -2.125]])  # log-ratio old - rollout: 0.5, 0.625, -1.0, -1.125
    inputs = {"log_probs": old.clone(), "old_log_probs": old, "rollout_log_probs": roll,
              "advantages": T([[1.0, 1.0, 1.0, 1.0]]), "loss_mask": T([[1, 1, 1, 1]])}

    def mask(rs: str, **over) -> list:
        got = verl.call("is_correction", {**inputs, **over}, {"method": "vanilla_tis", "trainer:rollout_rs": rs})
        return got.extras["returned:correction.1"].tolist()

    assert mask("token_k1") == [[1, 0, 1, 0]]
    assert mask("token_k2") == [[1, 1, 1, 0]]  # 0.5 * log-ratio^2 <= 0.5: |log-ratio| <= 1
    assert mask("seq_mean_k2", old_log_probs=T([[0.0, -2.0, 0.0, -2.0]])) == [[1, 1, 1, 1]]  # mean k2 at 0.5
    # k3 at log-ratio 1 (exp(1) - 2 in float32) is the bound: a row's sum there is kept, one more token past it is not
    assert mask("seq_sum_k3", old_log_probs=T([[0.0, -1.0, -1.0, -1.0]])) == [[1, 1, 1, 1]]
    assert mask("seq_sum_k3", old_log_probs=T([[0.0, -0.875, -1.0, -1.0]])) == [[0, 0, 0, 0]]


def test_a_rejection_criterion_this_verl_lacks_is_unsupported(verl, monkeypatch):
    """Before 97eac904 verl's rollout_rs named a level (token, sequence, geometric), and verl raised
    ValueError on a k1 / k2 / k3 criterion's name: that is an option the version lacks (unsupported),
    not an error; so is a name outside a later verl's SUPPORTED_ROLLOUT_RS_OPTIONS, on every path
    that hands verl a rollout_rs (is_correction's draw, the policy loss's rejection_sampling)."""
    import verl.trainer.ppo.rollout_corr_helper as rch
    inputs = {"log_probs": T([[-0.5, -1.0]]), "old_log_probs": T([[-0.5, -1.0]]), "rollout_log_probs": T([[-1.0, -1.0]]),
              "advantages": T([[1.0, -1.0]]), "loss_mask": T([[1, 1]])}
    monkeypatch.setattr(rch, "SUPPORTED_ROLLOUT_RS_OPTIONS", {"token_k1"})
    assert verl.call("is_correction", inputs, {"method": "vanilla_tis", "trainer:rollout_rs": "token_k1"}).outputs
    with pytest.raises(Unsupported, match="criterion seq_sum_k3"):
        verl.call("is_correction", inputs, {"method": "vanilla_tis", "trainer:rollout_rs": "seq_sum_k3"})
    decoupled = {"use_decoupled_loss": True, "rejection_sampling": {"rollout_is": None, "rollout_rs": "seq_mean_k2",
                                                                    "rollout_rs_threshold": 0.5}}
    with pytest.raises(Unsupported, match="criterion seq_mean_k2"):
        verl.call("policy_loss", inputs, decoupled)
    monkeypatch.delattr(rch, "SUPPORTED_ROLLOUT_RS_OPTIONS")
    with pytest.raises(Unsupported, match="levels only"):
        verl.call("is_correction", inputs, {"method": "vanilla_tis", "trainer:rollout_rs": "token_k1"})


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_one_rank_of_a_process_group_runs_verls_all_reduce_with_the_same_values(verl, monkeypatch, level):
    """trainer:torch_distributed (conventions.OPTION_DOMAINS): the call as one rank of an initialised
    process group (sentinel.adapters.ranks), as torchrun on one GPU runs verl. Batch normalisation's
    mean then goes through verl's distributed_masked_mean (an all-reduce), not its local mean: the
    same weights, loss and gradient; no group is left initialised after the call."""
    import verl.utils.torch_functional as verl_F
    calls = []
    real = verl_F.distributed_masked_mean

    def counted(*args, **kw):
        calls.append(torch.distributed.is_initialized())
        return real(*args, **kw)

    monkeypatch.setattr(verl_F, "distributed_masked_mean", counted)
    inputs = {"old_log_probs": T([[-0.5, -0.875, -0.5, -1.0], [-1.0, -0.25, 0.0, 0.0]]),
              "rollout_log_probs": T([[-1.0, -0.5, -0.5, -1.5], [-0.75, -0.25, -0.5, 0.0]]),
              "advantages": T([[1.0, -1.0, 0.5, 2.0], [0.5, 0.5, -1.0, 1.0]]), "loss_mask": T([[1, 1, 1, 0], [1, 1, 0, 0]])}
    config = {"method": "vanilla_tis", "trainer:rollout_is_batch_normalize": True, "trainer:rollout_is": level}
    got = []
    for over in ({}, {"trainer:torch_distributed": True}):
        lp = T([[-0.5, -1.0, -0.25, -0.75], [-0.5, -0.5, -1.0, 0.0]]).requires_grad_(True)
        out = verl.call("is_correction", {**inputs, "log_probs": lp}, {**config, **over})
        got.append((out, torch.autograd.grad(out.outputs["loss"], lp)[0]))
    assert calls == [True] and not torch.distributed.is_initialized()
    (plain, g0), (ranked, g1) = got
    assert torch.equal(ranked.outputs["weights"], plain.outputs["weights"])
    assert torch.equal(ranked.outputs["loss"], plain.outputs["loss"]) and torch.equal(g1, g0)
    assert not torch.equal(plain.outputs["weights"], torch.exp(inputs["old_log_probs"] - inputs["rollout_log_probs"])
                           .clamp(max=2.0) * inputs["loss_mask"])  # normalised: the mean it took matters


def test_the_flash_attn_arm_of_logprobs_from_logits_runs_on_the_kernels_stand_in(verl, monkeypatch):
    """trainer:flash_attn_cross_entropy (conventions.OPTION_DOMAINS): verl's logprobs_from_logits takes
    its flash-attn arm (its reshape, the kernel, its view back) on sentinel.adapters.kernels' stand-in
    where flash-attn is absent: the same log-probs and gradient as its torch arm, float32 from bf16
    logits as the kernel returns them; verl's module is as it was after the call, and a sign lost in
    that arm's helper (planted) is seen."""
    import verl.utils.torch_functional as verl_F
    before = (verl_F.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE, "cross_entropy_loss" in vars(verl_F))
    torch.manual_seed(0)
    logits, tokens = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))

    def call(on, dtype=torch.float32):
        lg = logits.to(dtype).requires_grad_()
        out = verl.call("logprobs", {"logits": lg, "tokens": tokens},
                        {"temperature": 1.0, "trainer:flash_attn_cross_entropy": on}).outputs["log_probs"]
        return out, torch.autograd.grad((out * torch.arange(1.0, 6.0)).sum(), lg)[0]

    (plain, g0), (flash, g1) = call(False), call(True)
    assert torch.allclose(flash, plain, atol=1e-6) and torch.allclose(g1, g0, atol=1e-6) and g0.abs().sum() > 0
    assert (verl_F.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE, "cross_entropy_loss" in vars(verl_F)) == before
    assert call(False, torch.bfloat16)[0].dtype == torch.bfloat16 and call(True, torch.bfloat16)[0].dtype == torch.float32
    monkeypatch.setattr(verl_F, "logprobs_from_logits_flash_attn", lambda *a, **k: -verl_F.cross_entropy_loss(*a, **k)[0].neg())
    assert not torch.allclose(call(True)[0], plain)  # the flash arm ran: its planted sign shows
    assert torch.allclose(call(False)[0], plain)


def test_drawn_trainer_options_reach_agg_loss_paths_rloo_and_bypass_mode(verl):
    """verl's own options (conventions.OPTION_DOMAINS): the legacy actor's empty global_batch_info
    (agg_loss counts the non-empty rows itself), the engine's (the whole mini-batch), Dr. GRPO's
    seq-mean-token-sum-norm and its loss_scale_factor, rloo for the group normalisation, and bypass
    mode's ppo_clip loss (the vanilla loss on the rollout's log-probs)."""
    inputs = {"values": T([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0], [7.0, 7.0, 7.0, 7.0]]),
              "loss_mask": T([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])}
    sums = {"trainer:use_legacy_worker_impl": "enable", "mode": "seq-mean-token-sum"}
    assert verl.call("loss_agg", inputs, sums).outputs["loss"].item() == pytest.approx(5.0)
    engine = {**sums, "trainer:use_legacy_worker_impl": "disable"}
    try:
        assert verl.call("loss_agg", inputs, engine).outputs["loss"].item() == pytest.approx(10.0 / 3)
    except Unsupported as e:  # a verl whose engine worker has no ppo_loss
        assert "ppo_loss" in str(e)
    norm = {"trainer:loss_agg_mode": "seq-mean-token-sum-norm", "trainer:use_legacy_worker_impl": "enable"}
    # the token sums over the response length (4): alone (2026-01), or after the sequence mean (0.9.1)
    assert verl.call("loss_agg", inputs, norm).outputs["loss"].item() in (pytest.approx(10.0 / 4),
                                                                          pytest.approx(5.0 / 4))
    rewards = {"rewards": T([1.0, 0.0, 0.5]), "group": T([0, 0, 1])}
    rloo = verl.call("reward_norm", rewards, {"mean_level": "group", "std_level": "group",
                                              "trainer:adv_estimator": "rloo"})
    assert rloo.function.qualname == "compute_rloo_outcome_advantage"
    assert rloo.outputs["rewards"].tolist() == pytest.approx([1.0, -1.0, 0.5])
    lp = T([[-0.5, -1.0, -0.25]])
    policy = {"log_probs": lp, "old_log_probs": lp - 0.3, "advantages": T([[1.0, -1.0, 0.5]]),
              "loss_mask": T([[1, 1, 0]])}
    plain = verl.call("policy_loss", policy, {})
    try:
        bypass = verl.call("policy_loss", policy, {"trainer:bypass_mode": True})
    except Unsupported as e:  # a verl without bypass mode
        assert "bypass" in str(e)
        return
    assert bypass.function.qualname == "compute_policy_loss_bypass_mode"
    assert bypass.outputs["loss"].item() == pytest.approx(plain.outputs["loss"].item())


def test_policy_loss_maps_every_loss_function_its_options_reach(verl):
    """The policy_loss boundary's `calls` (what --coverage measures and mutate mutates) hold every
    verl loss and rollout-correction entry its drawn options run: bypass mode's own loss and its
    REINFORCE loss_type, and the unified rollout-correction entry, were called but not listed, so
    their branches counted only where is_correction ran them (issue 19's coverage)."""
    import itertools
    import sys
    from sentinel_adapters.verl.conventions import OPTION_DOMAINS
    listed = set(VerlAdapter.mapping()["policy_loss"]["calls"])
    seen: set[str] = set()

    def spy(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name.startswith(("compute_policy_loss", "compute_rollout_correction")):
            seen.add(f"{frame.f_globals.get('__name__')}:{code.co_name}")
    lp = T([[-0.5, -1.0, -0.25, -0.75], [-0.125, -2.0, -0.5, -1.5]])
    policy = {"log_probs": lp, "old_log_probs": lp - 0.25, "advantages": T([[1.0, -1.0, 0.5, 2.0], [0.5, 0.25, -1.0, 0.0]]),
              "loss_mask": T([[1, 1, 1, 0], [1, 1, 0, 0]]), "rollout_log_probs": lp - 0.5}
    domains = OPTION_DOMAINS["policy_loss"]
    keys = ("trainer:bypass_mode", "trainer:loss_type", "trainer:rollout_correction")
    sys.setprofile(spy)
    try:
        for values in itertools.product(*(domains[k] for k in keys)):
            try:
                verl.call("policy_loss", policy, dict(zip(keys, values)))
            except Unsupported:
                continue
    finally:
        sys.setprofile(None)
    assert {"verl.trainer.ppo.core_algos:compute_policy_loss_bypass_mode",
            "verl.trainer.ppo.core_algos:compute_policy_loss_reinforce"} <= seen
    assert seen <= listed, sorted(seen - listed)


def test_drawn_rollout_correction_reinforce_and_derived_response_mask(verl):
    """conventions.OPTION_DOMAINS' trainer options of issue 19's reach: algorithm.rollout_correction
    on the policy losses (applied as the trainer's decoupled mode only where the batch holds
    rollout_log_probs: IS weights into the loss, the rejection mask as its response mask),
    bypass mode's REINFORCE loss_type, and compute_advantage deriving the response mask itself."""
    lp = T([[-0.5, -1.0, -0.25, -0.75]])
    policy = {"log_probs": lp, "old_log_probs": lp - 0.25, "advantages": T([[1.0, -1.0, 0.5, 2.0]]),
              "loss_mask": T([[1, 1, 1, 0]])}
    roll = {**policy, "rollout_log_probs": T([[-0.5, -2.5, -0.25, -0.875]])}  # log-ratio -0.25, 1.25, -0.25
    corr = verl.mods.get("verl.trainer.ppo.rollout_corr_helper")
    if not hasattr(corr, "compute_rollout_correction_and_rejection_mask") or \
            "bypass_mode" not in verl.core.POLICY_LOSS_REGISTRY:
        pytest.skip("this verl has no unified rollout correction or no bypass mode")
    plain = verl.call("policy_loss", policy, {}).outputs["loss"].item()
    for b in ("policy_loss", "cispo_loss"):
        base = verl.call(b, policy, {}).outputs["loss"].item()
        got = verl.call(b, roll, {"trainer:rollout_correction": "token_is"})
        w = got.outputs["weights"][0, :3]  # min(pi_old / pi_rollout, 2), as verl's token TIS truncates
        assert w.tolist() == pytest.approx([math.exp(-0.25), 2.0, math.exp(-0.25)])
        assert got.outputs["loss"].item() != pytest.approx(base)
        # without rollout_log_probs the trainer applies no correction
        assert verl.call(b, policy, {"trainer:rollout_correction": "token_is"}).outputs["loss"].item() == \
            pytest.approx(base)
    rs = verl.call("policy_loss", roll, {"trainer:rollout_correction": "seq_mean_k3_rs"})
    reinforce = verl.call("policy_loss", policy, {"trainer:bypass_mode": True, "trainer:loss_type": "reinforce"})
    assert "weights" not in rs.outputs and rs.outputs["loss"].item() == pytest.approx(plain)  # k3 mean under 0.5
    # REINFORCE on the rollout's (old) log-probs: -A * log pi * min(pi / pi_rollout, 2), token-mean
    ratio = [min(math.exp(0.25), 2.0)] * 3
    expect = -sum(a * x * r for a, x, r in zip([1.0, -1.0, 0.5], [-0.5, -1.0, -0.25], ratio)) / 3
    assert reinforce.function.qualname == "compute_policy_loss_bypass_mode"
    assert reinforce.outputs["loss"].item() == pytest.approx(expect, rel=1e-5)
    adv = {"rewards": T([1.0, 0.0, 0.5, 0.2]), "loss_mask": T([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]]),
           "group": T([0, 0, 1, 1])}
    kept = verl.call("advantages", adv, {"estimator": "grpo"}).outputs["advantages"]
    derived = verl.call("advantages", adv, {"estimator": "grpo", "trainer:response_mask_in_batch": False})
    assert torch.equal(derived.outputs["advantages"], kept)  # the last response-width columns: the same mask


def test_drawn_pf_ppo_resamples_the_batch_it_returns_and_keeps_the_drawn_rows_advantages(verl, monkeypatch):
    """trainer:pf_ppo (algorithm.use_pf_ppo): after GAE, compute_advantage resamples the batch's rows by
    their scores. The boundary's advantages stay the drawn rows' (written into the batch it was given);
    the batch it returns, observed, holds resampled rows: the same twice (one seed, torch's generator
    state restored), for max_min only the rows of the highest and lowest score. A PF-PPO that returns the
    batch as it was (planted) returns another batch."""
    adv = {"rewards": T([1.0, -0.5, 0.25, 2.0]), "values": T([[0.5, 0.0, 0.25], [0.0, 1.0, 0.0], [0.25, 0.25, 0.0],
                                                                [1.0, 0.0, 0.5]]),
           "loss_mask": T([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]])}
    outputs = verl.call("advantages", adv, {"estimator": "gae", "lam": 0.9}).outputs
    plain = outputs["advantages"]
    state = torch.get_rng_state()
    config = {"estimator": "gae", "lam": 0.9, "trainer:pf_ppo": "max_min"}
    got, again = verl.call("advantages", adv, config), verl.call("advantages", adv, config)
    assert torch.equal(torch.get_rng_state(), state)
    assert got.outputs.keys() == outputs.keys() and all(torch.equal(got.outputs[k], v) for k, v in outputs.items())
    rows = got.extras["returned:data.batch.advantages"]
    assert torch.equal(rows, again.extras["returned:data.batch.advantages"])
    assert all(any(torch.equal(r, plain[i]) for i in (1, 3)) for r in rows)  # scores -0.5 and 2.0
    assert not torch.equal(rows, plain)
    core = importlib.import_module("verl.trainer.ppo.core_algos")
    monkeypatch.setattr(core, "compute_pf_ppo_reweight_data", lambda data, *a, **k: data)
    assert torch.equal(verl.call("advantages", adv, config).extras["returned:data.batch.advantages"], plain)
