"""slime's advantages on data- x context-parallel ranks run at once (adapters/slime/parallel.py).

compute_advantages_and_returns whitens over the DP-with-CP group (an all-reduce in the middle of
the function) and, under PPO with CP, GAE all-gathers each sequence's chunks: the ranks run as
threads of one process (`sentinel.adapters.ranks`). With SENTINEL_SLIME_REPO set: the whitened
advantages on 2 CP ranks, on 4 CP x 2 DP ranks and on 2 DP ranks equal the one-rank ones at the
checkout; slime c1dd9ab (before dd7f037 whitened over the DP group without the CP ranks, so the two
halves of a sequence got different affine maps) violates the CP scenarios and dd7f037 holds them;
a clone with distributed_masked_whiten's all-reduce planted away violates the CP 2 and DP 2 ones
(4 CP ranks: a rank with no valid token raises on its zero count). PPO under CP: slime adds the
reward to cp_rank 0's last local token, not the last response token's when another rank holds it
(a real slime bug on sequences of at most 4 * cp**2 tokens): violated there at the checkout, held
where rank 0 holds the sequence's end and by a clone that places the reward on the owner of the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SLIME = os.environ.get("SENTINEL_SLIME_REPO")
INPUTS = """
inputs:
  rewards:       [1.0, 0.0, 3.0]
  log_probs:     [[-0.5, -1.0, -0.2, -0.3, -0.1], [-0.1, -0.2, -0.3, -0.4, -0.5], [-1.0, -0.4, -0.2, -0.3, -0.9]]
  ref_log_probs: [[-0.6, -0.8, -0.4, -0.2, -0.3], [-0.2, -0.2, -0.1, -0.4, -0.7], [-0.3, -0.4, -0.6, -0.3, -0.1]]
  loss_mask:     [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]
"""
CONFIG = "{estimator: grpo, kl_coef: 0.1, kl_type: k1, gamma: 1.0, lam: 1.0, normalize_advantages: true, %s}"


def scenario(ident: str, ranks: str, one: str) -> str:
    return (f"id: {ident}\ntitle: whitened advantages on several ranks equal one rank's\nboundary: advantages\n"
            f"targets: [slime]\nconfig: {CONFIG % ranks}\n{INPUTS.strip()}\ninvariants:\n"
            f"  - batching_invariant: {{against: [{{{one}}}]}}\n")


CP, DP, PROMPT = '"trainer:context_parallel_size"', '"trainer:data_parallel_size"', '"trainer:prompt_length"'
SCENARIOS = "---\n".join([
    scenario("advantages-whiten-cp2", f"{CP}: 2", f"{CP}: 1"),
    scenario("advantages-whiten-cp4-dp2", f"{CP}: 4, {DP}: 2", f"{CP}: 1, {DP}: 1"),
    scenario("advantages-whiten-dp2", f"{DP}: 2", f"{DP}: 1"),
])


def ppo_scenario(ident: str, width: int, cp: int, prompt: int = 1) -> str:
    """GAE advantages (no KL, no whitening: only where the reward lands) on `cp` CP ranks vs one."""
    values = [round(0.1 * (i % 5) - 0.2, 2) for i in range(width)]
    log_probs = [round(-0.1 * (1 + i % 4), 2) for i in range(width)]
    return (f"id: {ident}\ntitle: PPO advantages on {cp} context-parallel ranks equal one rank's\nboundary: advantages\n"
            f"targets: [slime]\nconfig: {{estimator: gae, kl_coef: 0.0, kl_type: k1, gamma: 1.0, lam: 1.0, "
            f"normalize_advantages: false, {CP}: {cp}, {PROMPT}: {prompt}}}\ninputs:\n  rewards: [1.0, 2.0]\n"
            f"  values: [{values}, {values[::-1]}]\n  log_probs: [{log_probs}, {log_probs}]\n"
            f"  ref_log_probs: [{log_probs}, {log_probs}]\n  loss_mask: [{[1] * width}, {[1] * (width - 2) + [0, 0]}]\n"
            f"invariants:\n  - batching_invariant: {{against: [{{{CP}: 1}}]}}\n")


# After a one-token prompt: 13 tokens on 2 CP ranks are 4 chunks of 4, the last holding only the
# last token, whose log-prob comes from position 11 (rank 1's chunk 2); on 4 ranks (8 chunks of 2)
# the last chunk is empty. 16 tokens on 2 ranks: the last chunk holds positions 12-15, rank 0's.
# After a 5-token prompt, 10 tokens on 2 ranks: rank 0's chunks (0-2, 9) predict no response token
# and slime indexes its empty token rewards (IndexError).
PPO_SCENARIOS = "---\n".join([
    ppo_scenario("advantages-ppo-cp2-last-chunk-one-token", 12, 2),
    ppo_scenario("advantages-ppo-cp4-last-chunk-empty", 12, 4),
    ppo_scenario("advantages-ppo-cp2-last-chunk-rank0", 15, 2),
    ppo_scenario("advantages-ppo-cp2-prompt5-rank0-no-token", 5, 2, prompt=5),
])
LOSS = Path("slime") / "backends" / "megatron_utils" / "loss.py"
PPO_REWARD = """        for reward, per_token_kl in zip(old_rewards, kl, strict=False):
            token_level_rewards = per_token_kl * kl_coef
            if cp_rank == 0:
"""
# a correct layout: the reward goes to the rank whose token range ends the sequence (its last local
# token is then the last response token), whichever of its two chunks that is
PPO_REWARD_FIXED = """        for reward, per_token_kl, total, n in zip(old_rewards, kl, total_lengths, response_lengths, strict=False):
            token_level_rewards = per_token_kl * kl_coef
            if cp_rank == 0 if mpu.get_context_parallel_world_size() == 1 else total in [
                end for _, end in get_logits_and_tokens_offset_with_cp(total, n)[3]]:
"""
WHITEN = Path("slime") / "utils" / "distributed_utils.py"
REDUCE = "dist.all_reduce(stats_tensor, group=process_group)"


def _run(repo: Path | str, cwd: Path, commit: str | None = None, text: str = SCENARIOS) -> dict[str, str]:
    scenarios = cwd / "parallel.yaml"
    scenarios.write_text(text)
    cmd = [sys.executable, "-m", "sentinel.cli", "run", str(scenarios), "--target", "slime", "--repo", str(repo),
           "-o", "-", "--json", *(["--commit", commit] if commit else [])]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)
    assert p.stdout, p.stderr[-4000:]
    return {r["id"]: r["verdict"] for r in json.loads(p.stdout)["results"]}


def _clone(tmp_path: Path) -> Path:
    clone = tmp_path / "slime"
    subprocess.run(["git", "clone", "-q", "--shared", SLIME, str(clone)], check=True, timeout=300)
    return clone


@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")
def test_whitening_on_ranks_holds_at_the_checkout_and_fails_without_its_all_reduce(tmp_path):
    clone = _clone(tmp_path)
    source = (clone / WHITEN).read_text()
    if source.count(REDUCE) != 1:
        pytest.skip(f"{WHITEN} at this commit has no single `{REDUCE}` to plant the bug in")
    assert set(_run(SLIME, tmp_path).values()) == {"holds"}
    (clone / WHITEN).write_text(source.replace(REDUCE, "pass  # planted: no all-reduce"))
    planted = _run(clone, tmp_path)
    # on 4 CP ranks a rank that holds no valid token divides by its own zero count: slime raises (an error)
    assert planted["advantages-whiten-cp2"] == planted["advantages-whiten-dp2"] == "violated", planted
    assert planted["advantages-whiten-cp4-dp2"] in ("violated", "error"), planted


@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")
def test_whitening_without_the_cp_ranks_is_found_at_c1dd9ab_and_fixed_at_dd7f037(tmp_path):
    clone = _clone(tmp_path)
    if subprocess.run(["git", "-C", str(clone), "cat-file", "-e", "dd7f037^{commit}"]).returncode:
        pytest.skip("this slime checkout does not hold dd7f037")
    parent = _run(clone, tmp_path, "dd7f037^")
    fixed = _run(clone, tmp_path, "dd7f037")
    assert parent == {"advantages-whiten-cp2": "violated", "advantages-whiten-cp4-dp2": "violated",
                      "advantages-whiten-dp2": "holds"}  # DP alone: the DP group is every rank
    assert set(fixed.values()) == {"holds"}


@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")
def test_ppo_reward_under_cp_is_on_rank_0s_last_token_even_when_another_rank_holds_the_last(tmp_path):
    """A slime bug at 624b824a8 (compute_advantages_and_returns, estimator ppo): under CP the reward is
    added to cp_rank 0's last local token, which is the last response token only when the last of
    the 2 * cp chunks holds at least two real tokens (a sequence of at most 4 * cp**2 tokens may not:
    get_log_probs_and_entropy then gives rank 0 no token of that chunk; after a long prompt rank 0
    may hold no response token at all, and indexing its empty rewards raises). Violated at the checkout
    where it bites, holds where rank 0 holds the last token and everywhere with the reward placed
    by the owner of the sequence's end."""
    clone = _clone(tmp_path)
    source = (clone / LOSS).read_text()
    if source.count(PPO_REWARD) != 1:
        pytest.skip(f"{LOSS} at this commit does not add the PPO reward on cp_rank 0 as 624b824a8 does")
    assert _run(SLIME, tmp_path, text=PPO_SCENARIOS) == {"advantages-ppo-cp2-last-chunk-one-token": "violated",
                                                         "advantages-ppo-cp4-last-chunk-empty": "violated",
                                                         "advantages-ppo-cp2-last-chunk-rank0": "holds",
                                                         "advantages-ppo-cp2-prompt5-rank0-no-token": "error"}
    (clone / LOSS).write_text(source.replace(PPO_REWARD, PPO_REWARD_FIXED))
    assert set(_run(clone, tmp_path, text=PPO_SCENARIOS).values()) == {"holds"}


@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")
def test_the_cp_reward_finding_in_the_catalog_reproduces_and_holds_once_fixed(tmp_path):
    """scenarios/findings/slime-ppo-reward-cp-rank0.yaml, the catalog's record of the bug above, as a
    user runs it: violated at the checkout, held by the clone that credits the reward on the rank
    holding the sequence's end."""
    finding = (Path(__file__).resolve().parents[1] / "scenarios" / "findings" / "slime-ppo-reward-cp-rank0.yaml").read_text()
    clone = _clone(tmp_path)
    source = (clone / LOSS).read_text()
    if source.count(PPO_REWARD) != 1:
        pytest.skip(f"{LOSS} at this commit does not add the PPO reward on cp_rank 0 as 624b824a8 does")
    assert _run(SLIME, tmp_path, text=finding) == {"slime-ppo-reward-cp-rank0": "violated"}
    (clone / LOSS).write_text(source.replace(PPO_REWARD, PPO_REWARD_FIXED))
    assert _run(clone, tmp_path, text=finding) == {"slime-ppo-reward-cp-rank0": "holds"}
