"""slime's per-sample response lists (adapters/slime/responses.py) and the drawn
``trainer:masked_tail``: a row's masked tail is masked response tokens (the whole row, every
response_lengths = T) or padding after the last valid token (ragged response_lengths).

Every response had the row's length, so code that reads response_lengths could not be told from
code that ignores them: get_advantages_and_returns_batch's `max(response_lengths)` -> `min` and a
deleted `L = response_lengths[i]` survived every hunt (results section 43). With the tail drawn
as padding both are killed; at main 1689290 (no such option) both survived the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sentinel.adapters.layout import rows, unrows, valid_ends

SLIME = os.environ.get("SENTINEL_SLIME_REPO")
needs_slime = pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")
GAE = Path(__file__).resolve().parent.parent / "scenarios" / "advantages" / "gae.yaml"
BATCH = "slime.utils.ppo_utils:get_advantages_and_returns_batch"


def test_rows_cut_at_the_last_valid_position_and_come_back_whole():
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0]])
    assert valid_ends(mask) == [2, 4, 4]  # an interior hole stays; a row with no valid token stays whole
    x = torch.arange(12.0).reshape(3, 4).requires_grad_()
    parts = rows(x, valid_ends(mask))
    assert [p.numel() for p in parts] == [2, 4, 4]
    back = unrows([p * 2 for p in parts], mask, ends=valid_ends(mask))
    assert back.tolist() == [[0.0, 2.0, 0.0, 0.0], [8.0, 10.0, 12.0, 14.0], [16.0, 18.0, 20.0, 22.0]]
    back.sum().backward()  # autograd reaches the input; the cut tail takes no gradient
    assert x.grad.tolist()[0] == [2.0, 2.0, 0.0, 0.0]
    # what the target never saw comes back as the input held it (in-place changes show elsewhere)
    kept = unrows([p.detach() + 100 for p in parts], mask, fill=x, ends=valid_ends(mask))
    assert kept[0].tolist() == [100.0, 101.0, 2.0, 3.0]
    # a target that hands back fewer values than the response it got is not padded over
    with pytest.raises(ValueError, match="sequence 1: 3 values back for a response of 4"):
        unrows([parts[0], parts[1][:3], parts[2]], mask, ends=valid_ends(mask))
    with pytest.raises(RuntimeError):  # without ends every part must have the row's length
        unrows([p * 2 for p in parts], mask)
    assert rows(x)[0].numel() == 4  # no ends: the whole row, as before


def _gae_scenario(tmp_path: Path, tail: str | None) -> Path:
    text = GAE.read_text().split("\n---\n")[0]
    if tail:
        text = text.replace("config: {gamma: 1.0, lam: 0.95}",
                            f'config: {{gamma: 1.0, lam: 0.95, "trainer:masked_tail": {tail}}}')
    path = tmp_path / f"gae-{tail or 'default'}.yaml"
    path.write_text(text)
    return path


def _invariants(path: Path, cwd: Path) -> dict[str, str]:
    cmd = [sys.executable, "-m", "sentinel.cli", "run", str(path), "--target", "slime", "--repo", str(SLIME),
           "-o", "-", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)
    assert p.stdout, p.stderr[-4000:]
    (result,) = json.loads(p.stdout)["results"]
    return {i["family"]: i["verdict"] for i in result["invariants"]}


@needs_slime
def test_a_masked_tail_is_response_by_default_and_padding_when_drawn(tmp_path):
    """gae-masked-tokens' rows end in masked positions. As masked response tokens (the default)
    slime's GAE runs through them (padding two more columns lengthens every response); as
    padding, slime gets responses of 3 and 2 tokens and every invariant holds."""
    default = _invariants(_gae_scenario(tmp_path, None), tmp_path)
    assert default["padding_invariant"] == "violated" and default["masked_invariance"] == "violated", default
    padded = _invariants(_gae_scenario(tmp_path, "padding"), tmp_path)
    assert set(padded.values()) == {"held"}, padded


SPY_BODY = """
from sentinel.adapters.spying import spy
inputs = {"token_rewards": T([[0.0, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 0.0]]),
          "values": T([[0.5, 0.4, 0.3, 9.0], [0.2, 0.1, 9.0, 9.0]]), "loss_mask": T([[1, 1, 1, 0], [1, 1, 0, 0]])}
seen = []
with spy(adapter.mods["slime.utils.ppo_utils"], "get_advantages_and_returns_batch",
         before=lambda a: seen.append(list(a["response_lengths"]))):
    out["whole"] = call("gae", inputs, {"gamma": 1.0, "lam": 0.95})
    out["cut"] = call("gae", inputs, {"gamma": 1.0, "lam": 0.95, "trainer:masked_tail": "padding"})
out["seen"] = seen
adv = {"rewards": T([1.0, 0.0]), "log_probs": T([[-0.5, -1.0, -0.2, -0.3], [-0.1, -0.2, -0.3, -0.4]]),
       "ref_log_probs": T([[-0.6, -0.8, -0.4, -0.2], [-0.2, -0.2, -0.1, -0.4]]), "values": inputs["values"],
       "loss_mask": inputs["loss_mask"]}
res = call("advantages", adv, {"estimator": "gae", "kl_coef": 0.1, "kl_type": "k1", "gamma": 1.0, "lam": 1.0,
                              "normalize_advantages": False, "trainer:masked_tail": "padding"})["res"]
out["extras"] = {k: list(v.shape) for k, v in res.extras.items() if k.startswith("returned:rollout_data.")}
"""


@needs_slime
def test_slime_gets_ragged_response_lengths_under_padding():
    from test_adapter_slime import run_slime

    out = run_slime(SLIME, SPY_BODY)
    assert out["seen"] == [[4, 4], [3, 2]]
    cut, whole = out["cut"]["outputs"]["advantages"], out["whole"]["outputs"]["advantages"]
    assert torch.allclose(torch.tensor(cut), torch.tensor([[0.43675, 0.565, 0.7, 0.0], [0.28, 0.4, 0.0, 0.0]]))
    assert not torch.allclose(torch.tensor(whole[0][:3]), torch.tensor(cut[0][:3]))  # the 9.0 tail value reaches it
    # what compute_advantages_and_returns leaves in rollout_data comes back [B, T] (compared at valid
    # positions, as outputs are), not as one flat run of the ragged lists
    extras = out["extras"]
    assert extras["returned:rollout_data.advantages"] == extras["returned:rollout_data.loss_masks"] == [2, 4], extras


@pytest.mark.slow  # one slime prepare, two mutants, hunts bounded by examples
@needs_slime
def test_ragged_responses_kill_the_response_length_mutants(tmp_path, monkeypatch):
    from sentinel.catalog import catalog_path
    from sentinel.mutate.driver import Options, mutate
    from sentinel.spec import load_paths

    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    only = [f"{BATCH}#min-max@7f4338896d", f"{BATCH}#delete@d49e459c0b"]  # max -> min; `L = response_lengths[i]` deleted
    rep = mutate(load_paths([catalog_path()]), Options("slime", repo=SLIME, boundaries=["gae"], only=only, budget=300,
                                                        hunt_examples=300, cache=None))
    assert {m.id: m.verdict for m in rep.mutate.mutants} == {i: "killed" for i in only}
