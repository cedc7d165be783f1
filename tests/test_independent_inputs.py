"""Independent inputs (issue 19 item 2): the tensors an adapter used to derive from another drawn
input, or never hand over, are boundary inputs drawn on their own, and the optional ones are
drawn absent too (strategies' "absent" relation), so the trainer code that tells them apart runs.

Fast: what the strategies draw, and the reference's reading of the new input. Slow (with a
trainer's checkout): a one-line bug planted in the real trainer function, showing only where the
two inputs differ, is found by a short seeded differential hunt (the planted function against
the same adapter unplanted) and is not found when the adapter hands the trainer the related
tensor again (tests/indep_plants.py, `...Bound`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from drawn import drawn
from sentinel import hunt as H
from sentinel import strategies as S
from sentinel.invariants.base import is_extra
from sentinel.runner import TargetSpec
from sentinel_adapters.reference.adapter import ReferenceAdapter
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS

HERE = Path(__file__).parent
TRL_REPO = os.environ.get("SENTINEL_TRL_REPO")
AREAL_REPO = os.environ.get("SENTINEL_AREAL_REPO")
VERL_REPO = os.environ.get("SENTINEL_VERL_REPO")


def test_rollout_log_probs_are_drawn_apart_alike_and_absent():
    seen = {"apart": 0, "alike": 0, "absent": 0}
    for ex in drawn("opsm_mask"):
        m = ex.inputs["loss_mask"].astype(bool)
        if "rollout_log_probs" not in ex.inputs:
            seen["absent"] += 1
        elif m.any():
            same = (ex.inputs["rollout_log_probs"][m] == ex.inputs["old_log_probs"][m]).all()
            seen["alike" if same else "apart"] += 1
    assert all(v >= 5 for v in seen.values()), seen


def test_absent_leaves_out_only_what_no_set_option_requires():
    assert S.absent_inputs("opsm_mask", {}) == ("rollout_log_probs",)
    assert S.absent_inputs("advantages", {}) == ("rollout_log_probs",)
    assert S.absent_inputs("policy_loss", {"use_decoupled_loss": False}) == ("rollout_log_probs",)
    assert S.absent_inputs("policy_loss", {"use_decoupled_loss": True}) == ()  # it requires them
    assert S.absent_inputs("is_correction", {}) == ()  # a required input is never left out
    exs = drawn("policy_loss", config={"use_decoupled_loss": [True]}, n=100)
    assert all("rollout_log_probs" in ex.inputs for ex in exs)


def test_the_reference_opsm_measures_the_kl_from_the_sampling_engine_where_given():
    # old == log_probs (no update drift) but the engine sampled far from them: rejected only
    # when the engine's log-probs are given
    lp = torch.tensor([[-0.5, -0.5]])
    base = {"log_probs": lp, "old_log_probs": lp.clone(), "advantages": torch.tensor([[-1.0, -1.0]]),
            "loss_mask": torch.ones(1, 2)}
    ref = ReferenceAdapter()
    without = ref.call("opsm_mask", base, {"opsm_delta": 0.1}).outputs["opsm_mask"]
    given_ = ref.call("opsm_mask", {**base, "rollout_log_probs": lp + 1.0}, {"opsm_delta": 0.1}).outputs["opsm_mask"]
    assert without.tolist() == [[1.0, 1.0]] and given_.tolist() == [[0.0, 0.0]]


# --- slow: planted bugs in the real trainers ------------------------------------------------------

def _hunt(tmp_path: Path, cls: str, repo: str, boundary: str, *, commit: str | None = None,
          config: dict | None = None, n: int = 300) -> list:
    """The findings of a seeded differential hunt: `indep_plants:{cls}Clean` against `...Planted`."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rep = H.differential(TargetSpec(f"indep_plants:{cls.replace('*', 'Clean')}", repo, commit),
                         TargetSpec(f"indep_plants:{cls.replace('*', 'Planted')}", repo, commit), [boundary],
                         DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path / cls.replace("*", ""), first=True,
                         max_examples=n, config=config or {}, **DIFFERENTIAL)
    assert rep.hunt.differential.compared > 0, "nothing was compared"
    return rep.hunt.findings


@pytest.mark.slow
@pytest.mark.skipif(not TRL_REPO, reason="set SENTINEL_TRL_REPO to a TRL clone (its GRPOTrainer at HEAD)")
def test_trl_opsm_without_the_sampling_log_probs_is_found_only_when_they_are_handed_over(tmp_path):
    assert _hunt(tmp_path, "Trl*", TRL_REPO, "opsm_mask", n=400), "the plant reads old log-probs where vLLM's differ"
    assert _hunt(tmp_path, "Trl*Bound", TRL_REPO, "opsm_mask", n=400) == [], "the old adapter never hands them over"


@pytest.mark.slow
@pytest.mark.skipif(not AREAL_REPO, reason="set SENTINEL_AREAL_REPO to an AReaL clone (its PPOActor at HEAD)")
def test_areal_kl_from_the_rollout_log_probs_under_recompute_is_found_only_when_they_differ(tmp_path):
    pins = {"trainer:recompute_logprob": True, "kl_coef": 0.1, "estimator": "gae"}
    assert _hunt(tmp_path, "Areal*", AREAL_REPO, "advantages", config=pins, n=150)
    # bound, the KL reads the same values at every valid position: no output differs. The plant's
    # roll still moves junk into the masked head of the returned prox_logp (1.0 where AReaL keeps
    # 0.0), an extras-only difference, reported since they are no longer held back 64 examples
    canonical = [f for f in _hunt(tmp_path, "Areal*Bound", AREAL_REPO, "advantages", config=pins, n=150)
                 if not is_extra(f.signature.observable)]
    assert canonical == [], "with the rollout's log-probs equal to the recomputed ones the plant reads the same values"


def _has(repo: str, commit: str) -> bool:
    return subprocess.run(["git", "-C", repo, "cat-file", "-e", commit + "^{commit}"],
                          capture_output=True).returncode == 0


VERL_TIS = "7f277899"  # 21271aab^ (2025-10): the vanilla loss's truncated IS on rollout_log_probs


@pytest.mark.slow
@pytest.mark.skipif(not VERL_REPO, reason="set SENTINEL_VERL_REPO to a verl clone (with its 2025-10 history)")
def test_verl_tis_on_rollout_log_probs_bound_by_its_own_name_is_found(tmp_path):
    if not _has(VERL_REPO, VERL_TIS):
        pytest.skip(f"SENTINEL_VERL_REPO has no commit {VERL_TIS}")
    pins = {"trainer:tis_imp_ratio_cap": 2.0, "importance_sampling_level": "token"}
    assert _hunt(tmp_path, "Verl*", VERL_REPO, "policy_loss", commit=VERL_TIS, config=pins, n=150)
    assert _hunt(tmp_path, "Verl*Bound", VERL_REPO, "policy_loss", commit=VERL_TIS, config=pins, n=150) == [], \
        "without rollout_log_probs verl's truncated IS never runs"



@pytest.mark.slow
@pytest.mark.skipif(not TRL_REPO, reason="set SENTINEL_TRL_REPO to a TRL clone (its GRPOTrainer at HEAD)")
def test_trl_opsm_fallback_for_a_batch_without_sampling_log_probs_is_found_only_through_absent(tmp_path, monkeypatch):
    # the plant changes only what OPSM uses where the batch has no sampling log-probs
    assert _hunt(tmp_path, "TrlAbsent*", TRL_REPO, "opsm_mask", n=1500)
    monkeypatch.setattr(S, "RELATIONS", tuple(r for r in S.RELATIONS if r != "absent"))
    assert _hunt(tmp_path, "TrlAbsent*", TRL_REPO, "opsm_mask", n=1500) == [], "never absent: the fallback never runs"


AREAL_FULL_MASK = "801bf5c6"  # 79b742c1^ (2025-12): grpo_loss_fn gathers log-probs and reads full_loss_mask


@pytest.mark.slow
@pytest.mark.skipif(not AREAL_REPO, reason="set SENTINEL_AREAL_REPO to an AReaL clone (with its 2025-12 history)")
def test_areal_loss_mask_fallback_without_full_loss_mask_is_found_only_with_the_presence_axis(tmp_path):
    if not _has(AREAL_REPO, AREAL_FULL_MASK):
        pytest.skip(f"SENTINEL_AREAL_REPO has no commit {AREAL_FULL_MASK}")
    assert _hunt(tmp_path, "ArealMask*", AREAL_REPO, "metrics", commit=AREAL_FULL_MASK, n=150)
    assert _hunt(tmp_path, "ArealMask*Bound", AREAL_REPO, "metrics", commit=AREAL_FULL_MASK, n=150) == [], \
        "with full_loss_mask always in the batch the fallback never runs"
