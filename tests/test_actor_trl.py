"""TRL's actor method (`GRPOTrainer._get_per_token_logps_and_entropies`) at the `actor_logprobs`
boundary, from the checkout SENTINEL_TRL_REPO names: the catalog holds where TRL has the
options, the method really micro-batches through the stand-in model, a temperature applied
twice inside TRL's own code path is seen, and a short seeded hunt finds nothing."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

import untimed
from inprocess import restored_imports
from sentinel import hunt as H
from sentinel.adapters import standin
from sentinel.catalog import catalog_path
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths
from sentinel_adapters.reference.adapter import ReferenceAdapter

REPO = os.environ.get("SENTINEL_TRL_REPO")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not REPO, reason="set SENTINEL_TRL_REPO to a TRL checkout (the actor method's code)"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers not installed (pip install 'rl-sentinel[trl]')")]

LOGITS = torch.tensor([
    [[0.5, -1.0, 0.25], [1.0, 0.0, -0.5], [2.0, -2.0, 0.0], [0.0, 0.75, 1.5], [9.0, 9.0, 9.0]],
    [[1.0, 1.0, 0.0], [0.25, 0.5, -1.0], [-1.0, 2.0, 0.5], [1.5, 0.0, 0.0], [0.0, -0.25, 3.0]],
    [[7.0, 7.0, 7.0], [0.0, 1.0, -1.0], [3.0, 0.5, 0.5], [0.0, 0.0, 2.0], [7.0, 7.0, 7.0]]])
BATCH = {"logits": LOGITS, "tokens": torch.tensor([[1, 0, 2, 1, 0], [2, 1, 0, 2, 2], [0, 1, 0, 2, 0]]),
         "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.float32),
         "loss_mask": torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 0, 1], [0, 0, 1, 1, 1]], dtype=torch.float32)}


@pytest.fixture(scope="module")
def trl():
    """The checkout's TRL loaded in this process, for this module only: its modules and path
    entries are taken out again afterwards, so later tests import the installed TRL as before."""
    from sentinel_adapters.trl import TRLAdapter

    with restored_imports("trl"):
        adapter = TRLAdapter(Path(REPO), torch.device("cpu"))
        adapter.facts = adapter.load()
        yield adapter


def _reference(config):
    ref = ReferenceAdapter()
    return ref.call("actor_logprobs", dict(BATCH), config).outputs


def test_the_catalog_holds_on_trl_where_it_has_the_options():
    rep = run(load_paths([catalog_path() / "actor_logprobs"]), [TargetSpec("trl", REPO)])
    verdicts = {r.id: r.verdict for r in rep.results}
    assert verdicts == {"actor-logprobs-micro-batched": "holds", "actor-logprobs-dynamic-packed": "unsupported",
                        "actor-logprobs-packed": "unsupported", "actor-logprobs-empty-micro-batch": "unsupported"}, \
        [(r.id, r.verdict, r.reason if hasattr(r, "reason") else "") for r in rep.results]


@pytest.mark.parametrize("size, forwards", [(None, 1), (1, 3), (2, 2)])
def test_trl_micro_batches_through_the_stand_in(trl, monkeypatch, size, forwards):
    calls = []
    forward = standin.StandInLM.forward
    monkeypatch.setattr(standin.StandInLM, "forward", lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))
    config = {"temperature": 0.5, "micro_batch_size": size}
    out = trl.call("actor_logprobs", dict(BATCH), config).outputs
    assert len(calls) == forwards  # TRL's own loop over batch_size ran
    want = _reference(config)
    m = BATCH["loss_mask"].bool()
    for name in ("log_probs", "entropy"):
        assert torch.allclose(out[name][m], want[name][m], atol=1e-5), name


LAYOUTS = ("pixel_values", "image_grid_thw", "image_position_ids", "spatial_shapes", "pixel_attention_mask",
           "image_sizes", "token_type_ids", "mm_token_type_ids")


@pytest.mark.parametrize("layout", (None, *LAYOUTS))
@pytest.mark.parametrize("keys", ["signature", "no_logits_to_keep"])
def test_trl_slices_image_inputs_per_micro_batch(trl, layout, keys):
    """trainer:vision_inputs and trainer:model_kwarg_keys: TRL's method slices each image input
    per micro-batch and, for a forward without logits_to_keep, cuts the full logits itself: the
    stand-in VLM answers every micro-batch (NaN for another row's images) and the result is the
    reference gather."""
    config = {"temperature": 0.5, "micro_batch_size": 1, "trainer:vision_inputs": layout,
              "trainer:model_kwarg_keys": keys}
    out = trl.call("actor_logprobs", dict(BATCH), config).outputs
    want = _reference({"temperature": 0.5, "micro_batch_size": 1})
    m = BATCH["loss_mask"].bool()
    assert torch.allclose(out["log_probs"][m], want["log_probs"][m], atol=1e-5)


@pytest.mark.parametrize("layout", ("image_grid_thw", "image_position_ids", "spatial_shapes"))
def test_a_partial_micro_batch_of_images_sliced_by_count_fails_inside_trl(trl, layout):
    """Three rows in micro-batches of two, what TRL's eval path hands the method for its last,
    partial batch: TRL indexes its cumulative image counts at start + batch_size, past the end. The
    IndexError is TRL's own (raised in grpo_trainer.py), not a refusal of the adapter."""
    config = {"temperature": 0.5, "micro_batch_size": 2, "trainer:vision_inputs": layout}
    with pytest.raises(IndexError) as err:
        trl.call("actor_logprobs", dict(BATCH), config)
    assert err.traceback[-1].path.name == "grpo_trainer.py"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_vlm_stand_in_sees_another_rows_images(layout):
    from sentinel_adapters.trl.actor import StandInVLM, vision_batch

    ids = torch.tensor([[1, 0, 2], [2, 2, 1]])
    model = StandInVLM(standin.LogitsTable(torch.zeros(2, 3, 4), ids, torch.ones(2, 3)), layout)
    images = {k: v for k, v in vision_batch(layout, ids[1:]).items() if not isinstance(v, list)}
    assert not model(input_ids=ids[1:], attention_mask=torch.ones(1, 3), **images).logits.isnan().any()
    assert model(input_ids=ids[:1], attention_mask=torch.ones(1, 3), **images).logits.isnan().all()


def test_an_moe_models_aux_loss_is_the_mean_over_micro_batches(trl):
    """trainer:aux_loss_enabled: the method asks each micro-batch's forward for router logits and
    returns the mean of their aux losses (the stand-in's: mean squared probability)."""
    config = {"temperature": 1.0, "micro_batch_size": 2, "trainer:aux_loss_enabled": True}
    res = trl.call("actor_logprobs", dict(BATCH), config)
    assert res.extras["returned:aux_loss"].item() > 0
    one = trl.call("actor_logprobs", dict(BATCH), {**config, "micro_batch_size": None}).extras["returned:aux_loss"]
    assert res.extras["returned:aux_loss"].item() != pytest.approx(one.item())  # 2 + 1 rows: a mean of two means


def test_a_temperature_applied_twice_in_trls_path_is_seen(trl, monkeypatch):
    """TRL's method divides the model's logits by self.temperature, then calls its module's
    selective_log_softmax: dividing once more there is the plant `actor-temperature-twice` on
    the real code path, and the result leaves the reference log-softmax gather."""
    import trl.trainer.grpo_trainer as G

    gather = G.selective_log_softmax
    monkeypatch.setattr(G, "selective_log_softmax", lambda logits, index: gather(logits / 0.5, index))
    out = trl.call("actor_logprobs", dict(BATCH), {"temperature": 0.5}).outputs
    want = _reference({"temperature": 0.5})
    m = BATCH["loss_mask"].bool()
    assert not torch.allclose(out["log_probs"][m], want["log_probs"][m], atol=1e-3)


def test_a_short_seeded_hunt_on_trl_finds_nothing(tmp_path):
    rep = H.hunt(TargetSpec("trl", REPO), boundaries=["actor_logprobs"], seed=0, db=None, out_dir=tmp_path,
                 max_examples=8, min_examples=8, **untimed.HUNT)
    assert not rep.hunt.findings, [(f.property, f.message) for f in rep.hunt.findings]
    ran = {p.property: p.examples for p in rep.hunt.properties}
    assert ran["actor_logprobs.batching_invariant"] >= 8 and ran["actor_logprobs.log_probs"] >= 8, ran
