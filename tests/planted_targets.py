"""Planted-bug copies of two real targets: the real adapter, with one trainer function swapped
for a buggy copy written here (`--target planted_targets:PlantedOpenRLHFAdapter`; the tests
put this folder on PYTHONPATH). The catalog and the hunt must catch each.

- OpenRLHF: `aggregate_loss` whose token mean divides by every position of the batch, padding
  included (the `loss-agg-counts-padding` plant of the reference, in OpenRLHF's own function).
- OpenRLHF, one line (`OneLinePlantedOpenRLHF`): a function of the real checkout with one line
  changed (SENTINEL_TEST_PLANT: JSON [module, qualname, old line, new line]), compiled in its
  module's namespace as `sentinel mutate` applies a mutant.
- TRL: `GRPOTrainer._get_per_token_logps_and_entropies` that takes the log-probs one position
  early (the log-prob of token t - 1 scored as token t's), an off-by-one in the shift between
  logits and labels.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from sentinel import hunt as H
from sentinel.runner import TargetSpec
from untimed import HUNT

from sentinel_adapters.openrlhf import OpenRLHFAdapter
from sentinel_adapters.openrlhf.conventions import LOSS
from sentinel_adapters.trl import TRLAdapter


def aggregate_counts_padding(loss, loss_mask, token_level_loss=True, dp_size=1, batch_num_tokens=None,
                             global_batch_size=None):
    """OpenRLHF's aggregate_loss contract, with the token mean over all B * T positions."""
    kept = torch.where(loss_mask.bool(), loss, torch.zeros_like(loss))
    if token_level_loss:
        return kept.sum() / loss_mask.numel() * dp_size  # BUG: padding positions in the denominator
    per_seq = kept.sum(-1) / loss_mask.sum(-1).clamp(min=1)
    rows = loss_mask.sum(-1) > 0
    return per_seq[rows].sum() / rows.sum().clamp(min=1) * dp_size


class PlantedOpenRLHFAdapter(OpenRLHFAdapter):
    name = "openrlhf+aggregate-counts-padding"
    description = "OpenRLHF with aggregate_loss dividing by every position (tests/planted_targets.py)"

    def load(self):
        facts = super().load()
        # PolicyLoss.forward looks aggregate_loss up in its module at call time
        self.mods[LOSS].aggregate_loss = aggregate_counts_padding
        return {**facts, "plant": "aggregate-counts-padding"}


class OneLinePlantedOpenRLHF(OpenRLHFAdapter):
    name = "openrlhf+one-line"
    description = "OpenRLHF with one line of one function changed (SENTINEL_TEST_PLANT; tests/planted_targets.py)"

    def load(self):
        from sentinel.mutate.apply import compiled

        facts = super().load()
        module, qualname, old, new = json.loads(os.environ["SENTINEL_TEST_PLANT"])
        fn = importlib.import_module(module)
        for part in qualname.split("."):
            fn = getattr(fn, part)
        fn = inspect.unwrap(fn)  # under torch.no_grad(): the function it wraps, as a mutant is applied
        src = inspect.getsource(fn)
        if src.count(old) != 1:
            raise RuntimeError(f"the plant's line is not in {qualname} at this version")
        fn.__code__ = compiled(fn, src.replace(old, new), fn.__code__.co_firstlineno)
        return {**facts, "plant": f"{qualname}: {new.strip()}"}


def shifted_logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
                  compute_aux_loss=False, **multimodal):
    """TRL's fused-head log-probs of the completion, taken one position early."""
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-logits_to_keep] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    # BUG: should be log_probs[:, -logits_to_keep:]; one position early (0 before the first)
    logps = torch.nn.functional.pad(out.log_probs, (1, 0))[:, -logits_to_keep - 1:-1]
    entropies = torch.zeros_like(logps) if compute_entropy else None
    return logps, entropies, None


class PlantedTRLAdapter(TRLAdapter):
    name = "trl+shifted-logps"
    description = "TRL with the completion log-probs taken one position early (tests/planted_targets.py)"

    def load(self):
        facts = super().load()
        if not facts.get("fused_lm_head"):
            raise RuntimeError("the shifted-logps plant is written for TRL's fused LM head (TRL >= 1.11)")
        base = super().trainer_cls
        self._planted = type("PlantedGRPOTrainer", (base,), {"_get_per_token_logps_and_entropies": shifted_logps})
        return {**facts, "plant": "shifted-logps"}

    @property
    def trainer_cls(self):
        return self._planted


def hunt_both(planted: str, real: str, prop: str, out: Path):
    """Hunt one property on the planted copy (to its first finding) and on the real target, at
    once and with the same seed: (planted report, real report)."""
    here = str(Path(__file__).parent)  # the hunt's worker imports this module by name
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    kw = dict(names=[prop], seed=0, db=None, max_examples=40, **HUNT)
    with ThreadPoolExecutor(2) as pool:  # two worker processes at once
        a = pool.submit(H.hunt, TargetSpec(planted), out_dir=out / "planted", first=True, **kw)
        b = pool.submit(H.hunt, TargetSpec(real), out_dir=out / "real", **kw)
        return a.result(), b.result()
