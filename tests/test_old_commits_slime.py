"""Every commit's boundary runs (issue 19, item 6) on slime's history: its first commits' loss
reducer took the per-sample tensors as a required first argument (`xs`, read only under context
parallelism), and until 843c94e (2025-09-19) its value path handed each sample's values on as
[T, 1]. Both are the adapter's to bind and reshape; neither is a failed call."""

from __future__ import annotations

import os

import pytest

from test_old_commits_areal import probe, why

needs_slime = pytest.mark.skipif(not os.environ.get("SENTINEL_SLIME_REPO"),
                                 reason="SENTINEL_SLIME_REPO (path of a slime checkout) is not set")


@pytest.mark.slow
@needs_slime
def test_the_reducer_gets_its_per_sample_tensors_where_it_requires_them():
    res = probe("e0be9a075", ["loss_agg"], target="slime")
    assert res["loss_agg"].verdict in ("holds", "violated"), why(res["loss_agg"])


@pytest.mark.slow
@needs_slime
def test_values_with_the_heads_trailing_dim_are_the_same_values():
    res = probe("3e043e4d6", ["values"], target="slime")
    assert res["values"].verdict in ("holds", "violated"), why(res["values"])


@pytest.mark.slow
@needs_slime
def test_reusing_the_loss_pass_log_probs_is_unsupported_before_slime_had_it():
    """`trainer:can_reuse_log_probs_in_loss` leaves the batch without old log-probs, as slime's actor does
    since bf9b1a3 (#1897). Before it policy_loss_function read batch["log_probs"] unconditionally: the
    option did not exist, so it is unsupported there (it was a KeyError, an `error`), and runs from it on."""
    reuse = {"trainer:can_reuse_log_probs_in_loss": True}
    config = {"is_correction": {"method": "vanilla_tis", **reuse}, "policy_loss": reuse}
    before = probe("bf9b1a3~1", ["is_correction", "policy_loss"], config, target="slime")
    for r in before.values():
        assert r.verdict == "unsupported" and "reuse arrived in bf9b1a3" in r.reason, why(r)
    after = probe("bf9b1a3", ["is_correction", "policy_loss"], config, target="slime")
    assert {b: r.verdict for b, r in after.items()} == {"is_correction": "holds", "policy_loss": "holds"}


@pytest.mark.slow
@needs_slime
def test_metrics_reduce_where_slime_kept_its_step_reduction():
    """reduce_train_step_metrics moved to observability.train_metric_utils in 624b824a8 (#2298); from
    7405851 (#1933) to there it was in megatron_utils.cp_utils, where the boundary was unsupported (it
    looked in the new module only); before 7405851 train_one_step reduced inline: nothing to call."""
    config = {"metrics": {"trainer:num_microbatches": 3}}
    for sha in ("624b824a8~1", "7405851"):
        r = probe(sha, ["metrics"], config, target="slime")["metrics"]
        assert r.verdict == "holds" and r.function.module.endswith("loss"), (sha, why(r))
    r = probe("7405851~1", ["metrics"], config, target="slime")["metrics"]
    assert r.verdict == "unsupported" and "inline in train_one_step" in r.reason, why(r)
