"""Adapter fidelity: every canonical position reaches the trainer's real function.

An adapter translates layout only (padding <-> packing, a prompt column, group ids <-> the
trainer's grouping); it never trims, drops or zeroes a value the canonical input carries.
Each test here spies on the real trainer function (call-through: `support.spy`, the
arguments copied before the call, since trainers change some in place) and asserts that what
it received holds every canonical position, masked ones included (a masked head, an
interior hole, a masked tail, a fully masked row), with identical values, and with the
autograd graph attached where the canonical input requires grad.

AReaL and verl run in this process (the installed packages); slime runs in a subprocess
(one interpreter holds one slime checkout), given by SENTINEL_SLIME_REPO.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from sentinel.adapters.spying import spy

T = torch.tensor
# masked head, interior hole and masked tail in row 0; row 2 fully masked
MASK = T([[0.0, 1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
B, L = MASK.shape


def tokens(offset: float, step: float = -1 / 16) -> torch.Tensor:
    """A distinct value at every position (log-prob-like: <= 0), masked ones included."""
    return (offset + step * torch.arange(B * L, dtype=torch.float32)).reshape(B, L)


def canonical(*names: str, grad: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    values = {"log_probs": tokens(-0.0625), "old_log_probs": tokens(-0.125), "ref_log_probs": tokens(-0.25),
              "rollout_log_probs": tokens(-0.1875), "advantages": tokens(1.0, -0.125), "values": tokens(0.5, -0.0625),
              "token_rewards": tokens(0.25, 0.125)}
    out = {n: values[n].clone().requires_grad_(n in grad) for n in names}
    out["loss_mask"] = MASK.clone()
    return out


def _copy(x: Any) -> Any:
    """What a call received, as it was before the call (trainers change some inputs in place)."""
    if isinstance(x, torch.Tensor):
        c = x.detach().clone()
        c.requires_grad_(False)
        return (c, x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_copy(v) for v in x)
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    return x


@contextlib.contextmanager
def received(owner: Any, name: str):
    """The arguments of every call of owner.name, copied before the call."""
    seen: list[dict[str, Any]] = []
    with spy(owner, name, before=lambda args: seen.append(_copy(args))):
        yield seen


def reaches(got: Any, want: torch.Tensor, grad: bool | None = None) -> None:
    """`got` (a received tensor, or per-row tensors) holds every position of `want`, value for
    value; with `grad`, the trainer's tensor carries (True) or lacks (False) autograd."""
    if isinstance(got, list):
        rows = [g for g, _ in got]
        grads = {rg for _, rg in got}
        tensor = torch.stack([r.reshape(-1) for r in rows])
    else:
        tensor, rg = got
        grads = {rg}
    assert tensor.shape == want.shape, (tensor.shape, want.shape)
    assert torch.equal(tensor.float(), want.detach().float()), (tensor, want)
    if grad is not None:
        assert grads == {grad}, grads


# --- verl ---------------------------------------------------------------------------------

needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                                reason="verl is not installed (pip install '.[verl]' && pip install --no-deps verl==0.9.1)")


@pytest.fixture(scope="module")
def verl():
    from sentinel_adapters.verl import VerlAdapter
    a = VerlAdapter(None, torch.device("cpu"))
    a.facts = a.load()
    return a


@needs_verl
def test_verl_kl_policy_loss_agg(verl):
    core = verl.core
    inputs = canonical("log_probs", "ref_log_probs", grad=("log_probs",))
    with received(core, "kl_penalty") as kl:
        verl.call("kl", inputs, {"kl_type": "k1"})
    reaches(kl[0]["logprob"], inputs["log_probs"], grad=True)
    reaches(kl[0]["ref_logprob"], inputs["ref_log_probs"])

    inputs = canonical("log_probs", "old_log_probs", "advantages", grad=("log_probs",))
    with received(core.POLICY_LOSS_REGISTRY, "vanilla") as pl, received(core, "agg_loss") as agg:
        verl.call("policy_loss", inputs, {})
    reaches(pl[0]["log_prob"], inputs["log_probs"], grad=True)
    reaches(pl[0]["old_log_prob"], inputs["old_log_probs"])
    reaches(pl[0]["advantages"], inputs["advantages"])
    reaches(pl[0]["response_mask"], MASK)
    reaches(agg[0]["loss_mask"], MASK)

    inputs = {"values": tokens(2.0).requires_grad_(True), "loss_mask": MASK.clone()}
    with received(core, "agg_loss") as agg:
        verl.call("loss_agg", inputs, {"mode": "seq-mean-token-mean"})
    reaches(agg[0]["loss_mat"], inputs["values"], grad=True)


@needs_verl
def test_verl_gae_and_grpo_deliver_every_position_and_reward(verl):
    core = verl.core
    inputs = canonical("token_rewards", "values")
    with received(core, "compute_gae_advantage_return") as gae:
        verl.call("gae", inputs, {})
    reaches(gae[0]["token_level_rewards"], inputs["token_rewards"])
    reaches(gae[0]["values"], inputs["values"])
    reaches(gae[0]["response_mask"], MASK)

    rewards = T([1.0, 0.5, -2.0])  # the fully masked row's reward reaches the group statistics
    with received(core, "compute_grpo_outcome_advantage") as grpo:
        verl.call("advantages", {"rewards": rewards, "loss_mask": MASK.clone(), "group": T([0, 0, 0])},
                  {"estimator": "grpo"})
    scores, _ = grpo[0]["token_level_rewards"]
    assert scores.sum(-1).tolist() == rewards.tolist()
    reaches(grpo[0]["response_mask"], MASK)

    with received(core, "compute_grpo_outcome_advantage") as grpo:
        verl.call("reward_norm", {"rewards": rewards, "mask": T([1.0, 1.0, 0.0])},
                  {"mean_level": "batch", "std_level": "batch"})
    reaches(grpo[0]["token_level_rewards"], rewards[:, None])
    reaches(grpo[0]["response_mask"], T([[1.0], [1.0], [0.0]]))


@needs_verl
def test_verl_is_correction_gets_the_trainers_tensors_with_their_graph(verl):
    """No detach and no no_grad of the adapter's: old_log_probs reach verl's entry with their
    graph, as the trainer hands them; bypass mode gets the current policy's log-probs."""
    helper = verl.mods["verl.trainer.ppo.rollout_corr_helper"]
    inputs = canonical("log_probs", "old_log_probs", "rollout_log_probs", "advantages",
                       grad=("log_probs", "old_log_probs"))
    with received(helper, "compute_rollout_correction_and_rejection_mask") as entry:
        verl.call("is_correction", inputs, {"method": "vanilla_tis"})
    reaches(entry[0]["old_log_prob"], inputs["old_log_probs"], grad=True)
    reaches(entry[0]["rollout_log_prob"], inputs["rollout_log_probs"])
    reaches(entry[0]["response_mask"], MASK)
    with received(helper, "compute_rollout_correction_and_rejection_mask") as entry:
        verl.call("is_correction", inputs, {"method": "off_policy_is", "eps_clip": 1.0, "eps_clip_high": 1.0})
    # verl's bypass_mode passes the current log-probs as "old" (and calls under torch.no_grad itself:
    # its own choice, so the weights it computes carry no graph)
    reaches(entry[0]["old_log_prob"], inputs["log_probs"], grad=True)
    reaches(entry[0]["rollout_log_prob"], inputs["rollout_log_probs"])


# --- AReaL --------------------------------------------------------------------------------

needs_areal = pytest.mark.skipif(importlib.util.find_spec("areal") is None,
                                 reason="areal is not installed (pip install '.[areal]' && "
                                        "pip install --no-deps areal==1.0.4)")


@pytest.fixture(scope="module")
def areal():
    from sentinel_adapters.areal import ArealAdapter
    a = ArealAdapter(None, torch.device("cpu"))
    a.load()
    return a


@needs_areal
def test_areal_losses_and_kl(areal):
    inputs = canonical("log_probs", "old_log_probs", "advantages", grad=("log_probs",))
    with received(areal._functional, "ppo_actor_loss_fn") as fn:
        areal.call("policy_loss", inputs, {})
    reaches(fn[0]["logprobs"], inputs["log_probs"], grad=True)
    reaches(fn[0]["proximal_logprobs"], inputs["old_log_probs"])
    reaches(fn[0]["advantages"], inputs["advantages"])
    reaches(fn[0]["loss_mask"], MASK)

    inputs = canonical("log_probs", "old_log_probs", "rollout_log_probs", "advantages", grad=("log_probs",))
    with received(areal._functional, "ppo_actor_loss_fn") as fn:
        areal.call("is_correction", inputs, {"method": "vanilla_tis"})
    reaches(fn[0]["old_logprobs"], inputs["rollout_log_probs"])

    inputs = canonical("log_probs", "ref_log_probs", grad=("log_probs",))
    with received(areal._data.KLEstimator, "__call__") as kl:
        areal.call("kl", inputs, {"kl_type": "k3"})
    reaches(kl[0]["log_probs"], inputs["log_probs"], grad=True)
    reaches(kl[0]["log_probs_base"], inputs["ref_log_probs"])


@needs_areal
def test_areal_advantages_every_position_one_column_wider(areal):
    """AReaL's layout is one column wider (a prompt column in front of token-aligned inputs,
    a past-the-end column after predict-aligned ones); every canonical column is there."""
    inputs = {**canonical("log_probs", "ref_log_probs", "values"), "rewards": T([1.0, 0.5, -2.0])}
    with received(areal._actor_mod.PPOActor, "_compute_advantages") as adv:
        areal.call("advantages", inputs, {"kl_coef": 0.1})
    data = adv[0]["data"]
    lp, _ = data["logprobs"]
    reaches((lp[:, 1:], False), inputs["log_probs"])
    reaches((data["loss_mask"][0][:, 1:], False), MASK)
    reaches((data["ref_logp"][0][:, :L], False), inputs["ref_log_probs"])
    reaches((data["values"][0][:, :L], False), inputs["values"])
    reaches(data["rewards"], inputs["rewards"])


@needs_areal
def test_areal_variable_size_groups_are_fed_not_refused(areal):
    rewards = T([1.0, 0.0, 2.0, 0.5, -1.0])
    with received(areal._data.Normalization, "__call__") as norm:
        out = areal.call("reward_norm", {"rewards": rewards, "group": T([0, 0, 0, 1, 1])},
                         {"mean_level": "group", "std_level": "group"}).outputs["rewards"]
    assert out.shape == (5,)
    (x, _), = [v for k, v in norm[0].items() if k not in ("self",) and isinstance(v, tuple)][:1]
    assert sorted(x.tolist()) == sorted(rewards.tolist())


# --- slime (a subprocess per checkout) -----------------------------------------------------

SLIME = os.environ.get("SENTINEL_SLIME_REPO")
ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"

SLIME_BODY = r"""
import json, os, sys
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, TESTS)
import torch
from pathlib import Path
from test_fidelity import B, L, MASK, canonical, received, reaches, tokens
from sentinel_adapters.slime import SlimeAdapter
from sentinel_adapters.slime.conventions import CP_UTILS, LOSS, PPO_UTILS, ROLLOUT

a = SlimeAdapter(Path(ROOT), torch.device("cpu"))
a.load()
ppo, loss, rollout = a.mods[PPO_UTILS], a.mods[LOSS], a.mods[ROLLOUT]
done = []

inputs = canonical("log_probs", "ref_log_probs", grad=("log_probs",))
with received(ppo, "compute_approx_kl") as kl:
    a.call("kl", inputs, {"kl_type": "k1"})
reaches([c["log_probs"] for c in kl], inputs["log_probs"], grad=True)
reaches([c["log_probs_base"] for c in kl], inputs["ref_log_probs"])
done.append("kl")

inputs = canonical("log_probs", "old_log_probs", "advantages", grad=("log_probs",))
with received(ppo, "compute_opsm_mask") as opsm, received(loss, "loss_function") as entry:
    a.call("opsm_mask", inputs, {"opsm_delta": 0.1})
reaches(opsm[0]["full_log_probs"], inputs["log_probs"], grad=True)
reaches(opsm[0]["full_old_log_probs"], inputs["old_log_probs"])
reaches(opsm[0]["advantages"], inputs["advantages"])
reaches(opsm[0]["loss_masks"], MASK)
batch = entry[0]["batch"]
reaches(batch["log_probs"], inputs["old_log_probs"])
reaches(batch["advantages"], inputs["advantages"])
reaches(batch["loss_masks"], MASK)
# the current log-probs ride in the logits (each row's L tokens, then one that predicts
# nothing), every position: their log-softmax is the canonical log-prob up to float rounding
logits, _ = entry[0]["logits"]
per_row = logits[0].reshape(B, L + 1, 2)[:, :L]
torch.testing.assert_close(torch.log_softmax(per_row, -1)[..., 0], inputs["log_probs"].detach(), rtol=0, atol=1e-6)
done.append("opsm_mask")

with received(ppo, "compute_policy_loss") as pl:
    a.call("policy_loss", inputs, {})
reaches((pl[0]["ppo_kl"][0].reshape(B, L), pl[0]["ppo_kl"][1]), inputs["old_log_probs"] - inputs["log_probs"], grad=True)
reaches((pl[0]["advantages"][0].reshape(B, L), False), inputs["advantages"])
done.append("policy_loss")

inputs = canonical("token_rewards", "values")
with received(ppo, "get_advantages_and_returns_batch") as gae:
    a.call("gae", inputs, {})
reaches(gae[0]["rewards_list"], inputs["token_rewards"])
reaches(gae[0]["values_list"], inputs["values"])
done.append("gae")

inputs = {**canonical("log_probs", "ref_log_probs", "values"), "rewards": torch.tensor([1.0, 0.5, -2.0])}
with received(loss, "compute_advantages_and_returns") as adv:
    a.call("advantages", inputs, {"estimator": "gae", "kl_coef": 0.1})
data = adv[0]["rollout_data"]
reaches(data["log_probs"], inputs["log_probs"])
reaches(data["ref_log_probs"], inputs["ref_log_probs"])
reaches(data["values"], inputs["values"])
reaches(data["loss_masks"], MASK)
assert data["rewards"] == [1.0, 0.5, -2.0]
done.append("advantages")

inputs = canonical("log_probs", "old_log_probs", "rollout_log_probs", "advantages", grad=("log_probs",))
with received(loss, "vanilla_tis_function") as tis:
    a.call("is_correction", inputs, {"method": "vanilla_tis"})
reaches(tis[-1]["rollout_log_probs"], inputs["rollout_log_probs"])
reaches(tis[-1]["loss_masks"], MASK)
done.append("is_correction")

cls = rollout.RolloutManager
cls = getattr(getattr(cls, "__ray_metadata__", None), "modified_class", cls)
with received(cls, "_post_process_rewards") as post:
    a.call("reward_norm", {"rewards": torch.tensor([1.0, 0.5, -2.0]), "mask": torch.tensor([1.0, 1.0, 0.0])},
           {"mean_level": "batch", "std_level": "batch", "eps": 1e-6})
samples = post[0]["samples"]
assert [s.reward for s in samples] == [1.0, 0.5, -2.0]
assert [s.remove_sample for s in samples] == [False, False, True]
done.append("reward_norm")
print("@@" + json.dumps(done))
"""


@pytest.mark.skipif(not SLIME, reason="SENTINEL_SLIME_REPO is not set (point it at a git clone of THUDM/slime)")
def test_slime_every_position_reaches_slime():
    code = f"ROOT = {SLIME!r}\nTESTS = {str(Path(__file__).parent)!r}\n{SLIME_BODY}"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    done = json.loads(next(x for x in p.stdout.splitlines() if x.startswith("@@"))[2:])
    assert done == ["kl", "opsm_mask", "policy_loss", "gae", "advantages", "is_correction", "reward_norm"]
