"""sentinel mutate end to end: the toy target's nine known mutants give the exact score
through the real engine (workers, forked children, catalog, differential hunt), a re-run
resumes from the cache, and the reference plants an operator can express are killed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import render_helpers as render
from sentinel import process
from sentinel.hunt.driver import differential as D
from sentinel.mutate import engine
from sentinel.mutate.driver import Options, mutate
from sentinel.report import dump, load
from sentinel.spec import load_paths

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
KL = REPO / "scenarios" / "kl" / "kl-estimators.yaml"


def _function_mutants(path: Path, name: str, operator: str) -> list:
    """The `operator` mutants of the top-level function `name` ("module:function") in `path`."""
    import ast
    from sentinel.mutate.mutants import Function, mutants
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name.split(":")[1])
    lines = text.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]
    return mutants(Function(name, "".join(lines), node.lineno), [operator])


TOY = "mutate_toy:ToyAdapter"
EQUIVALENT = "e2e7f5006d"  # .detach() removed from loss_mask.bool(): a bool tensor has no gradient
KILLED_CLAIM = "b08aee41aa"  # log_probs - ref -> log_probs + ref: killed, so its claim is stale


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    monkeypatch.syspath_prepend(str(TESTS))
    claims = tmp_path / "equivalent.yaml"
    claims.write_text(f"- function: {TOY.split(':')[0]}:kl_k1\n  operator: detach\n  key: {EQUIVALENT}\n"
                      f"  reason: 'loss_mask.bool() is a bool tensor, it has no gradient to stop'\n"
                      f"- function: {TOY.split(':')[0]}:kl_k1\n  operator: sign\n  key: {KILLED_CLAIM}\n"
                      f"  reason: wrongly claimed\n")
    return tmp_path, claims


@pytest.mark.slow  # three workers and five hunts: about 30 s on a free core
def test_toy_target_gives_the_exact_score_and_resumes_from_the_cache(env):
    tmp, claims = env
    opts = Options(TOY, budget=120, hunt_examples=48, equivalent=claims, equivalent_examples=48, cache=tmp / "cache",
                   seed=1)
    live = lambda: {p for p in process._live if p.poll() is None}  # noqa: E731
    before = live()
    rep = mutate(load_paths([KL]), opts)
    # every worker it started has ended: a hunt's referee too (one idle worker was left per hunt kill)
    assert live() <= before, live() - before
    s = rep.mutate
    by = {m.key: m for m in s.mutants}
    assert (s.totals.mutants, s.totals.killed, s.totals.survived, s.totals.equivalent, s.totals.error) == (9, 6, 1, 1, 1)
    assert s.totals.score == round(6 / 7, 4)
    assert by[EQUIVALENT].verdict == "equivalent" and "no gradient" in by[EQUIVALENT].reason
    survivor = s.mutants[0]  # survivors first
    assert survivor.verdict == "survived" and survivor.operator == "detach" and "zeros_like(diff).detach()" in survivor.diff
    assert survivor.examples["kl"] >= 48  # the evidence the claim on its twin needed
    assert s.survivor_examples == 48  # the floor asked for: 100 by default, at most --hunt-examples
    error = next(m for m in s.mutants if m.verdict == "error")
    assert error.operator == "swap-args" and "boolean" in error.reason
    killers = {m.stage for m in s.mutants if m.verdict == "killed"}
    assert {m.reached for m in s.mutants if m.verdict in ("killed", "survived")} == {True}  # every line of kl_k1 runs
    assert killers == {"catalog", "hunt"}  # the gradient-only mutants need the hunt
    assert any(KILLED_CLAIM in x and "killed" in x for x in s.stale_equivalents)
    assert s.by_operator["detach"].mutants == 4 and s.by_boundary["kl"].score == s.totals.score
    # the report round-trips through the strict loader, and renders survivors first
    path = tmp / "mutate.json"
    path.write_text(dump(rep))
    assert load(path).mutate.totals == s.totals
    md = render.markdown(rep)
    assert md.index("### Survivors") < md.index("### Equivalent") and "```diff" in md
    assert 'failures="1"' in render.junit(rep) and 'skipped="1"' in render.junit(rep)
    again = mutate(load_paths([KL]), opts)
    assert again.mutate.cached == 9 and again.mutate.totals == s.totals


TWIN = "96348721b9"  # .detach() added to zeros_like(diff): as equivalent as EQUIVALENT, but not claimed
N = 400  # > differential.FIRST_ROUND: a --budget that ends in the first round cannot give it


@pytest.fixture
def toy(env, monkeypatch):
    """`env`, and the DiffSettings each mutant's hunt ran with."""
    settings = {}  # the mutant's source -> the DiffSettings its hunt ran with

    class Recording(D.DiffHunter):
        def __init__(self, base, head, st, **kw):
            super().__init__(base, head, st, **kw)
            settings[kw["sides"].head.job_extra["mutant"]["source"]] = st
    monkeypatch.setattr(engine, "DiffHunter", Recording)
    return (*env, settings)


@pytest.mark.slow  # one toy prepare, two toy mutants: under a minute on a free core
def test_a_claimed_survivor_hunts_until_its_evidence_and_the_rest_as_before(toy):
    tmp, claims, settings = toy
    opts = Options(TOY, budget=0.01, equivalent=claims, equivalent_examples=N, only=[EQUIVALENT, TWIN],
                   cache=tmp / "cache", seed=1, survivor_examples=0)  # the floor apart: the next test's
    s = mutate(load_paths([KL]), opts).mutate
    by = {m.key: m for m in s.mutants}
    assert by[EQUIVALENT].verdict == "equivalent" and by[EQUIVALENT].examples["kl"] >= N, s.stale_equivalents
    assert not s.stale_equivalents
    # the unclaimed twin: its budget's first round only (FIRST_ROUND examples at most), as before
    assert by[TWIN].verdict == "survived" and by[TWIN].examples["kl"] <= D.FIRST_ROUND
    claimed_st, = (st for src, st in settings.items() if "loss_mask.bool()\n" in src)
    twin_st, = (st for src, st in settings.items() if "zeros_like(diff).detach()" in src)
    assert (claimed_st.evidence, claimed_st.evidence_cap_s) == (N, opts.evidence_cap_s)
    assert twin_st == D.DiffSettings(boundaries=["kl"], time_budget=0.01, seed=1, first=True, verify=False,
                                     shrink_time=engine.SHRINK_S, timeout=opts.timeout, max_examples=opts.hunt_examples,
                                     min_examples=100, min_valid=0, one_sided=True)  # the settings of before
    # a cached claimed survivor short of a larger N is hunted again; the twin comes from the cache
    again = mutate(load_paths([KL]), Options(**{**opts.__dict__, "equivalent_examples": 2 * N})).mutate
    by = {m.key: m for m in again.mutants}
    assert not by[EQUIVALENT].cached and by[TWIN].cached
    assert by[EQUIVALENT].examples["kl"] >= 2 * N and by[EQUIVALENT].verdict == "equivalent"


@pytest.mark.slow  # three toy prepares, one unclaimed survivor each
def test_an_unclaimed_survivor_hunts_past_its_budget_to_the_floor(toy):
    tmp, claims, settings = toy
    opts = Options(TOY, budget=0.01, equivalent=claims, only=[TWIN], cache=None, seed=1, survivor_examples=N)
    floor, = mutate(load_paths([KL]), opts).mutate.mutants
    assert floor.verdict == "survived" and floor.examples["kl"] >= N and not floor.reason
    st, = settings.values()
    assert (st.evidence, st.evidence_cap_s, st.max_examples) == (N, opts.evidence_cap_s, opts.hunt_examples)
    # no floor: the budget's first round alone, as before the floor; the same seeded draws up to there
    off, = mutate(load_paths([KL]), Options(**{**opts.__dict__, "survivor_examples": 0})).mutate.mutants
    assert off.verdict == "survived" and off.examples["kl"] <= D.FIRST_ROUND < N
    # a floor the cap cuts short: survived, and its reason says so (the floor: at most --hunt-examples)
    capped = Options(**{**opts.__dict__, "survivor_examples": 10 ** 7, "evidence_cap_s": 1.0})
    short, = mutate(load_paths([KL]), capped).mutate.mutants
    assert short.verdict == "survived" and 0 < short.examples["kl"] < opts.hunt_examples
    assert (f"evidence cap (0.01 s budget + 1 s) ended the hunt short of a survivor's {opts.hunt_examples} examples"
            in short.reason)


@pytest.mark.slow  # one toy prepare, one toy mutant hunted to a 1 s cap
def test_a_claim_the_cap_leaves_short_says_why(toy):
    tmp, claims, _ = toy
    s = mutate(load_paths([KL]), Options(TOY, budget=0.01, equivalent=claims, equivalent_examples=10 ** 7,
                                         evidence_cap_s=1.0, only=[EQUIVALENT], cache=None, seed=1)).mutate
    m, = s.mutants
    assert m.verdict == "survived" and m.examples["kl"] < 10 ** 7
    assert "evidence cap (0.01 s budget + 1 s) ended the hunt" in m.reason and "kl compared" in m.reason
    stale, = s.stale_equivalents
    assert "a claim needs 10000000 per boundary" in stale and "evidence cap" in stale


def test_bad_operator_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "sentinel", "mutate", "-t", "reference", "--operators", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown operator" in r.stderr


# plant -> (boundary, function, operator, replacement): the plant's bug as one operator's change
PLANT_MUTANTS = {
    "is-weight-attached": ("is_correction", "off_policy_is", "detach",
                           "torch.exp(log_probs - rollout_log_probs).clamp(1.0 - cfg['eps_clip'], "
                           "1.0 + cfg['eps_clip_high'])"),
    "input-mutation": ("kl", "kl_estimator", "inplace", "log_probs.sub_(ref_log_probs)"),
    "kl-inplace-shaping": ("advantages", "shape_token_rewards", "inplace", "kl.mul_(-kl_coef)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("plant", sorted(PLANT_MUTANTS))
def test_reference_plant_expressed_by_an_operator_is_killed(plant, tmp_path, monkeypatch):
    from sentinel.catalog import catalog_path
    from sentinel.mutate.mutants import Function, mutants
    from sentinel_adapters.reference import ops as R
    import inspect
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    boundary, name, op, replacement = PLANT_MUTANTS[plant]
    lines, line = inspect.getsourcelines(getattr(R, name))
    key = next(m.key for m in mutants(Function(f"sentinel_adapters.reference.ops:{name}", "".join(lines), line), [op])
               if m.replacement == replacement)
    rep = mutate(load_paths([catalog_path()]), Options("reference", boundaries=[boundary], operators=[op], only=[key],
                                                        budget=20, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", (plant, m)


@pytest.mark.slow  # one prepare and sixteen mutants through the catalog: about a minute on a free core
def test_every_reference_plant_is_a_mutant_the_tool_kills(tmp_path, monkeypatch):
    """`sentinel mutate --target reference --plants`: each plant swapped in for the function it
    replaces, through the same apply path as an operator's mutant, is killed."""
    from sentinel.catalog import catalog_path
    from sentinel.targets import plants
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    rep = mutate(load_paths([catalog_path()]), Options("reference", plants=True, budget=10, cache=None))
    s = rep.mutate
    assert sorted(m.key for m in s.mutants) == sorted(plants()) and {m.operator for m in s.mutants} == {"plant"}
    assert [(m.key, m.verdict) for m in s.mutants if m.verdict != "killed"] == []
    assert [m.key for m in s.mutants if m.reached is not True] == []  # a kill ran the change: reach never under-counts
    assert s.totals.score == 1.0
    fn = {m.key: m.function for m in s.mutants}
    assert fn["opsm-token-level"].endswith(":opsm_mask") and fn["ratio-in-low-precision"].endswith(":ppo_policy_loss")


def test_mutant_selection_by_id_key_or_function():
    """`-m` names one mutant (id or key) or every mutant of a function: a declared subset."""
    from sentinel.errors import UsageError
    from sentinel.mutate.driver import selected
    from sentinel.mutate.mutants import Function, mutants
    import inspect
    import mutate_toy
    lines, line = inspect.getsourcelines(mutate_toy.kl_k1)
    every = list(mutants(Function("mutate_toy:kl_k1", "".join(lines), line), None))
    other = list(mutants(Function("other:kl_k1", "".join(lines), line), None))
    assert len(every) == 9 and selected(every + other, None) == every + other
    assert selected(every + other, ["mutate_toy:kl_k1"]) == every
    assert selected(every + other, [every[2].id]) == [every[2]]
    assert selected(every + other, [every[2].key]) == [every[2], other[2]]  # a key names the change, not the function
    with pytest.raises(UsageError, match="mutate_toy:nope"):  # a typo scores nothing: refused, never a pass
        selected(every + other, ["mutate_toy:nope", every[0].id])


AREAL_REPO = os.environ.get("SENTINEL_AREAL_REPO")
VERL_REPO = os.environ.get("SENTINEL_VERL_REPO")


@pytest.mark.slow  # one AReaL prepare and one mutant: about a minute on a free core
@pytest.mark.skipif(not AREAL_REPO, reason="needs an AReaL checkout in SENTINEL_AREAL_REPO")
def test_areal_mutant_that_drops_returns_is_not_read_as_an_older_areal(tmp_path, monkeypatch):
    """Deleting `data["returns"] = returns` from AReaL's _compute_advantages made the adapter answer
    `unsupported` (an AReaL before returns existed) on every example: the mutant survived with 0
    examples compared. The file's code stores returns, so their absence is now the run's fault: the
    mutant fails the same way on every input, an error (as deleting the advantages store is)."""
    import ast
    from sentinel.catalog import catalog_path
    from sentinel.mutate.mutants import Function, mutants
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    path = Path(AREAL_REPO) / "areal" / "trainer" / "ppo" / "actor.py"
    text = path.read_text()
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "PPOActor")
    node = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_compute_advantages")
    name = "areal.trainer.ppo.actor:PPOActor._compute_advantages"
    lines = text.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]
    dropped = [m for m in mutants(Function(name, "".join(lines), node.lineno), ["delete"])
               if "-    data['returns'] = returns" in m.diff]
    assert len(dropped) == 1
    rep = mutate(load_paths([catalog_path()]), Options("areal", repo=AREAL_REPO, boundaries=["advantages"],
                                                        operators=["delete"], only=[dropped[0].id], budget=5, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "error" and "KeyError: 'returns'" in m.reason, m


@pytest.mark.slow  # one AReaL prepare and two mutants: a few minutes on a loaded machine
@pytest.mark.skipif(not AREAL_REPO, reason="needs an AReaL checkout in SENTINEL_AREAL_REPO")
@pytest.mark.parametrize("operator, added", [
    # pure distillation (rl_loss_weight 0): the importance weight's sign, seen in the loss and its rkl_loss stat
    ("sign", "+            importance_weight = torch.exp(logprobs + old_logp)"),
    # the reverse-KL reward's detach removed: the same values, another gradient (seen by loss_grad:log_probs only)
    ("detach", "+            rkl_reward = teacher_logp - logprobs\n"),
])
def test_areal_grpo_loss_fn_options_reach_its_branches(operator, added, tmp_path, monkeypatch):
    """AReaL's grpo_loss_fn scored 0 / 66 on the metrics boundary: its distillation, proximal-policy and
    CISPO branches are keyword options and batch keys the boundary never set, and its loss's gradient
    was not observed. The AReaL adapter draws them now (options.actor_loss_options) with the teacher's
    and the behaviour policy's log-probs drawn apart, and observes `loss_grad:log_probs`."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    path = Path(AREAL_REPO) / "areal" / "trainer" / "ppo" / "actor.py"
    ids = [m.id for m in _function_mutants(path, "areal.trainer.ppo.actor:grpo_loss_fn", operator)
           if added in m.diff + "\n"]
    assert len(ids) == 1, f"{operator} mutants adding {added!r}: {ids}"
    # bounded by examples, not by the clock (a 30 s budget let the sign mutant survive on a loaded CI run)
    rep = mutate(load_paths([catalog_path()]), Options("areal", repo=AREAL_REPO, boundaries=["metrics"],
                                                        operators=[operator], only=ids, budget=900, hunt_examples=3000,
                                                        cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", m


@pytest.mark.slow  # one AReaL prepare and one mutant: about a minute on a free core
@pytest.mark.skipif(not AREAL_REPO, reason="needs an AReaL checkout in SENTINEL_AREAL_REPO")
def test_areal_gae_bootstrap_reads_the_padding_past_the_end(tmp_path, monkeypatch):
    """AReaL's GAE bootstraps a row from the value past its end only when the row never emitted EOS
    (`values[:, -1] * seq_no_eos_mask`). The adapter used to put 0 past every row's end, so dropping
    the mask survived 987 gae examples; past a padded row's end it now holds the padding's junk."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    path = Path(AREAL_REPO) / "areal" / "trainer" / "ppo" / "gae.py"
    ids = [m.id for m in _function_mutants(path, "areal.trainer.ppo.gae:_compute_token_level_gae", "drop-mask")
           if "+    nextvalues = values[:, max_seqlen - 1]\n" in m.diff + "\n"]
    assert len(ids) == 1, ids
    rep = mutate(load_paths([catalog_path()]), Options("areal", repo=AREAL_REPO, boundaries=["gae", "advantages"],
                                                        operators=["drop-mask"], only=ids, budget=900, hunt_examples=3000,
                                                        cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", m


TRL_REPO = os.environ.get("SENTINEL_TRL_REPO")


@pytest.mark.slow  # one TRL prepare and one mutant: a few minutes on a loaded machine
@pytest.mark.skipif(not TRL_REPO, reason="needs a TRL checkout in SENTINEL_TRL_REPO")
def test_trl_opsm_sequence_kl_is_observed(tmp_path, monkeypatch):
    """TRL's get_off_policy_mask with the sign of its KL flipped survived 10 opsm_mask examples: only the
    keep / drop decision was observed, and it flips only for a negative-advantage row near the threshold.
    The adapter now reads avg_seq_kl at the function's return (local:avg_seq_kl)."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    ids = _trl_mutants("get_off_policy_mask", "sign", "+    kl_div = sampling_per_token_logps + per_token_logps.detach()")
    rep = mutate(load_paths([catalog_path()]), Options("trl", repo=TRL_REPO, boundaries=["opsm_mask"],
                                                        operators=["sign"], only=ids, budget=10, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", m


def _trl_mutants(method: str, operator: str, changed: str) -> list[str]:
    """The one mutant of GRPOTrainer.`method` at the TRL checkout whose diff holds `changed`."""
    import ast
    from sentinel.mutate.mutants import Function, mutants
    text = (Path(TRL_REPO) / "trl" / "trainer" / "grpo_trainer.py").read_text()
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "GRPOTrainer")
    node = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method)
    first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    lines = text.splitlines(keepends=True)[first - 1:node.end_lineno]
    fn = Function(f"trl.trainer.grpo_trainer:GRPOTrainer.{method}", "".join(lines), first)
    ids = [m.id for m in mutants(fn, [operator]) if changed in m.diff]
    assert len(ids) == 1, ids
    return ids


@pytest.mark.slow  # one TRL prepare and one mutant, a 20 s hunt on policy_loss: a few minutes on a loaded machine
@pytest.mark.skipif(not TRL_REPO, reason="needs a TRL checkout in SENTINEL_TRL_REPO")
def test_trl_adaptive_entropy_gate_is_reached(tmp_path, monkeypatch):
    """TRL's adaptive entropy bonus is gated by the last step's window entropy against entropy_target;
    the bare trainer's 0.0 lay below every target, so a wrong closed-gate coefficient (0.0 -> 1.0)
    survived 244 policy_loss examples. The adapter now draws trainer:_last_world_entropy."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    ids = _trl_mutants("_compute_loss", "constant", "self.args.entropy_target else 1.0")
    rep = mutate(load_paths([catalog_path()]), Options("trl", repo=TRL_REPO, boundaries=["policy_loss"],
                                                        operators=["constant"], only=ids, budget=20, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", m


@pytest.mark.slow  # one reference prepare and two mutants, 300 hunt examples each
def test_a_mutants_hunt_draws_batches_with_no_valid_token(tmp_path, monkeypatch):
    """The reference's aggregate without clamp_min(1) on its token count (token-mean) or on its row
    count gives NaN for a batch with no valid token only, which a differential hunt never drew
    (min_valid 1: there a revision's convention is no finding); both survived 1596 / 1242 examples.
    A mutant's base and head are one trainer's code, so its hunt draws such batches (min_valid 0)."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    # without the catalog's own no-valid-token scenario (it kills both first): the hunt is what this tests
    catalog = [sc for sc in load_paths([catalog_path()]) if sc.id != "loss-agg-token-mean-no-valid-token"]
    rep = mutate(catalog, Options(
        "reference", boundaries=["loss_agg"], operators=["clamp-denominator"], only=["8437590680", "76fe29efbf"],
        budget=3600, hunt_examples=300, cache=None))
    assert {m.key: m.verdict for m in rep.mutate.mutants} == {"8437590680": "killed", "76fe29efbf": "killed"}
    assert all("nan" in m.killed_by for m in rep.mutate.mutants)


@pytest.mark.slow  # one reference prepare and one mutant, at most 300 hunt examples
def test_the_reference_hunt_draws_its_decoupled_loss(tmp_path, monkeypatch):
    """The behaviour weight's .detach() removed (decoupled_weight) survived 131 policy_loss examples: the
    hunt never drew use_decoupled_loss on the reference. Its option_domains now draw it, and the
    gradient reaching the proximal log-probs (old_log_probs, a graph input) tells the mutant apart."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    rep = mutate(load_paths([catalog_path()]), Options(
        "reference", boundaries=["policy_loss"], operators=["detach"], only=["d7d1148d31"],
        budget=3600, hunt_examples=300, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed" and "old_log_probs" in m.killed_by, m


def test_claim_on_a_mutant_left_out_by_m_is_not_stale():
    """A `-m` subset judges some mutants: a claim on another existing mutant is neither honoured
    nor called stale ("no such mutant"); a claim on a mutant no operator makes still is."""
    from sentinel.mutate.driver import _honour
    from sentinel.mutate.equivalent import Claim
    claims = {i: Claim("m:f", "sign", i.split("@")[1], "r", f"e.yaml:{n}") for n, i in
              enumerate(["m:f#sign@aa", "m:f#sign@gone"])}
    assert _honour([], claims, {"m:f"}, 100, {"m:f#sign@aa"}) == ["e.yaml:1: m:f#sign@gone: no such mutant "
                                                                  "(the function changed, or the operator no longer applies)"]
    assert len(_honour([], claims, {"m:f"}, 100)) == 2  # without the generated ids: both (the old behaviour)


def _verl_root(installed: bool) -> str | None:
    """The verl checkout (SENTINEL_VERL_REPO) or the installed package's parent folder (not imported)."""
    if not installed:
        return VERL_REPO
    spec = importlib.util.find_spec("verl")
    return str(Path(spec.submodule_search_locations[0]).parent) if spec else None


@pytest.mark.slow  # one verl prepare and one mutant each: a few minutes on a loaded machine
@pytest.mark.parametrize("function, boundary, replacement, installed", [
    # the leave-one-out baseline's n / (n - 1) -> n / (n + 1): reached through reward_norm's mean_leave1out
    ("verl.trainer.ppo.core_algos:compute_rloo_outcome_advantage", "reward_norm", "response_num + 1", False),
    # the IS-corrected REINFORCE loss's sign: reached through is_correction's off_policy_is with eps_clip 1 (on
    # verl 0.9.1; the checkout's PolicyLossConfig has no rollout_correction field, so it stays unsupported there)
    ("verl.trainer.ppo.core_algos:compute_policy_loss_reinforce", "is_correction", "advantages", True),
])
def test_verl_functions_the_hunt_never_called_are_reached(function, boundary, replacement, installed, tmp_path,
                                                          monkeypatch):
    """verl's rloo estimator and bypass-mode REINFORCE loss scored 0 / 26 and 0 / 16: the hunt drew
    no mean_leave1out on reward_norm, and off_policy_is with eps_clip < 1 only, which verl's
    uncapped-below IS weight refuses. The verl adapter's option domains draw both now, and the
    catalog has off_policy_is with eps_clip 1 (off-policy-is-no-lower-clip)."""
    import ast
    from sentinel.catalog import catalog_path
    from sentinel.mutate.mutants import Function, mutants
    root = _verl_root(installed)
    if root is None:
        pytest.skip("needs verl: SENTINEL_VERL_REPO, or the installed package")
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    module, name = function.split(":")
    path = Path(root, *module.split(".")).with_suffix(".py")
    node = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == name)
    first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    lines = path.read_text().splitlines(keepends=True)[first - 1:node.end_lineno]
    one = next(m.id for m in mutants(Function(function, "".join(lines), first), ["sign"]) if m.replacement == replacement)
    rep = mutate(load_paths([catalog_path()]), Options("verl", repo=None if installed else root, boundaries=[boundary],
                                                        operators=["sign"], only=[one], budget=10, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", m


_RC = "verl.trainer.ppo.rollout_corr_helper"


@pytest.mark.slow  # one verl prepare and one mutant each
@pytest.mark.skipif(not VERL_REPO, reason="needs a verl checkout in SENTINEL_VERL_REPO")
@pytest.mark.parametrize("mutant, boundary, budget, by", [
    # (std + eps) -> (std - eps): no drawn group has a std near eps; the catalog entry pins it
    ("compute_grpo_outcome_advantage#sign@6fecf36c7f", "reward_norm", 0, "verl-grpo-std-plus-eps"),
    # the score is the sum of the token rewards -> their mean: reward_norm hands one-token rows, the
    # advantages boundary (compute_advantage's grpo) multi-token ones
    ("compute_grpo_outcome_advantage#sum-mean@bbe5b78bad", "advantages", 20, None),
    # assert clip_ratio_c > 1.0 -> > 2.0: refuses a valid dual clip only where eps_clip_c is in (1, 2], drawn now
    ("compute_policy_loss_vanilla#constant@5d7cf1d501", "policy_loss", 20, None),
    # the sequence-level batch normalisation's mean over the valid responses: `> 0` -> `>= 0` (an empty
    # response counted), the per-row count -> the batch's, the sum -> a mean, the count -> a fraction;
    # the hunt draws sequence IS and batch normalisation rarely together, never beside an empty
    # response (section 36)
    *((f"{_RC}:compute_rollout_correction_weights#{key}", "is_correction", 0,
       "verl-sequence-is-batch-normalized-over-valid-responses")
      for key in ("compare@637d123a3e", "reduce-dim@43e38ffe83", "sum-mean@a76f14b626",
                  "sum-mean@102059700b")),
    # whitening's eps subtracted or dropped: NaN only where the valid values' spread is 0 (a catalog entry)
    *((f"verl.utils.torch_functional:masked_whiten#{key}", "masked_reduce", 0, "masked-whiten-of-equal-values")
      for key in ("sign@95ac65f052", "constant@78ca6dbab9")),
    # bypass-mode REINFORCE's arm without IS weights (rarely drawn): the catalog entry pins it
    *((f"verl.trainer.ppo.core_algos:compute_policy_loss_reinforce#{key}", "policy_loss", 0,
       "verl-bypass-reinforce-without-is-weights")
      for key in ("inplace@bdaffde432", "sign@82c793d48f", "delete@4951e5de5f", "detach@d3aa0de414")),
    # rejection sampling's inclusive bounds made strict (a sequence statistic on its bound: catalog entries)
    # and a chained criterion's comparison deleted (stop 50, section 49)
    (f"{_RC}:compute_rollout_rejection_mask#compare@61f6992d8c", "policy_loss", 0,
     "verl-rejection-k1-reciprocal-bounds-seq-sum"),
    (f"{_RC}:compute_rollout_rejection_mask#delete@171ebcadec", "is_correction", 0,
     "verl-rejection-seq-mean-k1-seq-max-k3-bounds"),
    # RLOO's score a mean of the token rewards: killed once the advantages boundary maps the estimator
    ("compute_rloo_outcome_advantage#sum-mean@bbe5b78bad", "advantages", 0, "rloo-equal-groups-interleaved"),
    # PF-PPO's resampling (trainer:pf_ppo, stop 49): skipped, its arguments swapped, its batch "detached"
    *((f"verl.trainer.ppo.ray_trainer:compute_advantage#{key}", "advantages", 20, None)
      for key in ("delete@b8a28ad2d4", "swap-args@bb1583013c", "swap-args@ae7139f467", "detach@2b9fa577ae")),
])
def test_verl_survivors_are_killed(mutant, boundary, budget, by, tmp_path, monkeypatch):
    """Survivors of verl's GRPO estimator, vanilla loss (mutate-2026-11-26.txt section 30) and rollout IS
    weights (section 36) at --budget 2; PF-PPO's and bypass REINFORCE's, unreached until stop 49, and whitening's eps
    (section 48); rejection sampling's bounds and RLOO's score (section 49)."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    one = mutant if ":" in mutant else f"verl.trainer.ppo.core_algos:{mutant}"
    rep = mutate(load_paths([catalog_path()]), Options("verl", repo=VERL_REPO, boundaries=[boundary], only=[one],
                                                        budget=budget, hunt_examples=200, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", m
    if by:
        assert by in str(m.killed_by), m.killed_by


SLIME_REPO = os.environ.get("SENTINEL_SLIME_REPO")


@pytest.mark.slow  # one slime prepare and one mutant
@pytest.mark.skipif(not SLIME_REPO, reason="needs a slime checkout in SENTINEL_SLIME_REPO")
def test_slime_logged_loss_metrics_are_observed(tmp_path, monkeypatch):
    """policy_loss_function's reported metrics (kl_loss, ois, pg_clipfrac, ...) reach the hunt only
    through loss_function's logging dict, which the slime adapter dropped: a deleted
    `reported_loss["kl_loss"]` survived. The adapter now returns the dict as `returned:logged.*`."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    path = Path(SLIME_REPO) / "slime" / "backends" / "megatron_utils" / "loss.py"
    ids = [m.id for m in _function_mutants(path, "slime.backends.megatron_utils.loss:policy_loss_function", "delete")
           if m.original.startswith("reported_loss['kl_loss']")]
    assert len(ids) == 1, ids
    # bounded by examples, not by the clock (kl_loss is reported only where use_kl_loss is drawn on)
    rep = mutate(load_paths([catalog_path()]), Options("slime", repo=SLIME_REPO, boundaries=["policy_loss"],
                                                        operators=["delete"], only=ids, budget=900, hunt_examples=300,
                                                        cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed", m


@pytest.mark.slow  # one slime prepare and one mutant each, the catalog only
@pytest.mark.skipif(not SLIME_REPO, reason="needs a slime checkout in SENTINEL_SLIME_REPO")
@pytest.mark.parametrize("mutant, boundary, by", [
    # GRPO's (std + 1e-6) -> (std - 1e-6) or (std + 0.0): no drawn group has a std near eps, and drawn
    # groups of equal rewards are rare; the catalog entry pins both (stop 51, section 50)
    *((f"slime.ray.rollout:RolloutManager._post_process_rewards#{key}", "reward_norm", "slime-grpo-std-plus-eps")
      for key in ("sign@9a593a6a6c", "constant@bed217a8db")),
])
def test_slime_survivors_are_killed(mutant, boundary, by, tmp_path, monkeypatch):
    """Survivors of slime's whole target at --budget 2 that a catalog entry now kills."""
    from sentinel.catalog import catalog_path
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    rep = mutate(load_paths([catalog_path()]), Options("slime", repo=SLIME_REPO, boundaries=[boundary], only=[mutant],
                                                        budget=0, cache=None))
    m, = rep.mutate.mutants
    assert m.verdict == "killed" and by in str(m.killed_by), m


def test_a_mapped_class_is_mutated_through_the_methods_its_body_defines():
    """AReaL's reward_norm / masked_reduce / kl map a class whole (Normalization, KLEstimator, so
    --coverage counts its body once); mutate read it as "a type, not a Python function" and left
    its 60-odd mutants out. A class now stands for its methods, each resolvable to mutate."""
    from sentinel.mutate.apply import members, resolve
    names = members("json.decoder:JSONDecoder")
    assert {"json.decoder:JSONDecoder.__init__", "json.decoder:JSONDecoder.decode"} <= set(names)
    assert all(resolve(n).__name__ == n.rsplit(".", 1)[-1] for n in names)
    assert members("json:dumps") == ["json:dumps"]
    assert members("json:no_such_name") == ["json:no_such_name"]  # reported by sources, not dropped


@pytest.mark.slow  # one prepare and four mutants, three hunts of 48 examples: under a minute on a free core
def test_survivors_say_whether_their_change_was_reached(env):
    """kl_k1_clipped's `clip` branch runs on no scenario and no hunt example (the adapter never
    passes a clip): its mutants survive, not reached (reach work); a survivor on a line that ran
    is reached (a missing check). The views list the two apart."""
    import io
    from rich.console import Console
    tmp, _ = env
    fn = "mutate_toy:kl_k1_clipped"
    unreached = {"7d9404f38b", "087e531bfe"}  # the clamp deleted; -clip -> clip
    reached_survivor, killed = "96348721b9", "b08aee41aa"  # zeros_like(diff).detach(); log_probs + ref
    opts = Options("mutate_toy:ReachToyAdapter", budget=120, hunt_examples=48, cache=tmp / "cache", seed=1,
                   only=[f"{fn}#{op}@{k}" for op, k in [("delete", "7d9404f38b"), ("sign", "087e531bfe"),
                                                          ("detach", reached_survivor), ("sign", killed)]])
    rep = mutate(load_paths([KL]), opts)
    s = rep.mutate
    by = {m.key: m for m in s.mutants}
    assert {k: (by[k].verdict, by[k].reached) for k in by} == {
        **{k: ("survived", False) for k in unreached}, reached_survivor: ("survived", True), killed: ("killed", True)}
    assert all(by[k].examples["kl"] >= 48 for k in unreached)  # not reached though the hunt compared its examples
    t = s.totals
    assert (t.survived, t.survived_reached, t.survived_unreached) == (3, 1, 2)
    assert t.score == 0.25 and t.score_reached == 0.5  # killed 1 / 4; 1 / (4 - 2 not reached)
    assert s.by_function[fn].survived_unreached == 2 and s.by_boundary["kl"].survived_unreached == 2
    console = Console(file=io.StringIO(), width=200, color_system=None)
    render.console_report(rep, console)
    text = console.file.getvalue()
    print(text)
    missing, reach = text.index("reached, not told apart: a missing check (1)"), text.index("not reached: reach work (2)")
    assert missing < text.index(reached_survivor) < reach < text.index("7d9404f38b")
    assert "2 of 3 survivors never ran their change (reach work)" in text and "50.0%" in text
    md = render.markdown(rep)
    assert md.index("#### reached, not told apart: a missing check (1)") < md.index("#### not reached: reach work (2)")
    assert "| not reached |" in md
    html = render.page(rep)
    assert html.index("reached, not told apart: a missing check (1)") < html.index("not reached: reach work (2)")
    assert render.junit(rep).count('message="survived, not reached: reach work') == 2
    path = tmp / "mutate.json"
    path.write_text(dump(rep))
    assert load(path).mutate.totals == t
    again = mutate(load_paths([KL]), opts)  # the cache keeps reach
    assert again.mutate.cached == 4 and again.mutate.totals == t


@pytest.mark.slow  # one prepare and two mutants' hunts of 48 examples: under a minute on a free core
def test_a_crash_on_every_scenario_is_an_error_only_if_the_hunt_sees_it_everywhere(env):
    """The catalog's kl scenarios are all 2 x 4 batches. Swapping `zeros(rows, cols)` raises on every
    one of them, the same way, but answers on a square batch the hunt draws: told apart, killed (it
    was an `error`, counted apart, before the hunt was asked: OpenRLHF's 8f3af6786c was such a
    mutant, answering only under drawn dynamic batching). Swapping torch.where's condition raises on
    every input the hunt compares too: an error."""
    tmp, _ = env
    fn = "mutate_toy:kl_k1_sized"
    shape_swap, where_swap = "bb05020782", "8ab3de5775"
    opts = Options("mutate_toy:SizedToyAdapter", budget=120, hunt_examples=48, cache=tmp / "cache", seed=1,
                   only=[f"{fn}#swap-args@{shape_swap}", f"{fn}#swap-args@{where_swap}"])
    by = {m.key: m for m in mutate(load_paths([KL]), opts).mutate.mutants}
    killed, error = by[shape_swap], by[where_swap]
    assert killed.verdict == "killed" and killed.stage == "hunt", killed
    assert "answers on" in killed.killed_by and "fails the same way on every scenario" in killed.killed_by
    assert error.verdict == "error" and "every input the hunt compared" in error.reason, error
    assert error.examples["kl"] >= 48 and "boolean" in error.reason


def test_the_cli_says_before_the_run_which_equivalence_claims_it_reads(tmp_path):
    """mutate reads ./equivalent.yaml: from another folder it reads none, and says so before judging anything."""
    cmd = [sys.executable, "-m", "sentinel", "mutate", "-t", "reference", "-m", "no-such-mutant"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "equivalence claims: none (no --equivalent" in r.stderr
    (tmp_path / "equivalent.yaml").write_text("[]\n")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and f"equivalence claims: {tmp_path.resolve() / 'equivalent.yaml'}" in r.stderr
