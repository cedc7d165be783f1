"""The `actor_logprobs` boundary: the reference's actor (micro-batches, a token budget, packing)
holds its families, each actor plant is caught in the catalog and by a hunt, and the stand-in
model (sentinel/adapters/standin.py) answers a trainer's calls by the ids it reads. The real
targets' actor method (TRL) runs in tests/test_actor_trl.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import untimed
from sentinel import hunt as H
from sentinel.adapters.standin import LogitsTable, StandInLM, one_span_after_a_token, same_ids_same_logits
from sentinel.catalog import catalog_path
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths, load_text
from sentinel_adapters.reference import ops as R
from sentinel_adapters.reference.plants import PLANTS

ACTOR_PLANTS = sorted(n for n, p in PLANTS.items() if p.hunt == "actor_logprobs")


@pytest.fixture(scope="module")
def scenarios():  # the generic ones (a target's own, such as verl-vlm-empty-micro-batch, run on it alone)
    return [s for s in load_paths([catalog_path() / "actor_logprobs"]) if {"*", "reference"} & set(s.targets)]


@pytest.fixture(scope="module")
def catalog_runs(scenarios):
    report = run(scenarios, [TargetSpec("reference")] + [TargetSpec("reference", plant=p) for p in ACTOR_PLANTS])
    return {(r.target, r.id): r for r in report.results}


def test_there_are_actor_plants_for_each_new_rule():
    assert len(ACTOR_PLANTS) == 3
    tripped = {f for p in ACTOR_PLANTS for f in PLANTS[p].trips}
    assert {"batching_invariant", "permutation_equivariant", "close"} <= tripped


def test_the_reference_actor_holds_the_catalog(scenarios, catalog_runs):
    for sc in scenarios:
        r = catalog_runs[("reference", sc.id)]
        assert r.verdict == "holds", (sc.id, [(i.family, i.verdict, i.message) for i in r.invariants])


@pytest.mark.parametrize("plant", ACTOR_PLANTS)
def test_each_actor_plant_is_caught_in_the_catalog(scenarios, catalog_runs, plant):
    key = TargetSpec("reference", plant=plant).key
    caught = {i.family for sc in scenarios for i in catalog_runs[(key, sc.id)].invariants if i.verdict == "violated"}
    assert caught & set(PLANTS[plant].trips), (plant, caught)


def test_each_family_is_violated_by_an_actor_plant(scenarios, catalog_runs):
    """batching_invariant, permutation_equivariant and close each fail on some actor plant here."""
    caught = {i.family for p in ACTOR_PLANTS for sc in scenarios
              for i in catalog_runs[(TargetSpec("reference", plant=p).key, sc.id)].invariants if i.verdict == "violated"}
    assert {"batching_invariant", "permutation_equivariant", "close"} <= caught


@pytest.mark.parametrize("plant", ACTOR_PLANTS)
def test_a_hunt_finds_each_actor_plant(tmp_path, plant):
    rep = H.hunt(TargetSpec("reference", plant=plant), boundaries=["actor_logprobs"], first=True, seed=0, db=None,
                 out_dir=tmp_path, max_examples=60, **untimed.HUNT)
    found = rep.hunt.findings
    assert found, f"{plant}: nothing found: {[(p.property, p.status, p.examples) for p in rep.hunt.properties]}"
    f, = found  # first=True: the hunt stops at its first finding
    assert f.family in PLANTS[plant].trips, (plant, f.family)
    assert f.reproduced is True  # its YAML, run as `sentinel run` runs it, is violated on the plant


def test_a_hunt_on_the_reference_actor_finds_nothing(tmp_path):
    rep = H.hunt(TargetSpec("reference"), boundaries=["actor_logprobs"], seed=0, db=None, out_dir=tmp_path,
                 max_examples=15, min_examples=15, **untimed.HUNT)
    assert not rep.hunt.findings
    ran = {p.property: p.examples for p in rep.hunt.properties}
    assert "actor_logprobs.batching_invariant" in ran and all(n >= 15 for n in ran.values()), ran


# --- the family's own checks ------------------------------------------------------------------

SCENARIO = """
id: t
title: t
boundary: actor_logprobs
inputs:
  logits: [[[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]]
  tokens: [[0, 1, 0]]
  attention_mask: [[1, 1, 1]]
  loss_mask: [[0, 1, 1]]
invariants:
  - batching_invariant: {against: AGAINST}
"""


@pytest.mark.parametrize("against, message", [("[]", "at least one"), ("[{}]", "overrides nothing"),
                                              ("[{micro_batch: 2}]", "unknown config key"),
                                              ("[{use_dynamic_bsz: 3}]", "not allowed")])
def test_batching_invariant_refuses_a_bad_against(against, message):
    with pytest.raises(Exception) as e:
        load_text(SCENARIO.replace("AGAINST", against), "t.yaml")
    assert message in str(e.value)


# --- the reference's scheduling --------------------------------------------------------------

def test_dynamic_micro_batches_take_the_longest_row_first_within_the_budget():
    attn = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    assert R.micro_batches(attn, use_dynamic_bsz=True) == [[1], [2], [0]]
    assert R.micro_batches(attn, use_dynamic_bsz=True, max_token_len=6) == [[1, 0], [2]]
    assert R.micro_batches(attn, micro_batch_size=2) == [[0, 1], [2]]


# --- the stand-in model ------------------------------------------------------------------------

def _table():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 4, generator=g)
    tokens = torch.tensor([[1, 2, 3, 0, 0], [3, 3, 1, 2, 0], [0, 2, 1, 1, 3]])
    attn = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 1, 1, 1, 1]])
    return logits, tokens, attn


def test_the_stand_in_returns_each_rows_next_token_logits_by_its_ids():
    logits, tokens, attn = _table()
    model = StandInLM(LogitsTable(logits, tokens, attn))
    out = model(input_ids=tokens, attention_mask=attn).logits
    # the output at a real token predicts the next one (row 2 is left-padded: position 1's output
    # predicts position 2); the last real token's predicts past the end: 0
    assert torch.equal(out[2, 1], logits[2, 2]) and torch.equal(out[2, 3], logits[2, 4])
    assert torch.equal(out[0, 0], logits[0, 1]) and torch.equal(out[0, 2], torch.zeros(4))
    # rows in another order get their own logits (the trainer's order does not matter)
    flipped = model(input_ids=tokens.flip(0), attention_mask=attn.flip(0)).logits
    assert torch.equal(flipped, out.flip(0))
    # a row shifted by one token is another sequence of ids: NaN, never another row's values
    shifted = model(input_ids=tokens[:1].roll(1, 1), attention_mask=attn[:1]).logits
    assert bool(shifted[0, :3].isnan().all())
    assert model.calls == [(3, 11), (3, 11), (1, 3)]  # (rows, real tokens) of each forward


def test_the_stand_in_reads_packed_rows_by_their_position_ids():
    logits, tokens, attn = _table()
    model = StandInLM(LogitsTable(logits, tokens, attn))
    real = attn.bool()
    ids = tokens[real][None]
    pos = (attn.cumsum(-1) - 1)[real][None]
    packed = model(input_ids=ids, position_ids=pos).logits[0]
    padded = model(input_ids=tokens, attention_mask=attn).logits[real]
    assert torch.equal(packed, padded)


def test_gradients_reach_the_drawn_logits_and_each_call_is_a_new_tensor():
    logits, tokens, attn = _table()
    logits.requires_grad_(True)
    model = StandInLM(LogitsTable(logits, tokens, attn))
    a = model(input_ids=tokens, attention_mask=attn).logits
    a.div_(2.0)  # what TRL does to the model's output
    b = model(input_ids=tokens, attention_mask=attn).logits
    assert not torch.equal(a, b)
    b[0, 0, 1].backward()
    assert logits.grad[0, 1, 1] == 1 and logits.grad.abs().sum() == 1


def test_rows_with_the_same_ids_each_get_their_own_gradient():
    """Two rows with the same ids (and so the same logits) were both served the first one's
    canonical logits: its gradient was their sum and the other's 0, a `grad:log_probs/logits`
    difference against the reference that a differential hunt on verl reported (reference
    [-0.2, ..., 0.8] vs verl [-0.4, ..., 1.6] at row 0, 0 at row 1) and no trainer code had."""
    tokens = torch.tensor([[0, 3, 0], [0, 3, 0]])
    attn = torch.ones(2, 3)
    logits = torch.zeros(2, 3, 5, requires_grad=True)
    model = StandInLM(LogitsTable(logits, tokens, attn))
    out = model(input_ids=tokens, attention_mask=attn).logits
    out[1].sum().backward()  # row 1's output only
    assert logits.grad[0].abs().sum() == 0 and logits.grad[1, 1:].abs().sum() > 0
    packed = model(input_ids=tokens.reshape(1, -1), position_ids=torch.tensor([[0, 1, 2, 0, 1, 2]])).logits[0]
    (g,) = torch.autograd.grad(packed[:3].sum(), logits)  # the first packed sequence: row 0's
    assert g[1].abs().sum() == 0 and g[0, 1:].abs().sum() > 0


def test_the_preconditions_say_which_layouts_no_model_produces():
    logits, tokens, attn = _table()
    loss = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])
    ok = {"logits": logits, "tokens": tokens, "attention_mask": attn, "loss_mask": loss}
    assert one_span_after_a_token(ok, {}) and same_ids_same_logits(ok, {})
    first = {**ok, "loss_mask": torch.tensor([[1, 0, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])}
    assert not one_span_after_a_token(first, {})  # a trained first token: nothing predicts it
    holed = {**ok, "attention_mask": torch.tensor([[1, 0, 1, 0, 0], [1, 1, 1, 1, 0], [0, 1, 1, 1, 1]])}
    assert not one_span_after_a_token(holed, {})
    twins = {**ok, "tokens": torch.cat([tokens[:2], tokens[1:2]]), "attention_mask": torch.cat([attn[:2], attn[1:2]]),
             "loss_mask": torch.cat([loss[:2], loss[1:2]])}
    assert not same_ids_same_logits(twins, {})  # row 2 = row 1's ids with other logits
    assert same_ids_same_logits({**twins, "logits": torch.cat([logits[:2], logits[1:2]])}, {})
    assert np.isfinite(logits.numpy()).all()
