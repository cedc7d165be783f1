"""slime's loss reducer under context parallelism, every rank played in turn on one process.

The layout the adapter cuts each sample by (adapters/slime/context_parallel.py) is checked here
on its own; with SENTINEL_SLIME_REPO set, two scenarios (the ranks' sum is the one-rank loss) hold
on that checkout and fail on a clone whose second-chunk mask offset is planted one token off. They
live here, not in the catalog: a trainer option in a scenario's config is slime's alone, and the
reference must support every catalog scenario (`sentinel gate`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel_adapters.slime.context_parallel import zigzag_indices

SLIME = os.environ.get("SENTINEL_SLIME_REPO")
SCENARIOS = """
id: loss-agg-context-parallel-seq-mean
title: the context-parallel ranks' per-sample means add up to the one-rank loss
boundary: loss_agg
targets: [slime]
config: {mode: seq-mean-token-mean, "trainer:context_parallel_size": 2}
inputs:
  values:    [[1.0, 2.0, 3.0, 4.0, 5.0], [0.5, -1.0, 2.0, 9.0, 9.0], [3.0, 0.0, 1.0, -2.0, 4.0]]
  loss_mask: [[1, 1, 1, 1, 1], [1, 0, 1, 0, 1], [0, 1, 0, 1, 1]]
invariants:
  - close: {output: loss, expected: 2.5}                # (3 + 11.5 / 3 + 2 / 3) / 3
  - batching_invariant: {against: [{"trainer:context_parallel_size": 1}]}
---
id: loss-agg-context-parallel-token-mean
title: four ranks after a five-token prompt (whole chunks of prompt) sum to the one-rank token mean
boundary: loss_agg
targets: [slime]
config: {mode: token-mean, "trainer:context_parallel_size": 4, "trainer:prompt_length": 5}
inputs:
  values:    [[1.0, 2.0, 3.0, 4.0, 5.0], [0.5, -1.0, 2.0, 9.0, 9.0], [3.0, 0.0, 1.0, -2.0, 4.0]]
  loss_mask: [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 0, 1, 1]]
invariants:
  - close: {output: loss, expected: 1.6818182}          # (15 + 1.5 + 2) / 11
  - batching_invariant: {against: [{"trainer:context_parallel_size": 1}, {"trainer:context_parallel_size": 2}]}
"""
CP_UTILS = Path("slime") / "backends" / "megatron_utils" / "cp_utils.py"
RIGHT = "loss_mask_1 = loss_mask[tokens_offset[1][0] - prompt_length : tokens_offset[1][1] - prompt_length]"
PLANT = "loss_mask_1 = loss_mask[tokens_offset[1][0] - prompt_length - 1 : tokens_offset[1][1] - prompt_length - 1]"


def test_zigzag_ranks_hold_each_response_token_once():
    for total, response in ((6, 5), (10, 5), (3, 2), (17, 16), (9, 1), (2, 1)):
        for size in (1, 2, 4):
            held = [j for rank in range(size) for j in zigzag_indices(total, response, size, rank)]
            assert sorted(held) == list(range(response)), (total, response, size)


def test_zigzag_follows_the_load_balanced_rule():
    # 6 tokens (one prompt token), 2 ranks: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2;
    # response token j is predicted at position j (prompt 1), so rank 0 holds j 0-1 and chunk 3 is past the end
    assert zigzag_indices(6, 5, 2, 0) == [0, 1]
    assert zigzag_indices(6, 5, 2, 1) == [2, 3, 4]
    # a 5-token prompt: rank 0's chunk 0 is all prompt, chunk 3 only the last token (which predicts nothing)
    assert zigzag_indices(10, 5, 2, 0) == []
    assert zigzag_indices(10, 5, 2, 1) == [0, 1, 2, 3, 4]
    # 4 ranks, 8 chunks of 2 over 16 tokens: rank 1 holds chunks 1 and 6 (positions 2-3 and 12-13)
    assert zigzag_indices(16, 15, 4, 1) == [2, 3, 12, 13]


def _run(repo: Path | str, cwd: Path) -> dict[str, str]:
    scenarios = cwd / "context-parallel.yaml"
    scenarios.write_text(SCENARIOS)
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", "run", str(scenarios), "--target", "slime",
                        "--repo", str(repo), "-o", "-", "--json"], capture_output=True, text=True, cwd=cwd, timeout=600)
    assert p.stdout, p.stderr[-4000:]
    return {r["id"]: r["verdict"] for r in json.loads(p.stdout)["results"]}


@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")
def test_context_parallel_check_fails_on_a_planted_chunk_offset(tmp_path):
    """On the checkout both scenarios hold (the ranks' sum is the one-rank loss, against the adapter's
    own layout); a clone whose get_sum_of_sample_mean cuts the second chunk's mask one token early
    trains masked tokens and drops valid ones: both scenarios are violated."""
    clone = tmp_path / "slime"
    subprocess.run(["git", "clone", "-q", "--shared", SLIME, str(clone)], check=True, timeout=300)
    source = (clone / CP_UTILS).read_text()
    if source.count(RIGHT) != 1:
        pytest.skip(f"{CP_UTILS} at this commit has no single `{RIGHT}` to plant the bug in")
    (clone / CP_UTILS).write_text(source.replace(RIGHT, PLANT))
    assert set(_run(SLIME, tmp_path).values()) == {"holds"}
    assert set(_run(clone, tmp_path).values()) == {"violated"}
