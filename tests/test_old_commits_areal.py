"""Every commit's boundary runs (issue 19, item 6), on AReaL's real history: the calling
conventions and config classes AReaL had in 2025 reach the boundaries, an option an old version
lacks is `unsupported` as "option missing" (never signature drift, never a failed call), and
AReaL's own broken import of its actor at one commit fails only the boundaries that need it.

`bind`'s `absent` (how a version without a parameter behaves) is tested on toy functions; the
rest runs the probe calls of `benchmarks/bench_history_call.py` at real commits of the checkout
named by SENTINEL_AREAL_REPO, through sentinel's own checkout cache (`runner.run_group`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel.adapters.binding import bind
from sentinel.errors import Unsupported

ROOT = Path(__file__).resolve().parents[1]
REPO = os.environ.get("SENTINEL_AREAL_REPO")


def old_loss(logprobs, eps_clip, behav_imp_weight_cap):  # a 2025 signature: no level, a required cap
    return logprobs


def test_absent_parameter_at_its_neutral_value_is_left_out_and_a_required_one_filled():
    kw = bind(old_loss, "policy_loss", {"logprobs": 1.0, "eps_clip": 0.2}, {"importance_sampling_level": "token"},
              absent={"importance_sampling_level": "token", "behav_imp_weight_cap": None})
    assert kw == {"logprobs": 1.0, "eps_clip": 0.2, "behav_imp_weight_cap": None}


def test_absent_parameter_at_another_value_is_an_option_missing_not_drift():
    with pytest.raises(Unsupported) as e:
        bind(old_loss, "policy_loss", {"logprobs": 1.0, "eps_clip": 0.2, "behav_imp_weight_cap": None},
             {"importance_sampling_level": "sequence"}, absent={"importance_sampling_level": "token"})
    assert "option missing" in str(e.value) and "signature drift" not in str(e.value)
    assert "importance_sampling_level='sequence'" in str(e.value)
    with pytest.raises(Unsupported, match="signature drift"):  # not declared absent: still drift
        bind(old_loss, "policy_loss", {"logprobs": 1.0, "eps_clip": 0.2, "behav_imp_weight_cap": None},
             {"importance_sampling_level": "sequence"})


# --- real AReaL commits -------------------------------------------------------------------

needs_repo = pytest.mark.skipif(not REPO, reason="SENTINEL_AREAL_REPO (path of an AReaL checkout) is not set")


def probe(sha: str, boundaries: list[str], config: dict | None = None, target: str = "areal") -> dict:
    """{boundary: result} of the bench's one probe call per boundary at `sha` of the target's
    checkout (SENTINEL_<TARGET>_REPO)."""
    repo = os.environ[f"SENTINEL_{target.upper()}_REPO"]
    if subprocess.run(["git", "-C", repo, "cat-file", "-e", f"{sha}^{{commit}}"]).returncode:
        pytest.skip(f"the {target} checkout lacks commit {sha}")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_history_call as bench
    from sentinel.runner import TargetSpec, run_group
    from sentinel.spec import load_text

    scs = [load_text(bench.probe_yaml(b, (config or {}).get(b, {})), f"<probe {b}>")[0] for b in boundaries]
    group = run_group(scs, TargetSpec(target, repo=repo, commit=sha), timeout=300.0)
    assert group.target.load_error is None, group.target.load_error
    return {r.boundary: r for r in group.results}


def ran(r) -> bool:
    return r.verdict in ("holds", "violated")


def why(r) -> str:
    return r.reason or str(r.exception_info and r.exception_info.message)


@pytest.mark.slow
@needs_repo
def test_areal_lite_first_commit_runs_loss_and_metrics():
    """094adbb6c (2025-08, AReaL-lite): ppo_actor_loss_fn requires behav_imp_weight_cap and has no
    eps_clip_higher / importance_sampling_level; grpo_loss_fn takes logits and a temperature and
    logs to realhf's stats_tracker; compute_advantages stores no returns (an option missing)."""
    res = probe("094adbb6c", ["policy_loss", "metrics", "advantages"])
    assert ran(res["policy_loss"]), why(res["policy_loss"])
    assert ran(res["metrics"]), why(res["metrics"])
    adv = res["advantages"]
    assert adv.verdict == "unsupported" and "stores no returns" in adv.reason and "drift" not in adv.reason
    # b3b1fd696 (2025-09): group_reward_norm but no group_adv_norm, adv_norm an AdvNormConfig
    adv = probe("b3b1fd696", ["advantages"])["advantages"]
    assert adv.verdict == "unsupported" and "stores no returns" in adv.reason and "drift" not in adv.reason


@pytest.mark.slow
@needs_repo
def test_dict_batch_advantages_and_unbiased_call_argument():
    """c431dd6c4 (2025-10): compute_advantages takes one padded batch dict and PPOActor has no
    _compute_advantages; a327a9fc2 (2025-09): NormConfig has no std_unbiased, Normalization's
    call takes `unbiased`. An estimator other than k1 there: option missing (no kl_estimator)."""
    res = probe("c431dd6c4", ["advantages"])
    assert ran(res["advantages"]), why(res["advantages"])
    res = probe("a327a9fc2", ["masked_reduce", "advantages"],
                {"masked_reduce": {"op": "whiten"}, "advantages": {"kl_type": "k3"}})
    assert ran(res["masked_reduce"]), why(res["masked_reduce"])
    adv = res["advantages"]
    assert adv.verdict == "unsupported" and "option missing" in adv.reason and "kl_estimator" in adv.reason


@pytest.mark.slow
@needs_repo
def test_metrics_through_each_grpo_loss_fn_generation():
    """27c582e96: the loss mask read as full_loss_mask; e6ab0e833: log-probs in, but
    behav_imp_weight_cap required; c1bede503: spelt behave_imp_weight_cap."""
    for sha in ("27c582e96", "e6ab0e833", "c1bede503"):
        r = probe(sha, ["metrics"])["metrics"]
        assert ran(r), f"{sha}: {why(r)}"


@pytest.mark.slow
@needs_repo
def test_actor_that_does_not_import_fails_only_what_needs_it():
    """cd3d405dc: AReaL's own actor imports sapo_loss_fn, which its package did not export until
    #703 the next day. The functional losses still run; metrics fails naming that import."""
    res = probe("cd3d405dc", ["policy_loss", "metrics"])
    assert ran(res["policy_loss"]), why(res["policy_loss"])
    m = res["metrics"]
    assert m.verdict not in ("holds", "violated", "unsupported") and "sapo_loss_fn" in why(m)
