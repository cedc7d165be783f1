"""The TRL adapter against TRL's real GRPOTrainer._compute_loss (the installed package; a
checkout's history where SENTINEL_TRL_REPO names one), and a planted-bug copy of it.

Install the target with: pip install --no-deps trl==1.16.0 && pip install 'rl-sentinel[trl]'
"""

from __future__ import annotations

import importlib.util
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
    importlib.util.find_spec("trl") is None or importlib.util.find_spec("transformers") is None,
    reason="trl (and transformers) not installed (pip install --no-deps trl==1.16.0 && pip install 'rl-sentinel[trl]')",
)]

HERE = Path(__file__).parent
REPO = os.environ.get("SENTINEL_TRL_REPO")
T = torch.tensor
R0, R1 = math.exp(0.1), math.exp(-0.1)


@pytest.fixture(scope="module")
def trl():
    from sentinel_adapters.trl import TRLAdapter

    adapter = TRLAdapter(None, torch.device("cpu"))
    adapter.facts = adapter.load()
    return adapter


def batch(**kw):
    return {"log_probs": T([[-0.5, -1.0, -0.3]], requires_grad=True), "old_log_probs": T([[-0.6, -0.9, -0.3]]),
            "advantages": T([[1.0, 1.0, 1.0]]), "loss_mask": T([[1, 1, 0]]), **kw}


def test_load_facts(trl):
    assert trl.facts["version"] and trl.facts["version"] != "unknown"
    assert "trl" not in trl.facts["stubs"] and "transformers" not in trl.facts["stubs"]


def test_every_declared_call_resolves(trl):
    from sentinel.adapters.binding import resolve
    from sentinel_adapters.trl import TRLAdapter

    calls = {c for row in TRLAdapter.mapping().values() for c in row["calls"]}
    assert calls and [c for c in sorted(calls) if resolve(c) is None] == []


@pytest.mark.parametrize("agg, loss_type", [("token-mean", None), ("seq-mean-token-mean", None),
                                            ("token-mean", "dapo")])
def test_policy_loss_types(trl, agg, loss_type):
    """bnpo / dapo (token-mean) and grpo (seq-mean-token-mean) on one row: the textbook PPO loss
    and gradient -ratio * A / N."""
    trl.options["loss_type"] = loss_type
    try:
        inputs = batch()
        res = trl.call("policy_loss", inputs, {"eps_clip": 0.2, "loss_agg": agg})
    finally:
        trl.options.pop("loss_type")
    assert res.function.qualname == "GRPOTrainer._compute_loss"
    assert res.outputs["pg_loss"][0, :2].tolist() == pytest.approx([-R0, -R1], abs=1e-6)
    assert res.outputs["loss"].item() == pytest.approx(-(R0 + R1) / 2, abs=1e-6)
    res.outputs["loss"].backward()
    assert inputs["log_probs"].grad[0].tolist() == pytest.approx([-R0 / 2, -R1 / 2, 0.0], abs=1e-6)


def test_dr_grpo_divides_by_rows_times_max_length(trl):
    trl.options["loss_type"] = "dr_grpo"
    try:
        res = trl.call("policy_loss", batch(), {"eps_clip": 0.2, "loss_agg": "seq-mean-token-mean"})
    finally:
        trl.options.pop("loss_type")
    assert res.outputs["loss"].item() == pytest.approx(-(R0 + R1) / 3, abs=1e-6)  # B * max_completion_length = 3


def test_gspo_and_two_sided_clip(trl):
    inputs = {"log_probs": T([[1.5, -1.0]]), "old_log_probs": T([[-0.5, -1.0]]), "advantages": T([[1.0, 1.0]]),
              "loss_mask": T([[1, 1]])}
    res = trl.call("policy_loss", inputs, {"importance_sampling_level": "sequence",
                                           "loss_agg": "seq-mean-token-mean"})
    assert res.outputs["pg_loss"][0].tolist() == pytest.approx([-1.2, -1.2], abs=1e-6)
    neg = {**inputs, "advantages": T([[-1.0, -1.0]])}
    res = trl.call("policy_loss", neg, {"eps_clip_c": 3.0})  # args.delta: the ratio e^2 capped at 3
    assert res.outputs["pg_loss"][0].tolist() == pytest.approx([3.0, 1.0], abs=1e-6)
    with pytest.raises(Unsupported, match="c > 1 \\+ eps_clip_high"):
        trl.call("policy_loss", neg, {"eps_clip_c": 1.1})


def test_cispo(trl):
    inputs = batch(log_probs=T([[0.5, -1.0, -0.3]], requires_grad=True))
    res = trl.call("cispo_loss", inputs, {"eps_clip": 1.0, "eps_clip_high": 0.28})
    w = min(math.exp(1.1), 1.28)
    assert res.outputs["pg_loss"][0, :2].tolist() == pytest.approx([-w * 0.5, R1 * 1.0], abs=1e-6)
    res.outputs["loss"].backward()  # the gradient flows through log pi even where the weight is clipped
    assert inputs["log_probs"].grad[0, :2].tolist() == pytest.approx([-w / 2, -R1 / 2], abs=1e-6)
    with pytest.raises(Unsupported, match="lower clip"):
        trl.call("cispo_loss", batch(), {"eps_clip": 0.2})


def test_loss_agg_counts_fully_masked_rows_in_grpo(trl):
    """The finding grpo-loss-counts-masked-rows, on the loss_agg boundary: grpo's mean over rows
    counts the fully masked one (0.75 where the mean over rows with tokens is 1.5); bnpo does not."""
    inputs = {"values": T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "loss_mask": T([[1, 1, 0], [0, 0, 0]])}
    assert trl.call("loss_agg", inputs, {"mode": "seq-mean-token-mean"}).outputs["loss"].item() == \
        pytest.approx(0.75)
    assert trl.call("loss_agg", inputs, {"mode": "token-mean"}).outputs["loss"].item() == pytest.approx(1.5)


def test_kl_is_k3_in_the_loss(trl):
    lp = T([[-0.5, -1.0]], requires_grad=True)
    res = trl.call("kl", {"log_probs": lp, "ref_log_probs": T([[-0.6, -0.9]]), "loss_mask": T([[1, 1]])},
                   {"kl_type": "k3"})
    assert res.outputs["kl"][0].tolist() == pytest.approx([math.exp(-0.1) - 1 + 0.1, math.exp(0.1) - 1 - 0.1],
                                                          abs=1e-6)
    with pytest.raises(Unsupported, match="k3"):
        trl.call("kl", {"log_probs": lp, "ref_log_probs": lp.detach(), "loss_mask": T([[1, 1]])}, {"kl_type": "k1"})


def test_opsm_mask_is_per_sequence_with_grpo_advantages(trl):
    """One advantage per sequence (GRPO's own layout): the whole off-policy row is rejected."""
    inputs = {"log_probs": T([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), "old_log_probs": T([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]),
              "advantages": T([[-0.5, -0.5, -0.5], [-0.5, -0.5, -0.5]]), "loss_mask": T([[1, 1, 1], [1, 1, 1]])}
    res = trl.call("opsm_mask", inputs, {"opsm_delta": 0.1})
    assert res.outputs["opsm_mask"].tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


def _state(res, name):
    return res.extras[f"returned:state.{name}"]


def test_moe_aux_loss_is_scaled_and_divided_by_the_accumulation_steps(trl):
    """trainer:aux_loss_enabled: the stand-in's load-balancing loss (the mean squared probability)
    enters the loss times router_aux_loss_coef over the accumulation steps, and is logged."""
    steps = {"trainer:current_gradient_accumulation_steps": 2, "trainer:router_aux_loss_coef": 0.1}
    off = trl.call("policy_loss", batch(), {"eps_clip": 0.2, **steps}).outputs["loss"].item()
    res = trl.call("policy_loss", batch(), {"eps_clip": 0.2, "trainer:aux_loss_enabled": True, **steps})
    aux = batch()["log_probs"].detach().exp().pow(2).mean().item()
    assert res.outputs["loss"].item() - off == pytest.approx(0.1 * aux / 2, abs=1e-6)
    assert res.extras["returned:logged.train.aux_loss.0"] == pytest.approx(aux, abs=1e-6)


ADAPTIVE = {"eps_clip": 0.2, "trainer:use_adaptive_entropy": True, "trainer:entropy_coef": 0.01}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_moe_aux_loss_stays_fp32_beside_low_precision_log_probs(trl, dtype):
    """A bf16 model's load-balancing loss is fp32 (transformers sums router probabilities in
    float32): the stand-in's must be too, or TRL's coef * aux_loss is rounded to the log-probs'
    dtype and the precision family blames TRL for the stand-in's rounding (a 0.1 coefficient on
    an aux loss of 1 gave 0.10009766 in bf16)."""
    cfg = {"eps_clip": 0.2, "trainer:aux_loss_enabled": True, "trainer:router_aux_loss_coef": 0.1}
    zero = {k: torch.zeros(1, 1) for k in ("log_probs", "old_log_probs", "advantages")}
    inputs = {**zero, "log_probs": zero["log_probs"].to(dtype), "loss_mask": torch.ones(1, 1)}
    assert trl.call("policy_loss", inputs, cfg).outputs["loss"].item() == pytest.approx(0.1, abs=1e-7)


def test_a_micro_batch_inside_the_window_only_accumulates(trl):
    """trainer:accelerator.sync_gradients False: the controller keeps its coefficient and holds
    this micro-batch's [entropy sum, tokens] for the window; synced after an earlier micro-batch
    (trainer:_entropy_window_stats), the window's entropy counts both."""
    res = trl.call("policy_loss", batch(), {**ADAPTIVE, "trainer:accelerator.sync_gradients": False})
    total, count = _state(res, "_entropy_window_stats").tolist()
    assert count == 2.0 and _state(res, "entropy_coef") == pytest.approx(0.01)
    synced = trl.call("policy_loss", batch(), {**ADAPTIVE, "trainer:_entropy_window_stats": 0.5})
    assert _state(synced, "_last_world_entropy") == pytest.approx((total + 0.5 * 4) / (count + 4), abs=1e-6)


def test_the_adaptive_entropy_bound_binds(trl):
    """Below the target 0.6 (the stand-in's mean entropy on this batch lies under it) the coefficient
    steps up by entropy_coef_delta, to entropy_coef_max where that binds."""
    up = trl.call("policy_loss", batch(), {**ADAPTIVE, "trainer:entropy_target": 0.6,
                                           "trainer:entropy_coef_max": 0.012, "trainer:entropy_coef_delta": 0.05})
    assert _state(up, "entropy_coef") == pytest.approx(0.012)


def test_dr_grpo_divides_by_the_drawn_max_completion_length(trl):
    res = trl.call("policy_loss", batch(), {"eps_clip": 0.2, "loss_agg": "seq-mean-token-mean",
                                            "trainer:loss_type": "dr_grpo", "trainer:max_completion_length": 16})
    assert res.outputs["loss"].item() == pytest.approx(-(R0 + R1) / 16, abs=1e-6)


def test_missing_attribute_is_named(trl):
    from sentinel_adapters.trl.bare import ATTRIBUTES

    saved = ATTRIBUTES.pop("_entropy_bonus_enabled")  # one no trainer option sets (aux_loss_enabled is drawn)
    try:
        with pytest.raises(RuntimeError, match="reads self._entropy_bonus_enabled, which the bare "
                                               "trainer does not set"):
            trl.call("policy_loss", batch(), {})
    finally:
        ATTRIBUTES["_entropy_bonus_enabled"] = saved


# --- the catalog, the planted copy, the hunt --------------------------------------------------

PLANTED = "planted_targets:PlantedTRLAdapter"


@pytest.fixture(scope="module")
def catalogs():
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rep = run(load_paths([catalog_path()]), [TargetSpec("trl"), TargetSpec(PLANTED)])
    return {t: {r.id: r for r in rep.results if r.target == t} for t in ("trl", PLANTED)}


def test_catalog_runs_without_errors(catalogs):
    real = catalogs["trl"]
    assert real and not [r.id for r in real.values() if r.verdict == "error"]
    assert real["grpo-loss-counts-masked-rows"].verdict == "violated"
    assert real["ppo-gradient-unclipped"].verdict == "holds" and real["kl-k3"].verdict == "holds"


def test_catalog_catches_the_planted_copy(catalogs):
    real, planted = catalogs["trl"], catalogs[PLANTED]
    flipped = {sid for sid, r in planted.items() for k, i in enumerate(r.invariants)
               if i.verdict == "violated" and real[sid].invariants[k].verdict == "held"}
    assert "ppo-gradient-unclipped" in flipped, flipped


def test_hunt_catches_the_planted_copy(tmp_path):
    from planted_targets import hunt_both

    planted, real = hunt_both(PLANTED, "trl", "policy_loss.gradient", tmp_path)
    assert [f.family for f in planted.hunt.findings] == ["gradient"] and planted.hunt.findings[0].reproduced is True
    assert real.hunt.findings == [] and {p.status for p in real.hunt.properties} == {"holds"}


# --- a checkout's history ----------------------------------------------------------------------

needs_repo = pytest.mark.skipif(not REPO, reason="set SENTINEL_TRL_REPO to a TRL clone with history")


@needs_repo
def test_history_loads():
    """The first version with _compute_loss (logits path, num_iterations) and HEAD: bnpo excludes a
    fully masked row, grpo's mean counts it, at both (the finding's "since v0.17.0")."""
    known = [rev for rev in ("v0.17.0", "HEAD") if subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True).returncode == 0]
    ids = {"token-mean-counts-masked-sample": "holds", "grpo-loss-counts-masked-rows": "violated"}
    sc = [s for s in load_paths([catalog_path() / "findings"]) if s.id in ids]
    rep = run(sc, [TargetSpec("trl", REPO, rev) for rev in known])
    got = {(r.target, r.id): r.verdict for r in rep.results}
    assert known and got == {(f"trl@{rev}", i): v for rev in known for i, v in ids.items()}, \
        [(r.target, r.id, r.verdict, r.reason) for r in rep.results]


@needs_repo
def test_masked_bumps_and_trl_arms_run_and_hold_at_the_checkout():
    """masked_invariance bumps masked log-probs to 7.5 and more, which the logits path cannot score
    (no log-prob is above 0): reflected there (bare.representable), the catalog's masked families
    run on the checkout instead of answering unsupported. Before: both unsupported. A plant of
    `(log_ratio * mask).sum(-1)` -> `log_ratio.sum(-1)` in a clone violates the GSPO one.
    Beside them TRL's own arms (scenarios/policy/trl-arms.yaml), each violated by a one-line plant
    in a clone (the SAPO loss detached, VESPO's sign, CISPO's weight not detached, OPSM's mask not
    applied, the KL term deleted, the vLLM ratio multiplied in place, eval's normaliser 1.0 -> 2.0, train's division deleted, luspo's length a mean, the entropy gate `<`: benchmarks/results section 25)."""
    ids = {"gspo-sequence-level-ratio": "holds", "kl-k3": "holds", "trl-sapo-soft-gate": "holds",
           "trl-vespo-gamma-weight": "holds", "trl-cispo-weight-stop-gradient": "holds",
           "trl-opsm-sequence-advantages": "holds", "trl-gspo-kl-term-bias-corrected": "holds",
           "trl-vllm-is-ratio-sequence-level": "holds", **{f"trl-eval-loss-{t}": "holds" for t in ("grpo", "bnpo", "dr_grpo")},
           **{f"trl-train-loss-{t}-accumulated": "holds" for t in ("grpo", "bnpo", "dr_grpo")},
           "trl-luspo-sequence-loss-by-length": "holds", "trl-adaptive-entropy-bonus-and-controller": "holds",
           "trl-entropy-bonus-gradient-through-the-entropy": "holds", "trl-opsm-kl-at-threshold-kept": "holds"}
    sc = [s for s in load_paths([catalog_path()]) if s.id in ids]
    rep = run(sc, [TargetSpec("trl", REPO)])
    assert {r.id: r.verdict for r in rep.results} == ids, [(r.id, r.verdict, r.reason) for r in rep.results]


# Each TRL arm entry against a one-line plant of the function it guards: (entry, the line the
# plant's search starts from, the text replaced there, its replacement). A copy of the checkout's
# trl/ package carries each plant; the checkout itself is never written.
ARM_PLANTS = [
    ("trl-sapo-soft-gate", "", "per_token_loss = -soft_coef_1 * advantages",
     "per_token_loss = (-soft_coef_1 * advantages).detach()"),
    ("trl-vespo-gamma-weight", "", "per_token_loss = -phi_seq * advantages", "per_token_loss = phi_seq * advantages"),
    ("trl-cispo-weight-stop-gradient", "", "max=self.epsilon_high).detach()", "max=self.epsilon_high)"),
    ("trl-opsm-sequence-advantages", "", "per_token_loss = per_token_loss * off_policy_mask", "pass"),
    ("trl-gspo-kl-term-bias-corrected", "", "per_token_loss = per_token_loss + self.beta * per_token_kl", "pass"),
    ("trl-vllm-is-ratio-sequence-level", "", "/ mask.sum(-1).clamp(min=1.0)\n", "/ mask.sum(-1).clamp(min=2.0)\n"),
    *[(f"trl-eval-loss-{t}", anchor, "else 1.0  #", "else 2.0  #") for t, anchor in
      (("grpo", 'if self.loss_type in ["grpo", "sapo"]:'), ("bnpo", 'elif self.loss_type == "bnpo":'),
       ("dr_grpo", 'elif self.loss_type == "dr_grpo":'))],
    *[(f"trl-train-loss-{t}-accumulated", anchor, "loss = loss / normalizer", "pass") for t, anchor in
      (("grpo", 'if self.loss_type in ["grpo", "sapo"]:'), ("bnpo", 'elif self.loss_type == "bnpo":'),
       ("dr_grpo", 'elif self.loss_type == "dr_grpo":'))],
    ("trl-luspo-sequence-loss-by-length", 'elif self.loss_type == "luspo":', "loss = loss / normalizer", "pass"),
    ("trl-adaptive-entropy-bonus-and-controller", "", "self._last_world_entropy <= self.args.entropy_target",
     "self._last_world_entropy < self.args.entropy_target"),
    # the actor's entropies under the bonus (_get_per_token_logps_and_entropies, before _compute_loss's use)
    ("trl-entropy-bonus-gradient-through-the-entropy", "if self._entropy_bonus_enabled:",
     "entropies = entropy_from_logits(logits)", "entropies = entropy_from_logits(logits).detach()"),
    # get_off_policy_mask's tie: a sequence KL exactly at the threshold is kept (`<=`)
    ("trl-opsm-kl-at-threshold-kept", "", "is_low_kl = avg_seq_kl <= off_policy_threshold",
     "is_low_kl = avg_seq_kl < off_policy_threshold"),
]


def planted_copy(root: Path, dest: Path, anchor: str, old: str, new: str) -> Path:
    """The checkout's trl/ package and VERSION copied to dest with `old` (its first occurrence
    after `anchor`) replaced in grpo_trainer.py."""
    import shutil

    shutil.copytree(root / "trl", dest / "trl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "VERSION", dest / "VERSION")
    src = dest / "trl" / "trainer" / "grpo_trainer.py"
    text = src.read_text()
    at = text.index(anchor)
    hit = text.index(old, at)
    src.write_text(text[:hit] + new + text[hit + len(old):])
    return dest


@needs_repo
@pytest.mark.parametrize("sid,anchor,old,new", ARM_PLANTS, ids=[p[0] for p in ARM_PLANTS])
def test_each_trl_arm_entry_is_violated_by_its_plant(tmp_path, sid, anchor, old, new):
    """The arm entries hold at the checkout (test above) and each is violated on a copy of it
    with its one-line plant (results section 25's plants; luspo's: its division deleted)."""
    sc = [s for s in load_paths([catalog_path()]) if s.id == sid]
    copy = planted_copy(Path(REPO), tmp_path, anchor, old, new)
    rep = run(sc, [TargetSpec("trl", str(REPO), label="checkout"), TargetSpec("trl", str(copy), label="planted")],
              parallel=1)
    got = {r.target: r.verdict for r in rep.results}
    assert got == {"checkout": "holds", "planted": "violated"}, [(r.target, r.verdict, r.reason) for r in rep.results]
