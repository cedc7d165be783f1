"""The AReaL adapter against AReaL's real code: the installed package, and optionally a
checkout named by SENTINEL_AREAL_REPO (for example a clone of AReaL at git HEAD).

Install the target with: pip install '.[areal]' && pip install --no-deps areal==1.0.4
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest
import torch

from sentinel_adapters.areal import ArealAdapter
from sentinel.errors import TargetLoadError, Unsupported
from sentinel.adapters.shims import install_stubs, is_stub

needs_areal = pytest.mark.skipif(
    importlib.util.find_spec("areal") is None,
    reason="areal is not installed (pip install '.[areal]' && pip install --no-deps areal==1.0.4)",
)

# The seed (AReaL PR #1351): a no-EOS row's outlier reward leaks through batch reward
# normalisation into the valid row's advantage.
NO_EOS_CONFIG = {"reward_norm": {"mean_level": "batch", "std_level": None}, "mask_no_eos_with_zero": True,
                 "reward_clip": 1000, "kl_coef": 0.0, "gamma": 1.0, "lam": 1.0}
NO_EOS_INPUTS = {"attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
                 "loss_mask": torch.tensor([[0, 1, 0], [0, 1, 1]]),
                 "rewards": torch.tensor([1.0, 1.0])}


def no_eos_shift(adapter: ArealAdapter) -> list[float]:
    """Advantage change at the trained tokens (row 0 t1; row 1 t1, t2) when only the no-EOS
    row's reward changes. (Untrained positions carry whatever AReaL's GAE leaves there.)"""
    base = adapter.call("advantages", NO_EOS_INPUTS, NO_EOS_CONFIG).outputs["advantages"]
    outlier = adapter.call("advantages", {**NO_EOS_INPUTS, "rewards": torch.tensor([1.0, 100.0])},
                           NO_EOS_CONFIG).outputs["advantages"]
    return (outlier - base)[NO_EOS_INPUTS["loss_mask"].bool()].tolist()


@pytest.fixture(scope="module")
def areal() -> ArealAdapter:
    adapter = ArealAdapter(None, torch.device("cpu"))
    adapter.facts = adapter.load()
    return adapter


# --- shims --------------------------------------------------------------------------------

def test_stub_submodules_and_decorators():
    name = "sentinel_test_heavy_pkg"
    assert install_stubs([name, "math"]) == [name]  # a real module is never stubbed

    sub = importlib.import_module(f"{name}.core.mpu")
    assert is_stub(sub)
    from sentinel_test_heavy_pkg.distributed import Thing  # noqa: E402

    class Child(Thing):  # stubs can be subclassed and used as decorators
        pass

    @sub.jit
    def f(x):
        return x + 1

    assert f(1) == 2 and isinstance(Child(1, a=2), Thing)


# --- installed package --------------------------------------------------------------------

@needs_areal
def test_load_facts(areal):
    facts = areal.facts
    assert facts["version"]
    assert "areal/trainer/ppo/actor.py" in facts["module_files"]
    assert set(facts["stubs"]) == set(areal.stubs)
    assert "areal" not in facts["stubs"] and "torch" not in facts["stubs"]


def unresolved_calls() -> list[str]:
    from sentinel.adapters.binding import resolve

    return sorted(c for row in ArealAdapter.mapping().values() for c in row["calls"] if resolve(c) is None)


@needs_areal
def test_declared_calls_resolve_but_for_what_1_0_4_lacks(areal):
    assert unresolved_calls() == ["areal.trainer.ppo.gae:_compute_token_level_gae",  # since #1600
                                  "areal.utils.functional:cispo_loss_fn"]  # since #1412


@needs_areal
def test_no_eos_outlier_shifts_valid_row(areal):
    # Canonical token alignment: the outcome reward sits on the last response token
    # (column 1 of row 0), where AReaL's rolled layout has it at column 0.
    assert no_eos_shift(areal) == [-49.5, 0.0, 0.0]
    res = areal.call("advantages", NO_EOS_INPUTS, NO_EOS_CONFIG)
    assert res.function.qualname == "PPOActor._compute_advantages"


@needs_areal
def test_gae_with_kl_and_values(areal):
    # Hand-computed GAE (gamma 0.9, lambda 0.8, k1 KL with coef 0.1), canonical alignment.
    inputs = {
        "rewards": torch.tensor([1.0, 0.0]),
        "loss_mask": torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]]),
        "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]),
        "log_probs": torch.tensor([[0.0, -1.0, -1.0, 0.0], [0.0, -1.0, -1.0, -1.0]]),
        "ref_log_probs": torch.tensor([[0.0, -2.0, -1.5, 0.0], [0.0, -1.0, -1.0, -3.0]]),
        "values": torch.tensor([[9.0, 0.5, 0.25, 9.0], [9.0, 0.1, 0.2, 0.3]]),
    }
    res = areal.call("advantages", inputs, {"kl_coef": 0.1, "gamma": 0.9, "lam": 0.8})
    mask = inputs["loss_mask"].bool()
    # row 0: token rewards -0.1 (KL), 1 - 0 (outcome; KL after EOS zeroed)
    # A2 = 0.95 - 0.25 = 0.7; A1 = (-0.1 + 0.9*0.25 - 0.5) + 0.72*0.7 = 0.129
    # row 1 (no EOS, no bootstrap value): A3 = -0.2 - 0.3 = -0.5,
    # A2 = 0.9*0.3 - 0.2 + 0.72*(-0.5) = -0.29, A1 = 0.9*0.2 - 0.1 + 0.72*(-0.29) = -0.1288
    expected_adv = torch.tensor([[0, 0.129, 0.7, 0], [0, -0.1288, -0.29, -0.5]])
    expected_tok = torch.tensor([[0, -0.1, 0.95, 0], [0, 0.0, 0.0, -0.2]])
    torch.testing.assert_close(res.outputs["advantages"][mask], expected_adv[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(res.outputs["token_rewards"][mask], expected_tok[mask], atol=1e-6, rtol=0)
    torch.testing.assert_close(res.outputs["returns"][mask], (expected_adv + inputs["values"])[mask],
                               atol=1e-5, rtol=0)
    for name in ("ref_log_probs", "values", "log_probs", "rewards"):
        torch.testing.assert_close(res.inputs_after[name].float(), inputs[name].float())


@needs_areal
def test_group_reward_norm_interleaved_groups(areal):
    # group mean centering; groups given as interleaved ids
    res = areal.call("reward_norm", {"rewards": torch.tensor([1.0, 5.0, 2.0, 6.0]),
                                     "group": torch.tensor([0, 1, 0, 1])},
                     {"mean_level": "group", "std_level": None})
    assert res.outputs["rewards"].tolist() == [-0.5, -0.5, 0.5, 0.5]
    adv = areal.call("advantages", {"rewards": torch.tensor([1.0, 3.0, 10.0, 20.0]),
                                    "group": torch.tensor([0, 1, 0, 1]),
                                    "loss_mask": torch.tensor([[0, 1, 0]] * 4),
                                    "attention_mask": torch.tensor([[1, 1, 0]] * 4)},
                     {"reward_norm": {"mean_level": "group", "std_level": None}})
    assert adv.outputs["advantages"][:, 1].tolist() == [-4.5, -8.5, 4.5, 8.5]


@needs_areal
def test_reward_norm_mask(areal):
    res = areal.call("reward_norm", {"rewards": torch.tensor([1.0, 2.0, 3.0, 10.0]),
                                     "mask": torch.tensor([1, 1, 1, 0])}, {})
    # batch mean 2, unbiased std 1 over the three unmasked rows, eps 1e-5; masked row -> 0
    expected = [-1 / (1 + 1e-5), 0.0, 1 / (1 + 1e-5), 0.0]
    assert res.outputs["rewards"].tolist() == pytest.approx(expected, abs=1e-6)


@needs_areal
def test_policy_loss_clipped_and_unclipped(areal):
    old = torch.tensor([[0.0, -1.2, -0.1]])
    adv = torch.tensor([[0.0, 1.0, -2.0]])
    mask = torch.tensor([[0, 1, 1]])
    lp = torch.tensor([[0.0, -1.0, -0.5]], requires_grad=True)
    res = areal.call("policy_loss", {"log_probs": lp, "old_log_probs": old, "advantages": adv,
                                     "loss_mask": mask}, {"eps_clip": 0.2})
    # ratios e^0.2 (adv +1) and e^-0.4 (adv -2) both leave [0.8, 1.2]: (-1.2 + 1.6) / 2
    assert res.outputs["loss"].item() == pytest.approx(0.2, abs=1e-6)
    assert res.outputs["clipfrac"].tolist() == [[0.0, 1.0, 1.0]]
    res.outputs["loss"].backward()
    assert lp.grad.abs().sum().item() == 0.0

    lp2 = (old + 0.05).requires_grad_(True)
    res = areal.call("policy_loss", {"log_probs": lp2, "old_log_probs": old, "advantages": adv,
                                     "loss_mask": mask}, {"eps_clip": 0.2})
    r = math.exp(0.05)
    assert res.outputs["loss"].item() == pytest.approx(-(1.0 * r - 2.0 * r) / 2, abs=1e-6)
    res.outputs["loss"].backward()
    assert lp2.grad.tolist()[0] == pytest.approx([0.0, -r / 2, 2 * r / 2], abs=1e-6)


@needs_areal
def test_kl_estimators(areal):
    lp = torch.tensor([[0.0, -1.0, -2.0]])
    ref = torch.tensor([[0.0, -1.5, -1.0]])
    inputs = {"log_probs": lp, "ref_log_probs": ref, "loss_mask": torch.tensor([[0, 1, 1]])}
    d = lp - ref
    expected = {"k1": d, "k2": d ** 2 / 2, "k3": torch.exp(-d) - 1 + d}
    for kind, value in expected.items():
        torch.testing.assert_close(areal.call("kl", inputs, {"kl_type": kind}).outputs["kl"], value)


@needs_areal
def test_unsupported_and_bad_location(areal, tmp_path):
    with pytest.raises(Unsupported):
        areal.call("advantages", NO_EOS_INPUTS, {"estimator": "grpo"})
    with pytest.raises(TargetLoadError, match="areal"):
        ArealAdapter(tmp_path, torch.device("cpu")).load()


# --- a checkout (keep last: it swaps the imported areal for the checkout's) ---------------

@needs_areal
@pytest.mark.skipif(not os.environ.get("SENTINEL_AREAL_REPO"),
                    reason="SENTINEL_AREAL_REPO (path of an AReaL checkout) is not set")
def test_checkout_still_has_no_eos_leak():
    adapter = ArealAdapter(Path(os.environ["SENTINEL_AREAL_REPO"]), torch.device("cpu"))
    facts = adapter.load()
    assert "areal/trainer/ppo/actor.py" in facts["module_files"]
    assert unresolved_calls() == []
    res = adapter.call("advantages", NO_EOS_INPUTS, NO_EOS_CONFIG)
    assert res.function.file == "areal/trainer/ppo/actor.py"
    # Unfixed as of AReaL HEAD cbff54d64 (2026-08-22); the fix is PR #1351 (c1bd33ff5, cdc1c4783).
    shift = no_eos_shift(adapter)
    try:  # the GAE kernel is a function of its own only since #1600
        gae = adapter.call("gae", {"token_rewards": torch.tensor([[0.0, 0.0, 1.0, 0.0]]),
                                   "values": torch.tensor([[0.5, 0.4, 0.3, 0.0]]),
                                   "loss_mask": torch.tensor([[1, 1, 1, 0]])}, {"gamma": 1.0, "lam": 0.95})
        # deltas [-0.1, -0.1, 0.7]: A2 = 0.7, A1 = -0.1 + 0.95 * 0.7, A0 = -0.1 + 0.95 * A1
        assert gae.outputs["advantages"][0, :3].tolist() == pytest.approx([0.43675, 0.565, 0.7], abs=1e-6)
    except Unsupported:
        pass
    assert shift == [-49.5, 0.0, 0.0], (
        f"shift {shift}: a zero shift means this checkout contains the fix of PR #1351")


@pytest.mark.skipif(not os.environ.get("SENTINEL_AREAL_REPO"),
                    reason="SENTINEL_AREAL_REPO (path of an AReaL checkout) is not set")
def test_areal_actor_loss_arms_hold_at_the_checkout():
    """AReaL's grpo_loss_fn arms and logged stats (scenarios/metrics/areal-arms.yaml), its
    Normalization's level combinations (scenarios/reward_norm/areal-levels.yaml) and a dual-clip
    constant below 2 (scenarios/policy/areal-arms.yaml) hold at the
    checkout, run in the catalog's worker (no trainer code in this process). Each is violated (or
    errors) on a one-line plant in a clone (benchmarks/results section 29): logp_diff's sign,
    reuse_train_logp's proximal not detached, the pure-distillation reward not detached, KDRL's
    rl_loss_weight dropped, the loglinear mix fed undetached log-probs, M2PO's mask not applied, the
    default rl_loss_weight 2; the batch mean not expanded, a group's std on another group's mask,
    the std loop's group size deleted, eps kept without a std, the leave-one-out sum's sign and
    (masked) its count's, the mean summed in float32; ppo_actor_loss_fn's c_clip assert tightened to > 2."""
    from sentinel.catalog import catalog_path
    from sentinel.runner import TargetSpec, run
    from sentinel.spec import load_paths

    sc = load_paths([catalog_path() / "metrics" / "areal-arms.yaml", catalog_path() / "reward_norm" / "areal-levels.yaml",
                     catalog_path() / "policy" / "areal-arms.yaml"])
    assert len(sc) == 15
    rep = run(sc, [TargetSpec("areal", os.environ["SENTINEL_AREAL_REPO"])])
    assert {r.id: r.verdict for r in rep.results} == {s.id: "holds" for s in sc}, \
        [(r.id, r.verdict, r.reason) for r in rep.results]


def test_turn_ids_label_each_run_of_trained_tokens_a_turn():
    """The turn_ids the adapter hands AReaL under trainer:gae_timestep_unit 'turn': AReaL's
    multi-turn layout (its concat interaction's), one turn per run of trained tokens, -1 between."""
    from sentinel_adapters.areal.adapter import turn_ids

    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    assert turn_ids(mask).tolist() == [[0, 0, -1, -1, 1, 1], [-1, 0, 0, 0, -1, -1], [-1] * 6]
    assert turn_ids(mask).dtype == torch.int32


# AReaL's turn-level GAE entries (scenarios/advantages/areal-turn-gae.yaml) against a one-line plant
# each: (entry, file under areal/, the text replaced (its first occurrence), its replacement). A
# copy of the checkout's areal/ package carries the plant; the checkout itself is never written.
TURN_PLANTS = [
    # a turn's value read at its last token instead of its first
    ("areal-turn-gae-steps-once-per-turn", "trainer/ppo/gae.py", 'reduce="amin"', 'reduce="amax"'),
    # the token KL folded into the turn recursion (and so into the critic's returns)
    ("areal-turn-gae-keeps-kl-token-local", "trainer/ppo/actor.py", "rewards = gae_outcome_rewards\n",
     "rewards = gae_kl_rewards + gae_outcome_rewards\n"),
    # the token KL not added back to the advantages after the turn recursion
    ("areal-turn-gae-keeps-kl-token-local", "trainer/ppo/actor.py", "advantages = advantages + gae_kl_rewards",
     "advantages = advantages"),
    # a custom lambda function fed the token count in turn mode
    ("areal-turn-gae-vapo-lambda-counts-turns", "trainer/ppo/gae.py", 'else turn_counts', 'else effective_token_lengths'),
]


@pytest.mark.skipif(not os.environ.get("SENTINEL_AREAL_REPO"),
                    reason="SENTINEL_AREAL_REPO (path of an AReaL checkout) is not set")
@pytest.mark.parametrize("sid,where,old,new", TURN_PLANTS, ids=[f"{p[0]}-{i}" for i, p in enumerate(TURN_PLANTS)])
def test_areal_turn_gae_entries_hold_and_are_violated_by_their_plants(tmp_path, sid, where, old, new):
    """The turn-level GAE entries (trainer:gae_timestep_unit 'turn', turn_ids drawn from the loss
    mask's runs) hold at the checkout and each is violated on a copy with its one-line plant."""
    import shutil

    from sentinel.catalog import catalog_path
    from sentinel.runner import TargetSpec, run
    from sentinel.spec import load_paths

    root = Path(os.environ["SENTINEL_AREAL_REPO"])
    shutil.copytree(root / "areal", tmp_path / "areal", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    src = tmp_path / "areal" / where
    text = src.read_text()
    assert text.count(old) >= 1, f"plant text not found in {where}: {old!r}"
    src.write_text(text.replace(old, new, 1))
    sc = [s for s in load_paths([catalog_path() / "advantages" / "areal-turn-gae.yaml"]) if s.id == sid]
    rep = run(sc, [TargetSpec("areal", str(root), label="checkout"), TargetSpec("areal", str(tmp_path), label="planted")],
              parallel=1)
    got = {r.target: r.verdict for r in rep.results}
    assert got == {"checkout": "holds", "planted": "violated"}, [(r.target, r.verdict, r.reason) for r in rep.results]
