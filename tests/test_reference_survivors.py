"""The catalog checks added for the reference's survivors of `sentinel mutate` (results section 26):
each holds on the reference and is violated by the survivor it was written for, the mutant built
by the tool's own operators (its key, as the report names it) and put in the adapter's table."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest
import torch

try:
    import sentinel_adapters  # noqa: F401
except ImportError:  # not installed: map the adapters/ folder to its import name
    _spec = importlib.machinery.ModuleSpec("sentinel_adapters", None, is_package=True)
    _spec.submodule_search_locations = [str(Path(__file__).resolve().parents[1] / "adapters")]
    sys.modules["sentinel_adapters"] = importlib.util.module_from_spec(_spec)

from sentinel import spec
from sentinel.invariants.base import RunObservation
from sentinel.mutate.mutants import Function, mutants
from sentinel.observe import observe
from sentinel.runner import plan
from sentinel_adapters.reference import ops as R
from sentinel_adapters.reference.adapter import ReferenceAdapter

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

# (scenario id, its file, the ops function the survivor mutates, the survivor's key)
CASES = [
    ("icepop-bounds-inclusive", "is_correction/tis-icepop.yaml", "icepop", "002d93bf83"),  # >= low -> > low
    ("icepop-upper-bound-inclusive", "is_correction/tis-icepop.yaml", "icepop", "2c7ca6548f"),  # <= high -> < high
    ("whitened-advantages-keep-their-sign", "advantages/gae.yaml", "whiten", "f0e9e1f0c6"),  # std + eps -> std - eps
    ("ppo-metrics-dual-clip-tie-does-not-bind", "metrics/ppo-metrics.yaml", "policy_metrics", "529762c321"),  # > -> >=
    ("loss-agg-token-mean-no-valid-token", "loss_agg/modes.yaml", "aggregate", "8437590680"),  # / n.clamp_min(1) -> / n
    ("opsm-kl-at-threshold-keeps", "policy/opsm-threshold.yaml", "opsm_mask", "a02a173f8b"),  # kl > delta -> >=
]


def _mutant(name: str, key: str):
    """The ops function `name` with the one change `key` names, compiled in ops' namespace."""
    fn = getattr(R, name)
    found = [m for m in mutants(Function(f"{R.__name__}:{name}", inspect.getsource(fn), 1)) if m.key == key]
    assert len(found) == 1, f"{name} has no mutant {key} (the function changed: rerun mutate)"
    namespace = {**vars(R), "__sentinel_reached__": lambda: None}  # the reach marker, a no-op here
    exec(compile(found[0].source, f"<mutant {key}>", "exec"), namespace)  # noqa: S102 - our own function's source
    return namespace[name]


def _verdicts(sc, adapter) -> set[str]:
    obs = {}
    for r in plan(sc):
        o, _ = observe(adapter, torch.device("cpu"), sc.boundary, r.inputs, r.config, r.grads, r.casts, r.extras)
        obs[r.name] = RunObservation(inputs=r.inputs, outputs=o["outputs"], requires_grad=o["requires_grad"],
                                     grads=o["grads"], inputs_after=o["inputs_after"], extras=o["extras"])
    return {inv.evaluate(obs, sc).verdict for inv in sc.invariants}


@pytest.mark.parametrize("scenario,file,function,key", CASES, ids=[c[0] for c in CASES])
def test_a_check_written_for_a_survivor_holds_on_the_reference_and_kills_it(scenario, file, function, key):
    sc = next(s for s in spec.load_file(SCENARIOS / file) if s.id == scenario)
    assert _verdicts(sc, ReferenceAdapter()) == {"held"}
    adapter = ReferenceAdapter()
    setattr(adapter.ops, function, _mutant(function, key))  # this adapter's table only
    assert "violated" in _verdicts(sc, adapter)
