"""Stable signatures (issue 19, item 11a; sentinel/hunt/signature.py): the same bug gets the
same signature whatever values were drawn. A signature keeps only the config keys that matter,
each with the classes of choices (`canonical`: a name, a bool, null, a number's sign) it
persists under, tried on the example and on it amplified, so a threshold the drawn values
happen not to cross is no part of it; before, it listed the threshold values themselves, in
the order the drawn one put them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sentinel import hunt as H
from sentinel.hunt.signature import Signature, canonical, config_that_matters
from sentinel.runner import TargetSpec
from sentinel.strategies import Example
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS

HERE = Path(__file__).parent
CHOICES = {"eps_clip": [0.2, 0.1, 0.3], "eps_clip_high": [None, 0.28, 0.2], "importance_sampling_level": ["token", "sequence"]}


def _ex(diff: float, **config) -> Example:
    lp = np.array([[-0.5, -0.5]], np.float32)
    return Example("policy_loss", {"eps_clip": 0.2, "eps_clip_high": 0.28, "importance_sampling_level": "token", **config},
                   {"log_probs": lp + np.float32(diff), "old_log_probs": lp, "loss_mask": np.ones_like(lp)})


def _clip_bug(ex, overrides):
    """A toy upper-clip bug: it shows where eps_clip_high is set and the drawn log-ratio passes the
    config's threshold (a sequence-level ratio needs twice as far)."""
    c = ex.config
    d = float(np.max(ex.inputs["log_probs"] - ex.inputs["old_log_probs"]))
    needs = c["eps_clip"] * (2 if c["importance_sampling_level"] == "sequence" else 1)
    return ("violated", "loss") if c["eps_clip_high"] is not None and d > needs else ("held", None)


def test_one_bug_one_signature_whatever_was_drawn():
    sigs = {Signature.make("policy_loss.differential", "loss", config_that_matters(ex, CHOICES, "loss", _clip_bug), [])
            for ex in (_ex(0.25), _ex(0.5, eps_clip=0.1), _ex(0.15, eps_clip=0.1), _ex(0.25, eps_clip_high=0.2))}
    # before: {eps_clip: [0.2, 0.1], eps_clip_high: [0.28, 0.2], importance_sampling_level: [token]},
    # {eps_clip_high: [0.28, 0.2]}, {eps_clip: [0.1], ...}, {..., eps_clip_high: [0.2, 0.28]}: four "bugs"
    sig, = sigs
    assert sig.config_dict() == {"eps_clip_high": [">0"]}
    assert sig.admits({"eps_clip_high": 0.28}) and not sig.admits({"eps_clip_high": None})
    assert sig.choices("eps_clip_high", CHOICES["eps_clip_high"]) == [0.28, 0.2]
    assert sig.choices("eps_clip", CHOICES["eps_clip"]) == CHOICES["eps_clip"]  # does not matter: every choice
    # a signature written before (values, not classes) reads back as the same one
    assert Signature.from_dict({"property": sig.property, "observable": "loss",
                                "config": {"eps_clip_high": [0.2, 0.28]}, "position": []}) == sig


def test_canonical_classes():
    assert [canonical(v) for v in (0.0, 0, 0.05, 3, -1.5, np.float32(0.2), None, True, "token", "=0")] == \
        ["=0", "=0", ">0", ">0", "<0", ">0", "null", "true", "token", "=0"]
    assert canonical({"mean_level": "group", "std_level": None}) == '{"mean_level": "group", "std_level": null}'


@pytest.fixture
def _toys_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))


def _signature(head: TargetSpec, seed: int, out: Path) -> dict:
    rep = H.differential(TargetSpec("reference"), head, ["policy_loss"], DIFFERENTIAL_SECONDS, seed, out_dir=out,
                         first=True, verify=False, max_examples=400, **DIFFERENTIAL)
    f, = rep.hunt.findings
    return f.signature.model_dump()


def test_the_same_planted_bug_at_two_seeds_one_signature_another_bug_another(tmp_path, _toys_on_path):
    dual = TargetSpec("signature_adapter:DualClipIgnored")
    a, b = _signature(dual, 0, tmp_path / "a"), _signature(dual, 1, tmp_path / "b")
    assert a == b and a["config"] == {"eps_clip_c": [">0"]}
    other = _signature(TargetSpec("reference", plant="gspo-token-ratio"), 0, tmp_path / "c")
    assert other != a and other["config"] == {"importance_sampling_level": ["sequence"]}
