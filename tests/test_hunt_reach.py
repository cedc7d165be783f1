"""The hunt's reach over inputs (sentinel/relations.py RELATIONS): every tensor drawn on its
own, and, as one strategy among several, the relations trainers' data carries (on-policy,
behaviour == old) and the edges value grids never reach (a ratio exactly at a clip edge, a
log-ratio past a trainer's clamps, a row with no valid token, one log-ratio along a whole row)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from drawn import drawn
from sentinel import hunt as H
from sentinel import strategies as S
from sentinel.runner import TargetSpec
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS

HERE = Path(__file__).parent


def test_relations_reach_clip_edges_far_ratios_equal_log_probs_empty_rows_and_flat_rows():
    exs = drawn("is_correction", config={"eps_clip": [0.2], "eps_clip_high": [0.28], "method": ["off_policy_is"]})
    seen = {"edge": 0, "far": 0, "on_policy": 0, "behaviour_is_old": 0, "empty_row": 0, "independent": 0, "flat": 0}
    for ex in exs:
        lp, old, roll = (ex.inputs[k] for k in ("log_probs", "old_log_probs", "rollout_log_probs"))
        m = ex.inputs["loss_mask"].astype(bool)
        if not m.any():
            continue
        ratio = torch.exp(torch.tensor(lp) - torch.tensor(old)).numpy()[m]  # as a trainer computes it
        seen["edge"] += bool(np.isin(ratio, [np.float32(1.28), np.float32(0.8)]).any())  # never on the grids
        seen["far"] += bool((np.abs(lp - old)[m] >= 12).any() or (np.abs(old - roll)[m] >= 12).any())
        seen["on_policy"] += bool((lp[m] == old[m]).all() and (lp[m] == roll[m]).all())
        seen["behaviour_is_old"] += bool((old[m] == roll[m]).all() and (lp[m] != old[m]).any())
        seen["empty_row"] += bool(m.shape[0] > 1 and (~m.any(axis=1)).any())
        seen["independent"] += bool((lp[m] != old[m]).any() and (old[m] != roll[m]).any())
        seen["flat"] += any(r.sum() >= 2 and len(set((lp - old)[i][r])) == 1 and len(set((old - roll)[i][r])) == 1
                            and (lp - old)[i][r][0] != 0 and (old - roll)[i][r][0] != 0 for i, r in enumerate(m))
        assert (lp[m] <= 0).all() and (old[m] <= 0).all() and (roll[m] <= 0).all()  # still log-probabilities
    assert all(v >= 5 for v in seen.values()), seen


def test_a_shrunk_example_keeps_its_tensors_independent():
    assert S.RELATIONS[0] == "independent"  # sampled_from shrinks to the first
    with pytest.raises(KeyError, match="unknown relation"):
        S.examples("kl", relations=("independent", "sideways"))


def test_a_clamp_past_the_value_grids_is_found_only_through_far_log_ratios(tmp_path):
    # a low_var_kl without its clamp differs from the reference only where k3 > 10: no grid
    # value reaches it; the far relation does
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rep = H.differential(TargetSpec("reference"), TargetSpec("hunt_reach_adapter:UnclampedLowVarKl"), ["kl"],
                         DIFFERENTIAL_SECONDS, 0, against=True, out_dir=tmp_path, first=True, max_examples=200,
                         config={"kl_type": "low_var_kl"}, **DIFFERENTIAL)
    f, = rep.hunt.findings
    assert f.signature.observable in ("kl", "grad:kl/log_probs") and f.classification in ("bug", "changed")


def test_an_in_place_write_on_the_args_object_is_found_through_its_observable(tmp_path):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rep = H.differential(TargetSpec("hunt_reach_adapter:KlWithArgs"), TargetSpec("hunt_reach_adapter:KlWritesArgs"),
                         ["kl"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, first=True, max_examples=100,
                         config={"kl_type": "k1"}, **DIFFERENTIAL)
    f, = rep.hunt.findings  # the halved coefficient shows in the metric it scales, or in args itself
    assert f.signature.observable in ("returned:metrics.kl_mean", "config:kl_coef", "config:kl_coef.value"), f


def test_returned_values_and_config_changes_are_named_observables():
    import dataclasses
    from types import SimpleNamespace

    from sentinel.adapters.observables import Watch, returned

    @dataclasses.dataclass
    class Stats:
        clipfrac: torch.Tensor
        n: int

    got = returned((torch.ones(2), {"metrics": {"kl": 0.5, "per_sample": [torch.ones(1), torch.ones(2)]}},
                    Stats(torch.zeros(1), 3), "not a number"))
    assert sorted(got) == ["returned:0", "returned:1.metrics.kl", "returned:1.metrics.per_sample",
                           "returned:2.clipfrac", "returned:2.n"]
    assert got["returned:1.metrics.per_sample"].shape == (3,)  # per-sample tensors as one
    args = SimpleNamespace(kl_coef=0.1, buf=torch.zeros(2), name="x")
    w = Watch(args)
    args.buf.add_(1.0)
    assert set(w.changes()) == {"config:buf", "config:buf.value"}
