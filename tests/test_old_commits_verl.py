"""Every commit's boundary runs (issue 19, item 6) on verl's history: in mid-2025 (551d4cc56 and
its neighbours) verl's OptimizerConfig had no default learning rate (``lr = MISSING``, asserted in
``__post_init__``), so ActorConfig's default ``optim`` could not be built and every policy-loss
boundary read `unsupported` with an empty reason. The loss never reads the optimizer: the adapter
gives it a learning rate.

Before agg_loss (March 2025, a1dd9224b), compute_policy_loss reduced its token loss with
masked_mean: the adapter found no `pg_loss` and every policy_loss scenario was an adapter defect
("output 'pg_loss' is missing"); the token loss is now the masked_mean argument whose result is
the loss. The metrics boundary read `unsupported` there ("no agg_loss") although
compute_policy_loss returned clipfrac and ppo_kl: dp_actor then logged kl_loss as
masked_mean(kld, response_mask), which the adapter now calls where agg_loss does not exist."""

from __future__ import annotations

import os
import subprocess

import pytest

from test_old_commits_areal import probe, why


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SENTINEL_VERL_REPO"),
                    reason="SENTINEL_VERL_REPO (path of a verl checkout) is not set")
def test_policy_loss_runs_where_the_optimizer_config_had_no_default_learning_rate():
    res = probe("551d4cc56", ["policy_loss", "metrics"], target="verl")
    for b in ("policy_loss", "metrics"):
        assert res[b].verdict in ("holds", "violated"), why(res[b])


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SENTINEL_VERL_REPO"),
                    reason="SENTINEL_VERL_REPO (path of a verl checkout) is not set")
@pytest.mark.parametrize("boundary", ["policy_loss", "metrics"])
def test_runs_before_agg_loss(boundary):
    res = probe("a1dd9224b", [boundary], target="verl")
    assert res[boundary].verdict in ("holds", "violated"), why(res[boundary])


_DISABLE = """
id: engine-seq-mean-token-sum
title: the engine worker's agg_loss at one commit
boundary: loss_agg
config: {mode: seq-mean-token-sum, "trainer:use_legacy_worker_impl": disable}
inputs:
  values:    [[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0], [7.0, 7.0, 7.0, 7.0]]
  loss_mask: [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
invariants:
  - finite: {}
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SENTINEL_VERL_REPO"),
                    reason="SENTINEL_VERL_REPO (path of a verl checkout) is not set")
@pytest.mark.parametrize("sha, loss", [
    ("9c5facbb", 5.0),  # 2025-11-23 (8ed5bafc^): roles/utils/losses.ppo_loss, no global_batch_info: the 2 non-empty rows
    ("8ed5bafc", 10.0 / 3),  # 2025-11-24: roles/utils/losses.ppo_loss fills it: the whole mini-batch, 3 rows
])
def test_engine_worker_loss_where_its_ppo_loss_lived(sha, loss):
    """use_legacy_worker_impl=disable read `unsupported` wherever workers/utils/losses.py did not fill
    global_batch_info, although the engine worker's ppo_loss existed (in workers/roles/utils until
    2025-11-29), filling it or handing agg_loss a bool mask with local counts."""
    from sentinel.runner import TargetSpec, run_group
    from sentinel.spec import load_text

    repo = os.environ["SENTINEL_VERL_REPO"]
    if subprocess.run(["git", "-C", repo, "cat-file", "-e", f"{sha}^{{commit}}"]).returncode:
        pytest.skip(f"the verl checkout lacks commit {sha}")
    (res,) = run_group(load_text(_DISABLE, "<engine>"), TargetSpec("verl", repo=repo, commit=sha), timeout=300.0).results
    assert res.verdict in ("holds", "violated"), why(res)  # (finite is violated: seq-mean-loss-nan-masked)
    assert float(res.observations["loss"]) == pytest.approx(loss)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SENTINEL_VERL_REPO"),
                    reason="SENTINEL_VERL_REPO (path of a verl checkout) is not set")
@pytest.mark.parametrize("sha", [
    "6a9a1b87^",  # 2025-07: compute_log_prob's GPUMemoryLogger asks torch.cpu.memory_allocated, absent on CPU torch
    "67a127b4^",  # 2026-01: _forward_micro_batch returns (entropy, log_probs), not a dict
])
def test_actor_logprobs_runs_on_older_actors(sha):
    """The actor boundary read `error` on every verl before 2026-01-08 (the tuple) and, with micro-batches,
    on 2025-04 to 07 (the memory log): the hunt drew no example there. The catalog's micro-batched
    scenario (its batching_invariant calls both paths) now runs and holds."""
    from pathlib import Path

    from sentinel.runner import TargetSpec, run_group
    from sentinel.spec import load_text

    repo = os.environ["SENTINEL_VERL_REPO"]
    if subprocess.run(["git", "-C", repo, "cat-file", "-e", f"{sha}^{{commit}}"]).returncode:
        pytest.skip(f"the verl checkout lacks commit {sha}")
    path = Path(__file__).resolve().parents[1] / "scenarios" / "actor_logprobs" / "batching.yaml"
    sc = next(s for s in load_text(path.read_text(), str(path)) if s.id == "actor-logprobs-micro-batched")
    (res,) = run_group([sc], TargetSpec("verl", repo=repo, commit=sha), timeout=300.0).results
    assert res.verdict == "holds", why(res)
