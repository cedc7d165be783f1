"""Trainer options as hunt axes on verl, slime and AReaL (issue 19 item 1): a bug planted in a branch
that only a trainer option reaches is found by the hunt with the adapter's declared axis, and
not without it. The plant is a one-line change of the trainer's function, compiled in its
module's namespace inside the worker (as `sentinel mutate` applies a mutant), by a target
plugin that subclasses the real adapter; its twin declares no trainer options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel import targets

VERL_REPO = os.environ.get("SENTINEL_VERL_REPO")
SLIME_REPO = os.environ.get("SENTINEL_SLIME_REPO")
AREAL_REPO = os.environ.get("SENTINEL_AREAL_REPO")
pytestmark = pytest.mark.slow

PLUGIN = '''
import importlib
import inspect

from sentinel.mutate.apply import compiled
from sentinel_adapters.{target} import {cls}


def plant(fn, old, new):
    """`fn` with one line changed, in place (its module's namespace, as a mutant is applied)."""
    src = inspect.getsource(fn)
    assert src.count(old) == 1, f"the plant's line is not in {{fn.__qualname__}} at this checkout"
    fn.__code__ = compiled(fn, src.replace(old, new), fn.__code__.co_firstlineno)


class Planted({cls}):
    name = "{target}plant"

    def load(self):
        facts = super().load()
        fn = importlib.import_module({module!r})  # loaded by the adapter; a method by its dotted name
        for part in {function!r}.split("."):
            fn = getattr(fn, part)
        plant(fn, {old!r}, {new!r})
        return facts


class PlantedNoAxis(Planted):
    name = "{target}plant_noaxis"
    option_domains = {{}}
'''


def _install(tmp_path: Path, monkeypatch, **plant: str) -> None:
    pkg = tmp_path / "reach_plants"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "plugin.py").write_text(PLUGIN.format(**plant))
    dist = tmp_path / "reach_plants-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: reach-plants\nVersion: 0.1\n")
    t = plant["target"]
    (dist / "entry_points.txt").write_text(f"[rl_sentinel.targets]\n{t}plant = reach_plants.plugin:Planted\n"
                                           f"{t}plant_noaxis = reach_plants.plugin:PlantedNoAxis\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    targets.registry.cache_clear()


def _hunt(tmp_path: Path, target: str, repo: str, prop: str) -> tuple[list[dict], dict]:
    """(the violated results, the boundary's options entry) of a seeded hunt of one property."""
    out = tmp_path / f"{target}.json"
    r = subprocess.run([sys.executable, "-m", "sentinel.cli", "hunt", "--target", target, "--repo", repo,
                        "--property", prop, "--time", "20", "--seed", "0", "-n", "150", "--no-db", "-o", str(out),
                        "--out", str(tmp_path / f"{target}-findings")],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
    assert out.is_file(), r.stdout + r.stderr
    report = json.loads(out.read_text())
    boundary = prop.split(".")[0]
    entry = next((o for o in report["hunt"]["options"] if o["boundary"] == boundary), {})
    return [x for x in report["results"] if x["verdict"] == "violated"], entry


@pytest.fixture
def verl_plant(tmp_path, monkeypatch):
    # the sequence-level IS weight sums the log-ratio over every position, masked ones included
    _install(tmp_path, monkeypatch, target="verl", cls="VerlAdapter", module="verl.trainer.ppo.rollout_corr_helper",
             function="compute_rollout_correction_weights",
             old="verl_F.masked_sum(log_ratio, response_mask, axis=-1)", new="log_ratio.sum(dim=-1)")
    yield
    targets.registry.cache_clear()


@pytest.mark.skipif(not VERL_REPO, reason="set SENTINEL_VERL_REPO to a verl clone (its rollout_corr_helper at HEAD)")
def test_verl_sequence_is_weight_bug_is_found_only_with_the_rollout_is_axis(verl_plant, tmp_path):
    found, entry = _hunt(tmp_path, "verlplant", VERL_REPO, "is_correction.masked_invariance")
    assert found, "the planted bug was not found with trainer:rollout_is drawn"
    assert all('"trainer:rollout_is": "sequence"' in json.dumps(x) for x in found), found
    assert entry.get("options_read_not_varied") == [], entry
    found, _ = _hunt(tmp_path, "verlplant_noaxis", VERL_REPO, "is_correction.masked_invariance")
    assert found == [], "without the axis the sequence branch is never reached, so the plant cannot be found"


@pytest.fixture
def slime_plant(tmp_path, monkeypatch):
    # the KL loss clamps the reference log-probs in place (the batch's tensors, which hold the
    # behaviour policy's log-probs here): an in-place op where an out-of-place one was meant
    _install(tmp_path, monkeypatch, target="slime", cls="SlimeAdapter", module="slime.backends.megatron_utils.loss",
             function="policy_loss_function", old='ref_log_probs = batch["ref_log_probs"]',
             new='ref_log_probs = [r.clamp_(min=-20.0) for r in batch["ref_log_probs"]]')
    yield
    targets.registry.cache_clear()


@pytest.mark.skipif(not SLIME_REPO, reason="set SENTINEL_SLIME_REPO to a slime clone (slime is not on PyPI)")
def test_slime_kl_loss_bug_is_found_only_with_the_use_kl_loss_axis(slime_plant, tmp_path):
    found, entry = _hunt(tmp_path, "slimeplant", SLIME_REPO, "policy_loss.unmutated")
    assert found, "the planted bug was not found with trainer:use_kl_loss drawn"
    assert all('"trainer:use_kl_loss": true' in json.dumps(x) for x in found), found
    assert {"use_kl_loss", "entropy_coef", "use_opsm"} <= set(entry.get("options_varied", [])), entry
    found, _ = _hunt(tmp_path, "slimeplant_noaxis", SLIME_REPO, "policy_loss.unmutated")
    assert found == [], "without the axis the KL loss is never computed, so the plant cannot be found"


@pytest.fixture
def slime_entropy_plant(tmp_path, monkeypatch):
    # the forward-only pass (no entropy) lets the softmax run in place on the caller's logits: a
    # buffer saved where the loss pass (with entropy) keeps them
    _install(tmp_path, monkeypatch, target="slime", cls="SlimeAdapter", module="slime.utils.ppo_utils",
             function="_VocabParallelLogProbEntropy.forward",
             old="log_prob_logits_max = vocab_parallel_softmax(\n                vocab_parallel_logits\n",
             new="log_prob_logits_max = vocab_parallel_softmax(\n                vocab_parallel_logits, "
                 "inplace=not with_entropy\n")
    yield
    targets.registry.cache_clear()


@pytest.mark.skipif(not SLIME_REPO, reason="set SENTINEL_SLIME_REPO to a slime clone (slime is not on PyPI)")
def test_slime_forward_only_in_place_bug_is_found_only_with_the_with_entropy_axis(slime_entropy_plant, tmp_path):
    found, entry = _hunt(tmp_path, "slimeplant", SLIME_REPO, "logprobs.unmutated")
    assert found, "the planted bug was not found with trainer:with_entropy drawn"
    assert all('"trainer:with_entropy": false' in json.dumps(x) for x in found), found
    found, _ = _hunt(tmp_path, "slimeplant_noaxis", SLIME_REPO, "logprobs.unmutated")
    assert found == [], "without the axis slime's log-prob pass always computes entropy, so the plant cannot be found"


@pytest.fixture
def areal_plant(tmp_path, monkeypatch):
    # with recompute_logprob the recomputed log-probs (already aligned to the predicting
    # position) are rolled once more, as the rollout's are: each token's KL reward reads the
    # next token's log-prob, a masked one included
    _install(tmp_path, monkeypatch, target="areal", cls="ArealAdapter", module="areal.trainer.ppo.actor",
             function="PPOActor._compute_advantages", old='old_logp = data["logprobs"] = prox_logp_value',
             new='old_logp = data["logprobs"] = torch.roll(prox_logp_value, shifts=-1, dims=-1)')
    yield
    targets.registry.cache_clear()


@pytest.mark.skipif(not AREAL_REPO, reason="set SENTINEL_AREAL_REPO to an AReaL clone (its PPOActor at HEAD)")
def test_areal_recomputed_logprob_bug_is_found_only_with_the_recompute_logprob_axis(areal_plant, tmp_path):
    found, entry = _hunt(tmp_path, "arealplant", AREAL_REPO, "advantages.masked_invariance")
    assert found, "the planted bug was not found with trainer:recompute_logprob drawn"
    assert all('"trainer:recompute_logprob": true' in json.dumps(x) for x in found), found
    assert {"recompute_logprob", "use_decoupled_loss", "overlong_reward_penalty"} <= set(entry["options_varied"]), entry
    found, _ = _hunt(tmp_path, "arealplant_noaxis", AREAL_REPO, "advantages.masked_invariance")
    assert found == [], "without the axis the recomputed log-probs are never used, so the plant cannot be found"
