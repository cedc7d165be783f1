"""A mutant's hunt draws on the boundaries whose catalog scenarios ran its change
(sentinel/mutate/engine.py, Focus): the rule, and a slime mutant on GSPO's branch of
policy_loss_function, which five boundaries map and one reaches."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from sentinel.mutate.engine import _Reach

BOUNDARIES = ["cispo_loss", "is_correction", "metrics", "opsm_mask", "policy_loss"]


def _reach(**on):
    r = _Reach()
    for b, v in on.items():
        r.add(b, v)
    return r


def test_the_hunt_keeps_the_boundaries_that_ran_the_change_and_those_it_cannot_say_of():
    r = _reach(cispo_loss=False, is_correction=False, metrics=None, policy_loss=True)
    # opsm_mask ran no scenario (absent), metrics could not say (None): both kept
    assert r.focus(BOUNDARIES) == ["metrics", "opsm_mask", "policy_loss"]
    assert r.any is True


def test_where_no_scenario_ran_the_change_every_boundary_is_hunted():
    assert _reach(cispo_loss=False, policy_loss=False).focus(BOUNDARIES) == BOUNDARIES
    assert _reach(cispo_loss=False, policy_loss=None).focus(BOUNDARIES) == BOUNDARIES
    assert _Reach().focus(BOUNDARIES) == BOUNDARIES


def test_one_scenario_that_ran_it_marks_its_boundary_whatever_the_others_said():
    r = _Reach()
    for v in (False, True, False, None):
        r.add("policy_loss", v)
    assert r.on == {"policy_loss": True}
    r.add("kl", False)
    r.add("kl", None)
    assert r.on["kl"] is None and r.any is True
    assert _reach(kl=False, gae=None).any is None
    assert _reach(kl=False).any is False and _Reach().any is False


SLIME_REPO = os.environ.get("SENTINEL_SLIME_REPO")


@pytest.mark.slow  # one slime prepare and one mutant
@pytest.mark.skipif(not SLIME_REPO, reason="needs a slime checkout in SENTINEL_SLIME_REPO")
def test_a_slime_change_on_gspos_branch_is_hunted_where_gspo_runs(tmp_path, monkeypatch):
    """`log_probs = torch.cat(log_probs).detach()` on GSPO's branch: only policy_loss draws gspo
    (importance_sampling_level sequence), yet the hunt split its 2 s five ways and compared 16
    policy_loss examples; gspo with the KL loss on, which tells it apart, was rarely among them
    (survived in the stop-44 run, benchmarks/results/mutate-2026-11-26.txt section 43)."""
    from sentinel.catalog import catalog_path
    from sentinel.mutate.driver import Options, mutate
    from sentinel.mutate.mutants import Function, mutants
    from sentinel.spec import load_paths
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    path = Path(SLIME_REPO) / "slime" / "backends" / "megatron_utils" / "loss.py"
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "policy_loss_function")
    fn = Function("slime.backends.megatron_utils.loss:policy_loss_function",
                  "".join(text.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]), node.lineno)
    gspo = node.body[[i for i, s in enumerate(node.body) if isinstance(s, ast.If) and "gspo" in ast.unparse(s.test)
                      and "compute_gspo_kl" in ast.unparse(s)][0]]
    line = gspo.body[-1].lineno  # log_probs = torch.cat(log_probs, dim=0), the branch's last statement
    ids = [m.id for m in mutants(fn, ["detach"]) if int(m.position.split(":")[-2]) == line]
    assert len(ids) == 1, ids
    # bounded by examples, not by the clock: 300 on each boundary hunted
    rep = mutate(load_paths([catalog_path()]), Options("slime", repo=SLIME_REPO, operators=["detach"], only=ids,
                                                        budget=900, hunt_examples=300, cache=None))
    m, = rep.mutate.mutants
    assert m.hunted == ["policy_loss"], m
    assert m.verdict == "killed" and m.reached, m

