"""A mutant's hunt spends its budget where its change runs (sentinel/mutate/engine.py, Focus): the
boundaries whose catalog scenarios ran it, and those where a probe of a few drawn examples did
(a trainer option only the hunt draws may reach it). Slime's policy_loss_function is mapped by five
boundaries: a change on its GSPO branch runs on policy_loss alone; one in its KL-loss block runs in
the catalog on metrics alone, and in the hunt wherever use_kl_loss is drawn (cispo_loss killed it)."""

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


def test_the_focus_is_the_boundaries_where_a_scenario_ran_the_change():
    r = _reach(cispo_loss=False, is_correction=False, metrics=None, policy_loss=True)
    assert r.focus(BOUNDARIES) == ("policy_loss",)  # the rest are probed (metrics could not say)
    assert r.any is True
    assert _reach(cispo_loss=False, policy_loss=None).focus(BOUNDARIES) == ()  # none: no probe, all hunted
    assert _Reach().focus(BOUNDARIES) == ()
    assert _reach(kl=True).focus(["kl"]) == ()  # all of them: nothing to probe


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


def test_take_clears_the_flag_and_reached_remembers(monkeypatch):
    from sentinel.mutate import reach
    monkeypatch.setattr(reach, "_flag", None)
    assert reach.take() is None and reach.reached() is None  # no mutant here
    reach.arm()
    assert reach.take() is False and reach.reached() is False
    reach._hit()
    assert reach.take() is True and reach.take() is False
    assert reach.reached() is True


SLIME_REPO = os.environ.get("SENTINEL_SLIME_REPO")


def _policy_loss_function():
    from sentinel.mutate.mutants import Function
    path = Path(SLIME_REPO) / "slime" / "backends" / "megatron_utils" / "loss.py"
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "policy_loss_function")
    return node, Function("slime.backends.megatron_utils.loss:policy_loss_function",
                          "".join(text.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]), node.lineno)


def _branch(node: ast.FunctionDef, condition: str, holding: str) -> ast.If:
    return next(s for s in node.body if isinstance(s, ast.If) and condition in ast.unparse(s.test)
                and holding in ast.unparse(s))


@pytest.mark.slow  # one slime prepare and two mutants
@pytest.mark.skipif(not SLIME_REPO, reason="needs a slime checkout in SENTINEL_SLIME_REPO")
def test_a_slime_change_is_hunted_where_it_runs(tmp_path, monkeypatch):
    """GSPO's `log_probs = torch.cat(log_probs).detach()`: only policy_loss draws gspo; the hunt split
    its 2 s five ways and compared 16 policy_loss examples, where gspo with the KL loss on tells it
    apart (survived in the stop-44 run, results section 43). Now the four other boundaries are probed
    and stopped. The KL loss's `loss + coef * kl_loss` detached runs in the catalog on metrics only
    (whose outputs do not show it); the probes find it runs on the loss boundaries too, which kill it."""
    from sentinel.catalog import catalog_path
    from sentinel.mutate.driver import Options, mutate
    from sentinel.mutate.mutants import mutants
    from sentinel.spec import load_paths
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    node, fn = _policy_loss_function()
    gspo = _branch(node, "gspo", "compute_gspo_kl").body[-1].lineno  # log_probs = torch.cat(log_probs, dim=0)
    kl = _branch(node, "use_kl_loss", "compute_approx_kl").body[-1].lineno  # loss = loss + coef * kl_loss
    lines = {int(m.position.split(":")[-2]): m.id for m in mutants(fn, ["detach"])}
    ids = [lines[gspo], lines[kl]]
    # bounded by examples, not by the clock: 300 on each boundary hunted past its probe
    rep = mutate(load_paths([catalog_path()]), Options("slime", repo=SLIME_REPO, operators=["detach"], only=ids,
                                                        budget=900, hunt_examples=300, cache=None))
    by = {m.id: m for m in rep.mutate.mutants}
    g, k = by[ids[0]], by[ids[1]]
    assert g.hunted == ["policy_loss"] and g.examples["policy_loss"] > 8, g
    assert all(g.examples[b] <= 8 for b in BOUNDARIES if b != "policy_loss"), g.examples
    assert g.verdict == "killed" and g.reached, g
    assert k.verdict == "killed" and k.reached, k
    assert k.stage == "hunt" and "metrics.differential" not in (k.killed_by or ""), k


def _probing_hunter(focus, reached_in: set[str], budget: float = 0.5, evidence: int = 0):
    """A differential hunter over three boundaries whose rounds are stubbed and whose head says
    its change ran in a round of the boundaries in `reached_in`; `evidence`: a survivor's floor."""
    import time
    from sentinel.hunt.driver import differential as D
    from sentinel.runner import TargetSpec
    st = D.DiffSettings(boundaries=["kl", "advantages", "policy_loss"], time_budget=budget, seed=0, first=True,
                        focus=tuple(focus), evidence=evidence, evidence_cap_s=30.0 if evidence else 0.0)
    h = D.DiffHunter(TargetSpec("reference"), TargetSpec("reference"), st)
    h.t_search = time.perf_counter()
    calls, last = [], []

    def round_(s, left, need=None, probe=False):
        calls.append((s.prop.boundary, probe))
        s.examples += D.PROBE if probe else 50
        s.rounds += 1
        last[:] = [s.prop.boundary]
        time.sleep(0.01)

    class Sides:  # the head's reach marker: fired in the last round when its boundary reaches the change
        @staticmethod
        def head_reached():
            hit = bool(last) and last[0] in reached_in
            last.clear()
            return hit
    h._round, h.sides = round_, Sides()
    return h, calls


def test_a_boundary_outside_the_focus_is_probed_once_then_stopped_unless_the_change_ran():
    h, calls = _probing_hunter(["policy_loss"], reached_in={"policy_loss", "advantages"})
    h.rounds()
    probes = [c for c in calls if c[1]]
    assert probes == [("kl", True), ("advantages", True)]  # one probe each; the focus is never probed
    assert h.probed_out == ["kl"]  # advantages ran the change: hunted on
    kl = next(s for s in h.states if s.prop.boundary == "kl")
    assert kl.status == "finished" and "did not run in a probe" in kl.reason
    assert ("kl", False) not in calls and ("advantages", False) in calls  # rounds after the probe: advantages only


def test_without_a_focus_no_boundary_is_probed():
    h, calls = _probing_hunter([], reached_in=set())
    h.rounds()
    assert not any(p for _, p in calls) and h.probed_out == []


def test_the_floor_runs_the_hunted_boundaries_past_the_budget_and_not_those_a_probe_stopped():
    h, calls = _probing_hunter(["policy_loss"], reached_in={"policy_loss", "advantages"}, budget=0.05, evidence=400)
    h.rounds()
    by = {s.prop.boundary: s for s in h.states}
    assert h.probed_out == ["kl"] and by["kl"].examples == 8  # stopped by its probe: no floor to reach
    assert by["advantages"].examples >= 400 and by["policy_loss"].examples >= 400  # 50 a round, past 0.05 s
    assert not h.evidence_capped


def test_a_survivor_short_of_its_floor_names_the_boundaries_it_hunted_not_those_a_probe_stopped():
    from types import SimpleNamespace as NS
    from sentinel.mutate.engine import _hunted

    def state(b, n):
        return NS(prop=NS(boundary=b), examples=n, found=[], status="running", reason="")
    hunter = NS(states=[state("kl", 8), state("gae", 60), state("advantages", 200)], probed_out=["kl"],
                evidence_capped=True, choices=lambda b: {})
    out = _hunted(hunter, {"boundaries": ["kl", "gae", "advantages"]}, [], 100, "2 s budget + 120 s", "a survivor's")
    assert out["verdict"] == "survived" and out["examples"] == {"kl": 8, "gae": 60, "advantages": 200}
    assert out["reason"] == ("the evidence cap (2 s budget + 120 s) ended the hunt short of a survivor's 100 examples: "
                             "gae compared 60 (running)")
