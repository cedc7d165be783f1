"""What a trainer adapter declares instead of coding: the files `sentinel history` watches
(required) and the config choices it refuses before any target code runs."""

from __future__ import annotations

import pytest
import torch

from sentinel import targets
from sentinel.adapters.contract import BoundaryResult, implements, refuse
from sentinel.adapters.trainer import TrainerAdapter
from sentinel.boundaries import BOUNDARIES
from sentinel.errors import Unsupported

TRAINERS = [t.name for t in targets.BUILTIN if t.name != "reference"]


@pytest.mark.parametrize("name", TRAINERS)
def test_every_trainer_adapter_declares_its_loss_path_files(name):
    cls = targets.adapter_class(name)
    assert issubclass(cls, TrainerAdapter)
    assert cls.loss_path_files and all(f.startswith(f"{cls.package}/") for f in cls.loss_path_files)


def test_a_trainer_adapter_without_loss_path_files_is_refused_at_class_creation():
    with pytest.raises(TypeError, match="loss_path_files"):
        type("NoFiles", (TrainerAdapter,), {"name": "nofiles", "package": "nofiles"})


class _Refusing(TrainerAdapter):
    name, package, loss_path_files = "refusing", "refusing", ("refusing/loss.py",)
    unsupported = (refuse("advantages", "reward_clip", reason="no clipping here",
                          when=lambda c: c["reward_clip"] is not None),)

    @implements("advantages")
    def b_advantages(self, inputs, config):
        return BoundaryResult({"advantages": inputs["rewards"]})


def test_a_declared_refusal_raises_before_the_boundary_runs():
    adapter = _Refusing(None, torch.device("cpu"))  # never loaded: no target code can run
    inputs = {"rewards": torch.ones(2), "loss_mask": torch.ones(2, 3)}
    with pytest.raises(Unsupported, match="^reward_clip: no clipping here$"):
        adapter.call("advantages", inputs, {**BOUNDARIES["advantages"].config, "reward_clip": 5.0})
    out = adapter.call("advantages", inputs, dict(BOUNDARIES["advantages"].config))
    assert out.outputs["advantages"] is inputs["rewards"]


def test_verl_and_slime_refuse_reward_clip_from_their_tables():
    config = {**BOUNDARIES["advantages"].config, "reward_clip": 5.0}
    inputs = {"rewards": torch.ones(2), "loss_mask": torch.ones(2, 3)}
    for name in ("verl", "slime"):
        with pytest.raises(Unsupported, match="^reward_clip: "):
            targets.adapter_class(name)(None, torch.device("cpu")).call("advantages", inputs, config)


def test_a_refusal_names_options_of_its_boundary():
    with pytest.raises(TypeError, match="unsupported"):
        type("Bad", (TrainerAdapter,), {"name": "bad", "package": "bad", "loss_path_files": ("bad/x.py",),
                                        "unsupported": (refuse("kl", "no_such_option", reason="-"),)})
