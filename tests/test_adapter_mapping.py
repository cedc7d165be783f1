"""The declared boundary mapping: `@implements(boundary, calls=...)` on an adapter method, the
adapter's `declines`, and what `Adapter.mapping()`, `supported()` and `call()` read from them.
No trainer is imported: the mapping is class-level data."""

from __future__ import annotations

import pytest
import torch

from sentinel.boundaries import BOUNDARIES
from sentinel_adapters.reference import ops as R
from sentinel_adapters.areal import ArealAdapter
from sentinel.adapters.contract import Adapter, BoundaryResult, implements
from sentinel.errors import Unsupported
from sentinel_adapters.reference.adapter import ReferenceAdapter
from sentinel_adapters.slime import SlimeAdapter
from sentinel.adapters.binding import resolve
from sentinel_adapters.verl import VerlAdapter

SHIPPED = (ReferenceAdapter, SlimeAdapter, ArealAdapter, VerlAdapter)


@pytest.mark.parametrize("cls", SHIPPED, ids=lambda c: c.name)
def test_mapping_covers_every_boundary_without_loading(cls):
    mapping = cls.mapping()
    assert list(mapping) == list(BOUNDARIES)
    for boundary, row in mapping.items():
        if row["declined"] is None:
            assert row["calls"], f"{cls.name}.{boundary} declares no trainer function"
            assert all(c.count(":") == 1 and all(c.split(":")) for c in row["calls"])
        else:
            assert row["calls"] == [] and row["method"] is None
    assert sorted(b for b, row in mapping.items() if row["declined"] is None) == sorted(cls._implemented)


def test_verl_declines_with_its_reason_and_never_runs_the_boundary():
    mapping = VerlAdapter.mapping()
    assert mapping["kl"] == {"calls": ["verl.trainer.ppo.core_algos:kl_penalty"], "declined": None, "method": "b_kl",
                              "steps": {}}
    assert mapping["gspo_kl"]["declined"].startswith("verl computes the GSPO sequence log-ratio")
    assert mapping["opsm_mask"]["declined"].startswith("verl has no off-policy sequence masking")
    adapter = VerlAdapter(None, torch.device("cpu"))  # not loaded: a declined boundary needs no verl
    assert "gspo_kl" not in adapter.supported() and "opsm_mask" not in adapter.supported()
    with pytest.raises(Unsupported, match="^verl computes the GSPO sequence log-ratio"):
        adapter.call("gspo_kl", {}, {})


def test_a_boundary_neither_implemented_nor_declined_says_so():
    assert ArealAdapter.mapping()["loss_agg"]["declined"] == "target 'areal' has no 'loss_agg' boundary"
    with pytest.raises(Unsupported, match="^target 'areal' has no 'opsm_mask' boundary$"):
        ArealAdapter(None, torch.device("cpu")).call("opsm_mask", {}, {})


def test_reference_maps_each_boundary_to_its_own_functions():
    assert ReferenceAdapter().supported() == sorted(BOUNDARIES)
    for boundary, row in ReferenceAdapter.mapping().items():
        for call in row["calls"]:
            module, qualname = call.split(":")
            assert module == R.__name__ and resolve(call) is R.REFERENCE_OPS[qualname], (boundary, call)


# --- the contract, on adapters made here ----------------------------------------------------

def _token_mean(values, loss_mask):
    m = loss_mask.bool()
    return torch.where(m, values, torch.zeros_like(values)).sum() / m.sum().clamp_min(1)


class _Toy(Adapter):
    name = "toy"
    declines = {"kl": "toy has no reference policy"}
    seen: list = []

    @implements("loss_agg", calls=(_token_mean, "toy.trainer:Trainer.reduce"))
    def reduce(self, inputs, config):
        _Toy.seen.append(config)
        return BoundaryResult({"loss": _token_mean(inputs["values"], inputs["loss_mask"])})

    def b_gae(self, inputs, config):  # unmarked: still the gae boundary, with nothing declared
        _Toy.seen.append(config)
        return BoundaryResult({})


def test_decorated_and_unmarked_methods_and_declines():
    mapping = _Toy.mapping()
    assert mapping["loss_agg"] == {"calls": [f"{__name__}:_token_mean", "toy.trainer:Trainer.reduce"],
                                   "declined": None, "method": "reduce", "steps": {}}
    assert mapping["gae"] == {"calls": [], "declined": None, "method": "b_gae", "steps": {}}
    assert mapping["kl"]["declined"] == "toy has no reference policy"
    toy = _Toy(None, torch.device("cpu"))
    assert toy.supported() == ["gae", "loss_agg"]
    with pytest.raises(Unsupported, match="^toy has no reference policy$"):
        toy.call("kl", {}, {})


def test_call_hands_the_method_a_normalised_config():
    toy = _Toy(None, torch.device("cpu"))
    _Toy.seen.clear()
    res = toy.call("loss_agg", {"values": torch.tensor([[1.0, 3.0]]), "loss_mask": torch.tensor([[1, 1]])}, {})
    assert float(res.outputs["loss"]) == 2.0
    toy.call("gae", {}, {"gamma": 0.9})
    assert _Toy.seen == [{"mode": "token-mean"}, {"gamma": 0.9, "lam": 1.0}]


def test_bad_declarations_fail_when_the_class_is_made():
    with pytest.raises(TypeError, match="both implements and declines kl"):
        class _Both(Adapter):
            declines = {"kl": "no"}

            @implements("kl")
            def b_kl(self, inputs, config): ...
    with pytest.raises(KeyError, match="unknown boundary 'kll'"):
        class _Typo(Adapter):
            @implements("kll")
            def kl(self, inputs, config): ...
    with pytest.raises(TypeError, match="implemented twice"):
        class _Twice(Adapter):
            @implements("kl")
            def one(self, inputs, config): ...

            @implements("kl")
            def two(self, inputs, config): ...
    with pytest.raises(ValueError, match="module:qualname"):
        implements("kl", calls=("kl_penalty",))
