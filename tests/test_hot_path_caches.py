"""The hunt's per-example lookups worked out once (boundaries' ports and options by name, the
output contract of a call that kept it) answer as the uncached code did: a remembered answer
never hides a problem."""

from __future__ import annotations

from sentinel import boundaries, contracts


def test_boundary_lookups_are_the_first_of_each_name():
    for b in boundaries.BOUNDARIES.values():
        for p in b.inputs:
            assert b.input(p.name) is next(q for q in b.inputs if q.name == p.name)
        for p in b.outputs:
            assert b.output(p.name) is next(q for q in b.outputs if q.name == p.name)
        for o in b.options:
            assert b.option(o.name) is next(x for x in b.options if x.name == o.name)
        assert b.input("no such input") is None and b.output("no such output") is None
        assert b.option("no such option") is None


def test_boundary_config_is_a_fresh_dict():
    b = boundaries.get("policy_loss")
    cfg = b.config
    cfg["eps_clip"] = "changed"
    assert b.config["eps_clip"] != "changed"
    assert b.normalise({})["eps_clip"] == b.config["eps_clip"]
    assert b.normalise({"eps_clip": 0.3, "eps_clip_high": None})["eps_clip_high"] == 0.3  # derived


def test_contract_kept_once_is_rechecked_under_an_option_that_requires_more():
    """masked_reduce's `result` is required under op mean, dim all; `whitened` under op whiten.
    The call that returned `result` only kept the contract under mean; the same outputs under
    whiten miss `whitened`: remembered by outputs and batch alone, it would pass."""
    spec = boundaries.get("masked_reduce")
    returned = {"result": contracts.Returned("tensor", "f", ())}
    mean = spec.normalise({"op": "mean", "dim": "all"})
    whiten = spec.normalise({"op": "whiten", "dim": "all"})
    assert contracts.problems("masked_reduce", returned, (2, 3), mean) == []
    assert contracts.problems("masked_reduce", returned, (2, 3), mean) == []  # remembered
    missing = contracts.problems("masked_reduce", returned, (2, 3), whiten)
    assert any("'whitened' is missing" in m for m in missing)
    wrong = {"result": contracts.Returned("tensor", "f", (2,))}  # another shape: checked, not remembered
    assert any("has shape [2]" in m for m in contracts.problems("masked_reduce", wrong, (2, 3), mean))
