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


def planted(cls_name: str, base: type, name: str, where: tuple[str, str, str, str]) -> type:
    """`base` whose load plants `where` (module, function, old line, new line) once the trainer is in."""
    def load(self):
        facts = base.load(self)
        plant(*where)
        return facts
    return type(cls_name, (base,), {"name": name, "load": load, "__module__": __name__})


def bound_to(base: type, boundary: str) -> type:
    """`base` (`<base>Bound`) whose `boundary` gets the inputs `bound` leaves."""
    method = f"b_{boundary}"

    def call(self, inputs, config):
        return getattr(base, method)(self, bound(inputs), config)
    return type(f"{base.__name__}Bound", (base,), {method: call, "__module__": __name__})


def twins(prefix: str, base: type, name: str, where: tuple[str, str, str, str], boundary: str) -> tuple[type, ...]:
    """`<prefix>Clean` (target `name`), `<prefix>Planted` (`name-plant`) and the `...Bound` of each."""
    clean = type(f"{prefix}Clean", (base,), {"name": name, "__module__": __name__})
    plant_ = planted(f"{prefix}Planted", base, f"{name}-plant", where)
    return clean, plant_, bound_to(clean, boundary), bound_to(plant_, boundary)


# --- TRL: OPSM reads vLLM's sampling log-probs where the batch has them ---------------------------

_TRL = ("trl.trainer.grpo_trainer", "GRPOTrainer._compute_loss",
        'sampling_per_token_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)',
        "sampling_per_token_logps = old_per_token_logps")  # the inference mismatch left out of OPSM


TrlClean, TrlPlanted, TrlCleanBound, TrlPlantedBound = twins(
    "Trl", TrlAdapter, "trl-indep", _TRL, "opsm_mask")


# --- AReaL: with recompute_logprob the KL reads the recomputed log-probs, not the rollout's -------

_AREAL = ("areal.trainer.ppo.actor", "PPOActor._compute_advantages",
          'old_logp = data["logprobs"] = prox_logp_value',
          'old_logp = data["logprobs"] = torch.roll(data["logprobs"], shifts=-1, dims=-1)')


ArealClean, ArealPlanted, ArealCleanBound, ArealPlantedBound = twins(
    "Areal", ArealAdapter, "areal-indep", _AREAL, "advantages")


# --- verl (2025-08 to 10): the vanilla loss's truncated IS on rollout_log_probs, by its own name ---

_VERL = ("verl.trainer.ppo.core_algos", "compute_policy_loss_vanilla",
         "tis_imp_ratio = torch.exp(old_log_prob - rollout_log_probs)",
         "tis_imp_ratio = torch.exp(log_prob.detach() - rollout_log_probs)")  # the current policy's ratio


VerlClean, VerlPlanted, VerlCleanBound, VerlPlantedBound = twins(
    "Verl", VerlAdapter, "verl-indep", _VERL, "policy_loss")


# --- TRL: OPSM's fallback where the batch has no sampling log-probs (the "absent" relation) ------

_TRL_ABSENT = ("trl.trainer.grpo_trainer", "GRPOTrainer._compute_loss",
               'sampling_per_token_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)',
               'sampling_per_token_logps = inputs.get("sampling_per_token_logps", per_token_logps.detach())')


class TrlAbsentClean(TrlClean):
    pass


TrlAbsentPlanted = planted("TrlAbsentPlanted", TrlAdapter, "trl-indep-absent-plant", _TRL_ABSENT)


# --- AReaL (2025-10/11): the loss's mask where the batch has no full_loss_mask --------------------

_AREAL_MASK = ("areal.engine.ppo.actor", "grpo_loss_fn",
               'loss_mask = input_data.get("full_loss_mask", input_data["loss_mask"]).bool()',
               'loss_mask = input_data.get("full_loss_mask", torch.ones_like(input_data["loss_mask"])).bool()')
_NO_PRESENCE_AXIS = {**ArealAdapter.option_domains, "metrics": {  # every other metrics option still drawn
    k: v for k, v in ArealAdapter.option_domains["metrics"].items() if k != "trainer:full_loss_mask"}}


class ArealMaskClean(ArealClean):
    pass


ArealMaskPlanted = planted("ArealMaskPlanted", ArealAdapter, "areal-indep-mask-plant", _AREAL_MASK)


class ArealMaskCleanBound(ArealMaskClean):
    option_domains = _NO_PRESENCE_AXIS  # the batch always holds full_loss_mask, as before


class ArealMaskPlantedBound(ArealMaskPlanted):
    option_domains = _NO_PRESENCE_AXIS
