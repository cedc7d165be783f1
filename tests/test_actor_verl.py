"""verl's actor method (`DataParallelPPOActor._forward_micro_batch`) at the `actor_logprobs` boundary,
from the checkout SENTINEL_VERL_REPO names: the packed catalog scenario holds (the micro-batched
ones are refused, with the reason), the method really packs the rows into one sequence for the
stand-in model, a pad step one token off inside verl's own path is seen, and a short seeded hunt
finds nothing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

import untimed
from sentinel import hunt as H
from sentinel.adapters import standin
from sentinel.catalog import catalog_path
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths
from sentinel_adapters.reference.adapter import ReferenceAdapter

REPO = os.environ.get("SENTINEL_VERL_REPO")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not REPO, reason="set SENTINEL_VERL_REPO to a verl checkout (the actor method's code)")]

BATCH = {"logits": torch.tensor([
    [[0.5, -1.0, 0.25], [1.0, 0.0, -0.5], [2.0, -2.0, 0.0], [0.0, 0.75, 1.5], [9.0, 9.0, 9.0]],
    [[1.0, 1.0, 0.0], [0.25, 0.5, -1.0], [-1.0, 2.0, 0.5], [1.5, 0.0, 0.0], [0.0, -0.25, 3.0]],
    [[7.0, 7.0, 7.0], [0.0, 1.0, -1.0], [3.0, 0.5, 0.5], [0.0, 0.0, 2.0], [7.0, 7.0, 7.0]]]),
    "tokens": torch.tensor([[1, 0, 2, 1, 0], [2, 1, 0, 2, 2], [0, 1, 0, 2, 0]]),
    "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.float32),
    "loss_mask": torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 0, 1], [0, 0, 1, 1, 1]], dtype=torch.float32)}
M = BATCH["loss_mask"].bool()


@pytest.fixture(scope="module")
def verl():
    from sentinel_adapters.verl import VerlAdapter

    adapter = VerlAdapter(Path(REPO), torch.device("cpu"))
    adapter.facts = adapter.load()
    return adapter


def _reference(config):
    return ReferenceAdapter().call("actor_logprobs", dict(BATCH), config).outputs


def test_the_packed_scenario_holds_on_verl_and_micro_batching_is_refused():
    rep = run(load_paths([catalog_path() / "actor_logprobs"]), [TargetSpec("verl", REPO)])
    verdicts = {r.id: r.verdict for r in rep.results}
    assert verdicts == {"actor-logprobs-micro-batched": "unsupported", "actor-logprobs-dynamic-packed": "unsupported",
                        "actor-logprobs-packed": "holds"}, verdicts


@pytest.mark.parametrize("packed", [False, True])
def test_verl_packs_the_rows_for_the_stand_in_when_asked(verl, monkeypatch, packed):
    shapes = []
    forward = standin.StandInLM.forward
    monkeypatch.setattr(standin.StandInLM, "forward", lambda self, input_ids=None, attention_mask=None, **k: (
        shapes.append((tuple(input_ids.shape), attention_mask is None)) or
        forward(self, input_ids=input_ids, attention_mask=attention_mask, **k)))
    config = {"temperature": 0.5, "use_remove_padding": packed}
    out = verl.call("actor_logprobs", dict(BATCH), config).outputs
    real = int(BATCH["attention_mask"].sum())
    assert shapes == ([((1, real), True)] if packed else [((3, shapes[0][0][1]), False)])
    want = _reference(config)
    for name in ("log_probs", "entropy"):
        assert torch.allclose(out[name][M], want[name][M], atol=1e-5), name


def test_a_pad_step_one_token_off_in_verls_path_is_seen(verl, monkeypatch):
    """Rolling the packed results by one before verl's pad_input puts them back is the plant
    `actor-unpad-offset` on the real code path: the result leaves the reference gather."""
    actor = sys.modules["verl.workers.actor.dp_actor"]
    pad = actor.pad_input
    monkeypatch.setattr(actor, "pad_input", lambda hidden_states, indices, batch, seqlen: pad(
        torch.roll(hidden_states, 1, 0), indices, batch, seqlen))
    config = {"temperature": 0.5, "use_remove_padding": True}
    out = verl.call("actor_logprobs", dict(BATCH), config).outputs
    assert not torch.allclose(out["log_probs"][M], _reference(config)["log_probs"][M], atol=1e-3)


def test_a_short_seeded_hunt_on_verl_finds_nothing(tmp_path):
    rep = H.hunt(TargetSpec("verl", REPO), boundaries=["actor_logprobs"], seed=0, db=None, out_dir=tmp_path,
                 names=["actor_logprobs.batching_invariant", "actor_logprobs.log_probs"],
                 max_examples=8, min_examples=8, **untimed.HUNT)
    assert not rep.hunt.findings, [(f.property, f.message) for f in rep.hunt.findings]
    ran = {p.property: p.examples for p in rep.hunt.properties}
    assert ran["actor_logprobs.batching_invariant"] >= 8 and ran["actor_logprobs.log_probs"] >= 8, ran
