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
def test_policy_loss_runs_before_agg_loss():
    res = probe("a1dd9224b", ["policy_loss"], target="verl")
    assert res["policy_loss"].verdict in ("holds", "violated"), why(res["policy_loss"])


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SENTINEL_VERL_REPO"),
                    reason="SENTINEL_VERL_REPO (path of a verl checkout) is not set")
def test_metrics_run_before_agg_loss():
    res = probe("a1dd9224b", ["metrics"], target="verl")
    assert res["metrics"].verdict in ("holds", "violated"), why(res["metrics"])
