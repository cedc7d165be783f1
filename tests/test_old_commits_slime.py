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
