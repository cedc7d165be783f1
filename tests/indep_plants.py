"""Targets for tests/test_independent_inputs.py (imported by the worker as `indep_plants:NAME`;
the test puts this folder on PYTHONPATH).

Each real adapter has a planted twin: the trainer's function with one line changed, compiled in
its module's namespace after the adapter loaded it (as `sentinel mutate` applies a mutant). Each
bug shows only where two inputs differ or an optional key is absent. The `...Bound` classes are
the same adapters as they were before the inputs were drawn apart (`bound`): the input that is
now drawn on its own is left out of the batch again, so the trainer sees the relation the
adapter used to fix (or, for a key drawn present and absent, the axis that draws it is gone).
"""

from __future__ import annotations

import importlib
import inspect

from sentinel.mutate.apply import compiled
from sentinel_adapters.areal.adapter import ArealAdapter
from sentinel_adapters.trl import TRLAdapter as TrlAdapter
from sentinel_adapters.verl import VerlAdapter


def plant(module: str, function: str, old: str, new: str) -> None:
    """`module.function` (a dotted name for a method) with the line `old` changed to `new`."""
    fn = importlib.import_module(module)
    for part in function.split("."):
        fn = getattr(fn, part)
    src = inspect.getsource(fn)
    assert src.count(old) == 1, f"the plant's line is not in {function} at this checkout"
    fn.__code__ = compiled(fn, src.replace(old, new), fn.__code__.co_firstlineno)


def bound(inputs: dict) -> dict:
    """The inputs without the rollout log-probs: the trainer then gets the related tensor."""
    return {k: v for k, v in inputs.items() if k != "rollout_log_probs"}


# --- TRL: OPSM reads vLLM's sampling log-probs where the batch has them ---------------------------

_TRL = ("trl.trainer.grpo_trainer", "GRPOTrainer._compute_loss",
        'sampling_per_token_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)',
        "sampling_per_token_logps = old_per_token_logps")  # the inference mismatch left out of OPSM


class TrlClean(TrlAdapter):
    name = "trl-indep"


class TrlPlanted(TrlAdapter):
    name = "trl-indep-plant"

    def load(self):
        facts = super().load()
        plant(*_TRL)
        return facts


class TrlCleanBound(TrlClean):
    def b_opsm_mask(self, inputs, config):
        return super().b_opsm_mask(bound(inputs), config)


class TrlPlantedBound(TrlPlanted):
    def b_opsm_mask(self, inputs, config):
        return super().b_opsm_mask(bound(inputs), config)


# --- AReaL: with recompute_logprob the KL reads the recomputed log-probs, not the rollout's -------

_AREAL = ("areal.trainer.ppo.actor", "PPOActor._compute_advantages",
          'old_logp = data["logprobs"] = prox_logp_value',
          'old_logp = data["logprobs"] = torch.roll(data["logprobs"], shifts=-1, dims=-1)')


class ArealClean(ArealAdapter):
    name = "areal-indep"


class ArealPlanted(ArealAdapter):
    name = "areal-indep-plant"

    def load(self):
        facts = super().load()
        plant(*_AREAL)
        return facts


class ArealCleanBound(ArealClean):
    def b_advantages(self, inputs, config):
        return super().b_advantages(bound(inputs), config)


class ArealPlantedBound(ArealPlanted):
    def b_advantages(self, inputs, config):
        return super().b_advantages(bound(inputs), config)


# --- verl (2025-08 to 10): the vanilla loss's truncated IS on rollout_log_probs, by its own name ---

_VERL = ("verl.trainer.ppo.core_algos", "compute_policy_loss_vanilla",
         "tis_imp_ratio = torch.exp(old_log_prob - rollout_log_probs)",
         "tis_imp_ratio = torch.exp(log_prob.detach() - rollout_log_probs)")  # the current policy's ratio


class VerlClean(VerlAdapter):
    name = "verl-indep"


class VerlPlanted(VerlAdapter):
    name = "verl-indep-plant"

    def load(self):
        facts = super().load()
        plant(*_VERL)
        return facts


class VerlCleanBound(VerlClean):
    def b_policy_loss(self, inputs, config):
        return super().b_policy_loss(bound(inputs), config)


class VerlPlantedBound(VerlPlanted):
    def b_policy_loss(self, inputs, config):
        return super().b_policy_loss(bound(inputs), config)


# --- TRL: OPSM's fallback where the batch has no sampling log-probs (the "absent" relation) ------

_TRL_ABSENT = ("trl.trainer.grpo_trainer", "GRPOTrainer._compute_loss",
               'sampling_per_token_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)',
               'sampling_per_token_logps = inputs.get("sampling_per_token_logps", per_token_logps.detach())')


class TrlAbsentClean(TrlClean):
    pass


class TrlAbsentPlanted(TrlAdapter):
    name = "trl-indep-absent-plant"

    def load(self):
        facts = super().load()
        plant(*_TRL_ABSENT)
        return facts


# --- AReaL (2025-10/11): the loss's mask where the batch has no full_loss_mask --------------------

_AREAL_MASK = ("areal.engine.ppo.actor", "grpo_loss_fn",
               'loss_mask = input_data.get("full_loss_mask", input_data["loss_mask"]).bool()',
               'loss_mask = input_data.get("full_loss_mask", torch.ones_like(input_data["loss_mask"])).bool()')
_NO_PRESENCE_AXIS = {k: v for k, v in ArealAdapter.option_domains.items() if k != "metrics"}


class ArealMaskClean(ArealClean):
    pass


class ArealMaskPlanted(ArealAdapter):
    name = "areal-indep-mask-plant"

    def load(self):
        facts = super().load()
        plant(*_AREAL_MASK)
        return facts


class ArealMaskCleanBound(ArealMaskClean):
    option_domains = _NO_PRESENCE_AXIS  # the batch always holds full_loss_mask, as before


class ArealMaskPlantedBound(ArealMaskPlanted):
    option_domains = _NO_PRESENCE_AXIS
