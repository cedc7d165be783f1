"""Every commit's boundary runs (issue 19, item 6) on OpenRLHF's history: in May 2025
(7d3e07b..494850f) `Experience.__init__` did `self.rewards = rewards or []` (a list field) and
the experience maker set the reward tensor afterwards; the adapter does the same."""

from __future__ import annotations

import os

import pytest

from test_old_commits_areal import probe


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SENTINEL_OPENRLHF_REPO"),
                    reason="SENTINEL_OPENRLHF_REPO (path of an OpenRLHF checkout) is not set")
def test_reward_tensor_set_after_an_experience_built_with_a_list_field():
    res = probe("884c9ae2e", ["advantages", "reward_norm"], target="openrlhf")
    for b in ("advantages", "reward_norm"):
        assert res[b].verdict in ("holds", "violated"), res[b].reason
