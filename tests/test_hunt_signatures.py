"""Many bugs per property: finding signatures, known findings, pinned config, honest verdicts.

A target with two bugs on one property (tests/two_bug_adapter.py) shows the second only once
the first is known; slime HEAD's known findings (scenarios/findings/) are passed over while
its OPSM bug is still found (SENTINEL_SLIME_REPO).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from sentinel import hunt as H, verdicts
from sentinel.hunt.signature import Signature, config_that_matters, is_known, layout, position_class
from sentinel.report import dump
from sentinel.runner import TargetSpec
from sentinel.strategies import Example
from untimed import HUNT

HERE = Path(__file__).parent
CATALOG = HERE.parent / "scenarios" / "findings"
PROP = "loss_agg.mode.token-mean"


@pytest.fixture(autouse=True)
def _tests_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))


def two_bug_hunt(out: Path, **kw):
    return H.hunt(TargetSpec("two_bug_adapter:TwoBugAdapter"), names=[PROP], seed=0, db=None, out_dir=out,
                  max_examples=400, **{**HUNT, **kw})


def _bug(f) -> str:
    """Which of the two planted bugs a finding is, by its position class."""
    return "masked-row" if "masked-row" in f.signature.position else "hole"


@pytest.mark.slow  # three hunts; signatures stay in the default set (test_one_hunt_lists_every_distinct_finding)
def test_a_second_bug_on_a_property_that_fails_for_a_known_reason_is_found(tmp_path):
    first = two_bug_hunt(tmp_path / "first", first=True)
    f, = first.hunt.findings
    report = tmp_path / "first.json"
    report.write_text(dump(first))
    # known from the report (its signature), then from the finding's scenario (replayed on the target)
    for known in (H.load_known([report]), H.load_known([Path(f.file)])):
        again = two_bug_hunt(tmp_path / "again", first=True, known=known)
        g, = again.hunt.findings
        assert {_bug(f), _bug(g)} == {"masked-row", "hole"}, (f.signature, g.signature)
        assert g.reproduced is True
        p, = again.hunt.properties
        assert sum(p.excluded_known.values()) > 0  # the first bug was met and passed over


def test_one_hunt_lists_every_distinct_finding(tmp_path):
    rep = two_bug_hunt(tmp_path)
    assert sorted(_bug(f) for f in rep.hunt.findings) == ["hole", "masked-row"], \
        [f.signature for f in rep.hunt.findings]
    assert len({f.file for f in rep.hunt.findings}) == 2 and rep.hunt.properties[0].findings == 2


def test_pinned_config_is_the_only_one_drawn(tmp_path):
    spec = TargetSpec("reference", plant="loss-agg-counts-padding")
    kw = dict(names=["loss_agg.padding_invariant"], seed=0, db=None, out_dir=tmp_path, max_examples=200, first=True,
              **HUNT)
    assert H.hunt(spec, config={"mode": "seq-mean-token-mean"}, **kw).hunt.findings == []  # the bug is token-mean's
    f, = H.hunt(spec, config={"mode": "token-mean"}, **kw).hunt.findings
    assert f.config["mode"] == "token-mean" and "mode" not in f.signature.config  # one choice: it cannot matter


def test_verdict_rule():
    v = verdicts.hunt_property_verdict
    assert v("running", 0, 0, 100) == "untested"
    assert v("running", 40, 0, 100) == "stopped"
    assert v("running", 100, 0, 100) == "holds" and v("finished", 3, 0, 100) == "holds"
    assert v("running", 2, 1, 100) == "violated" and v("error", 2, 1, 100) == "violated"
    assert v("unsupported", 0, 0, 100) == "unsupported" and v("error", 5, 0, 100) == "error"
    d = verdicts.differential_verdict
    assert d(["p.gradient"], []) == "fixed" and d([], ["p.gradient"]) == "regressed"
    assert d([], []) == "changed" and d(["a"], ["b"]) == "changed" and d(["a", "b"], ["a"]) == "fixed"
    assert d([], ["a"], against=True) == "bug" and d(["a"], [], against=True) == "reference-bug"


def test_cut_off_properties_are_stopped_or_untested_never_holds(tmp_path):
    rep = H.hunt(TargetSpec("reference"), boundaries=["kl", "gae"], time_budget=1.0, max_examples=10 ** 6,
                 min_examples=10 ** 6, seed=0, db=None, out_dir=None)
    statuses = {p.property: p.status for p in rep.hunt.properties}
    assert set(statuses.values()) <= {"stopped", "untested"}, statuses
    assert {r.id for r in rep.results} == set()  # they decided nothing: no scenario result
    assert sum(rep.hunt.verdicts.values()) == len(statuses) and rep.exit_code() == 5  # decided nothing: not a pass


# --- signatures, pure ----------------------------------------------------------------------

def ex(mask, **config):
    m = np.asarray(mask, np.float32)
    return Example("loss_agg", {"mode": "token-mean", **config}, {"values": np.ones_like(m), "loss_mask": m})


def test_layout_classes():
    e = ex([[0, 1, 0, 1, 0], [0, 0, 0, 0, 0]])
    got = {k: np.argwhere(v).tolist() for k, v in layout(e).items()}
    assert got == {"masked-head": [[0, 0]], "masked-interior": [[0, 2]], "masked-tail": [[0, 4]],
                   "masked-row": [[1, 0], [1, 1], [1, 2], [1, 3], [1, 4]]}


def test_position_and_config_are_what_the_failure_needs():
    # a toy "bug": fails when the batch has a fully masked row and mode is token-mean
    def probe(e, overrides):
        bad = (~e.inputs["loss_mask"].astype(bool).any(axis=1)).any() and e.config["mode"] == "token-mean"
        return ("violated", "loss") if bad else ("held", None)
    e = ex([[0, 1, 0, 1], [0, 0, 0, 0]])
    assert position_class(e, "close", "loss", probe, False) == ("masked-row",)
    choices = {"mode": ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]}
    assert config_that_matters(e, choices, "loss", probe) == {"mode": ["token-mean"]}
    sig = Signature.make("loss_agg.close", "loss", {"mode": ["token-mean"]}, ["masked-row"])
    assert sig.admits({"mode": "token-mean"}) and not sig.admits({"mode": "seq-mean-token-sum"})
    assert Signature.from_dict(json.loads(json.dumps(sig.as_dict()))) == sig
    assert sig.overlaps({}) and not sig.overlaps({"mode": ["seq-mean-token-sum"]})
    # an example with the known bug's layout and another feature besides is the known bug's
    both = ex([[0, 1, 0, 1], [0, 0, 0, 0]])
    assert is_known(sig, "close", both, "loss", False, probe)
    assert not is_known(sig, "close", ex([[0, 1, 0, 1]]), "loss", False, probe)  # no masked row: not it
    # a NaN failure is a value-leaking known bug's when it fails the same with the NaN made finite
    assert is_known(sig, "close", both, "loss", True, probe)
    nan_only = lambda e, o: ("violated", "loss") if np.isnan(e.inputs["values"]).any() else ("held", None)  # noqa: E731
    poisoned = ex([[0, 1, 0, 1], [0, 0, 0, 0]])
    poisoned.inputs["values"][1, 0] = np.nan
    assert not is_known(sig, "close", poisoned, "loss", True, nan_only)


# --- slime HEAD: known findings are passed over, the OPSM bug is still found --------------

SLIME = os.environ.get("SENTINEL_SLIME_REPO")


@pytest.mark.slow
@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a clone of THUDM/slime")
def test_slime_known_findings_are_not_reported_again(tmp_path):
    known = H.load_known([CATALOG])
    token_level_props = ["policy_loss.gradient", "policy_loss.mode.token-mean", "policy_loss.finite.nan"]
    rep = H.hunt(TargetSpec("slime", SLIME), names=["opsm_mask.sequence_uniform", *token_level_props],
                 max_examples=100, seed=0, db=None, out_dir=tmp_path, known=known, **HUNT)
    found = {f.property for f in rep.hunt.findings}
    assert "opsm_mask.sequence_uniform" in found
    # slime HEAD's token-level loss keeps both known bugs; neither is reported again
    token_level = [f.signature for f in rep.hunt.findings
                   if f.property in token_level_props
                   and f.signature.config.get("importance_sampling_level") != ["sequence"]]
    assert token_level == []
    passed = {k.source.rsplit(": ", 1)[-1] for k in rep.hunt.known if k.excluded}
    assert {"token-mean-counts-masked-sample", "masked-token-nan-reaches-loss"} <= passed, passed


@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a clone of THUDM/slime")
def test_gspo_finding_reproduces_on_slime_and_holds_on_the_reference():
    """The finding the slime hunt adds to scenarios/findings/ (also violated on verl: test_real_targets)."""
    from sentinel.runner import run
    from sentinel.spec import load_file
    sc, = load_file(CATALOG / "gspo-seq-ratio-nan-masked.yaml")
    rep = run([sc], [TargetSpec("reference"), TargetSpec("slime", SLIME)])
    assert {r.target: r.verdict for r in rep.results} == {"reference": "holds", "slime": "violated"}


def test_labels_carry_the_commit_that_ran(tmp_path):
    """`--commit X^` is labelled with the parent's hash, never X's (findings of a parent and its
    fix would otherwise be written under one name)."""
    import subprocess
    from sentinel.hunt.driver.engine import resolved
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, text=True,  # noqa: E731
                                    check=True).stdout.strip()
    git("init", "-q")
    for i in range(2):
        (tmp_path / "f").write_text(str(i))
        git("add", "f")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"c{i}")
    parent, head = git("rev-parse", "HEAD^"), git("rev-parse", "HEAD")
    spec = resolved(TargetSpec("reference", str(tmp_path), "HEAD^"))
    assert spec.commit == parent != head and spec.key == f"reference@{parent[:12]}"
