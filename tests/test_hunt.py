"""`sentinel hunt`: Hypothesis finds invariant violations with no hand-made trigger.

Every planted bug of the reference is rediscovered by hunting its boundary's generic
properties, shrunk to a small trigger and written as a scenario that `sentinel run`
reproduces; the reference itself yields nothing. The real seed bugs are hunted on slime
(SENTINEL_SLIME_REPO: a clone with history) and AReaL (the installed package, and
SENTINEL_AREAL_REPO for a checkout at HEAD) when those are available.

Hunts run concurrently (one worker process each), so the file stays fast on two cores.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from sentinel import hunt as H
from sentinel.errors import UsageError
from sentinel.hunt.driver.state import Found
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_file, load_text
from sentinel_adapters.reference.plants import PLANTS
import untimed

HERE = Path(__file__).parent
SEED = 0

# Each plant, and the boundary whose generic properties must catch it (no property names it).
PLANT_BOUNDARY = {name: p.hunt for name, p in PLANTS.items()}


def hunt(spec: TargetSpec, out: Path, **kw):
    """A seeded hunt bounded by its example count (tests/untimed.py): the same outcome on a
    loaded machine as on an idle one."""
    kw.setdefault("max_examples", 40)
    return H.hunt(spec, seed=SEED, db=None, out_dir=out, **{**untimed.HUNT, **kw})


def concurrently(jobs: dict[str, tuple]) -> dict:
    with ThreadPoolExecutor(4) as pool:
        futures = {k: pool.submit(hunt, *args[:2], **args[2]) for k, args in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


@pytest.fixture(scope="module")
def reference_hunts(tmp_path_factory):
    """One hunt per plant (its boundary's properties, stopping at the first finding), one of
    the plain reference (every property), one of a crashing target: all at once."""
    root = tmp_path_factory.mktemp("hunt")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    jobs = {plant: (TargetSpec("reference", plant=plant), root / plant, {"boundaries": [b], "first": True})
            for plant, b in PLANT_BOUNDARY.items()}
    # every property must finish its 10 examples (the hunt's time budget never binds)
    jobs["reference"] = (TargetSpec("reference"), root / "reference", {"max_examples": 10, "min_examples": 10})
    jobs["crash"] = (TargetSpec("hunt_crash_adapter:CrashAdapter"), root / "crash",
                     {"boundaries": ["loss_agg", "kl", "policy_loss"], "max_examples": 10})
    return concurrently(jobs)


@pytest.mark.slow  # the module fixture hunts every plant: `pytest -m slow`
@pytest.mark.parametrize("plant", sorted(PLANT_BOUNDARY))
def test_hunt_finds_planted_bug(reference_hunts, plant):
    rep = reference_hunts[plant]
    assert rep.kind == "hunt" and rep.exit_code() == 1
    found = rep.hunt.findings
    assert found, f"{plant}: nothing found: {[(p.property, p.status, p.examples) for p in rep.hunt.properties]}"
    f, = found  # first=True: the hunt stops at its first finding
    assert f.family in PLANTS[plant].trips, f"{plant}: found by {f.family}, expected one of {PLANTS[plant].trips}"
    assert f.examples_to_first <= 40 and Path(f.file).is_file()
    assert f.reproduced is True  # the YAML, run as `sentinel run` runs it, is violated on the plant
    sc, = load_file(f.file)  # a valid scenario, tagged, with the hunt's provenance
    assert "hunt" in sc.tags and sc.provenance[0].startswith("sentinel hunt --target reference --plant " + plant)
    assert f"seed {SEED}" in sc.provenance[0]


@pytest.mark.slow  # the module fixture hunts every plant: `pytest -m slow`
def test_opsm_trigger_is_minimal(reference_hunts):
    f, = reference_hunts["opsm-token-level"].hunt.findings
    assert f.family == "sequence_uniform" and f.rows == 1 and f.tokens <= 3  # the seed: one sequence of 3 tokens
    sc, = load_file(f.file)
    adv = sc.inputs["advantages"][0][sc.inputs["loss_mask"][0] == 1]
    assert (adv < 0).any() and (adv >= 0).any()  # mixed advantage signs: what the bug needs


@pytest.mark.slow  # the module fixture hunts every plant: `pytest -m slow`
def test_no_eos_trigger_no_larger_than_seed(reference_hunts):
    f, = reference_hunts["reward-norm-before-no-eos"].hunt.findings
    assert f.family == "unchanged_under" and f.rows <= 2 and f.tokens <= 3  # the seed: 2 rows of 3 tokens


@pytest.mark.slow  # the module fixture hunts every plant: `pytest -m slow`
def test_reference_hunt_finds_nothing(reference_hunts):
    rep = reference_hunts["reference"]
    h = rep.hunt
    assert h.findings == [] and rep.exit_code() == 0 and rep.success
    assert {p.status for p in h.properties} == {"holds"}, [(p.property, p.status, p.reason) for p in h.properties]
    assert all(p.examples >= 10 for p in h.properties) and h.verdicts == {"holds": len(h.properties)}
    assert set(h.invariants_per_boundary) >= {"opsm_mask", "advantages", "policy_loss", "kl", "is_correction"}
    assert "sequence_uniform" in h.invariants_per_boundary["opsm_mask"]
    data = json.loads(rep.model_dump_json())  # the report's JSON carries the hunt section
    assert data["kind"] == "hunt" and data["hunt"]["properties"]


@pytest.mark.slow  # the module fixture hunts every plant: `pytest -m slow`
def test_findings_hold_on_the_reference(reference_hunts):
    """Every finding written for a plant holds on the correct reference (`sentinel run` path)."""
    scenarios = [sc for plant in PLANT_BOUNDARY for f in reference_hunts[plant].hunt.findings
                 for sc in load_file(f.file)]
    rep = run(scenarios, [TargetSpec("reference")])
    assert len(rep.results) == len(PLANT_BOUNDARY)
    assert {r.id: r.verdict for r in rep.results} == {sc.id: "holds" for sc in scenarios}


@pytest.mark.slow  # the module fixture hunts every plant: `pytest -m slow`
def test_crash_is_an_error_and_unsupported_is_not_a_finding(reference_hunts):
    """A segfault costs its property (error), not the hunt; configs the target declines are
    probed and not drawn; a property the target declines entirely is not applicable."""
    rep = reference_hunts["crash"]
    status = {p.property: p for p in rep.hunt.properties}
    crashed = [p for p in status.values() if p.status == "error"]
    assert crashed and all(p.boundary == "loss_agg" for p in crashed)
    assert all("SIGSEGV" in p.reason for p in crashed), [p.reason for p in crashed]
    for name, p in status.items():
        if p.boundary == "kl" and p.family == "straight_through":  # only k1+ / k3+, which this target lacks
            assert p.status == "unsupported", (name, p)
        elif p.boundary == "kl":
            assert p.status == "holds" and p.examples == 10, (name, p)
            # a finite property rejects batches with no valid token; nothing else is rejected
            assert set(p.rejections) <= {"'loss_mask' has no valid position: nothing there to keep finite"}, p.rejections
            assert p.excluded_config == {"kl_type": ["k2", "k3", "low_var_kl", "k1+", "k3+"]}
        if p.boundary == "policy_loss":
            assert p.status == "unsupported" and "no policy loss" in p.reason
    assert rep.hunt.findings == [] and rep.exit_code() == 3


@pytest.mark.slow  # a hunt
def test_a_choice_refused_beside_the_first_example_is_drawn_where_a_whole_config_runs_it(tmp_path):
    """slime divides rewards by the group std only beside the group mean and eps 1e-6: probed one
    key at a time, std_level=group was excluded from every reward_norm property."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rep = H.hunt(TargetSpec("hunt_crash_adapter:JointAdapter"), boundaries=["reward_norm"], max_examples=20,
                 min_examples=20, time_budget=60, seed=0, db=None, out_dir=tmp_path)
    ran = [p for p in rep.hunt.properties if p.examples]
    assert ran and not [(p.property, p.excluded_config) for p in ran
                        if "group" in p.excluded_config.get("std_level", [])]


@pytest.mark.slow  # two CLI hunts; the CLI hunt runs in the default set via test_exit_codes and the docs' hunt guide
def test_cli_hunt_writes_reproducible_yaml(tmp_path):
    """The command line end to end: progress, report, a YAML that `sentinel run` reproduces;
    a second hunt replays the known failure from the example database first."""

    def cmd(*seed: str, db: list[str] | None = None, out: str = "hunt.json") -> list[str]:
        return [sys.executable, "-m", "sentinel.cli", "hunt", "--plant", "opsm-token-level", "--property",
                "opsm_mask.sequence_uniform", "--max-examples", "50", *untimed.CLI, *seed,
                *(["--db", str(tmp_path / "db")] if db is None else db),
                "--out", str(tmp_path / "found"), "-o", str(tmp_path / out)]
    # unseeded: the database is read and written (Hypothesis never writes it from a seeded search)
    p = subprocess.run(cmd(), capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "violated opsm_mask.sequence_uniform" in p.stderr and "FOUND" in p.stdout
    rep = json.loads((tmp_path / "hunt.json").read_text())
    f, = rep["hunt"]["findings"]
    assert rep["hunt"]["database"] and (tmp_path / "db").is_dir()
    assert f["reproduced"] is True
    # progress over time: samples at each round's start and end, in time order, ending at the totals
    prop, = rep["hunt"]["properties"]
    samples = prop["progress"]
    assert len(samples) == 2 * prop["rounds"] and samples[0]["examples"] == 0
    assert [s["s"] for s in samples] == sorted(s["s"] for s in samples)
    assert [s["examples"] for s in samples] == sorted(s["examples"] for s in samples)
    assert (samples[-1]["examples"], samples[-1]["findings"]) == (prop["examples"], 1)
    assert samples[0]["s"] <= f["hunt_elapsed_s"] <= samples[-1]["s"]
    run_ = [sys.executable, "-m", "sentinel.cli", "run", f["file"], "-o", "-", "--json", "--plant", "opsm-token-level"]
    bad = subprocess.Popen(run_, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    # the same seeded hunt without the database: how many examples its own search needs
    alone = subprocess.Popen(cmd("--seed", "4", db=["--no-db"], out="alone.json"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    # meanwhile, a seeded hunt replays the known failure from the database before its own search
    p2 = subprocess.run(cmd("--seed", "4"), capture_output=True, text=True, cwd=tmp_path)
    stdout, _ = bad.communicate()
    alone.communicate()
    assert bad.returncode == 1 and json.loads(stdout)["results"][0]["verdict"] == "violated"
    assert p2.returncode == alone.returncode == 1
    f2, = json.loads((tmp_path / "hunt.json").read_text())["hunt"]["findings"]
    f0, = json.loads((tmp_path / "alone.json").read_text())["hunt"]["findings"]
    # the replay comes first: sooner than the search alone (5 examples at seed 4). Not `== 1`: the
    # database also holds the first hunt's other test cases, and which one Hypothesis replays first
    # once read 2 on a loaded machine
    assert f2["examples_to_first"] < f0["examples_to_first"], (f2["examples_to_first"], f0["examples_to_first"])


# --- strategies and the YAML writer (no worker) --------------------------------------------

@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(H.PROPERTIES["advantages.no_eos_isolation"].strategy())
def test_no_eos_examples_mix_rows_with_and_without_eos(ex):
    attn, loss = ex.inputs["attention_mask"], ex.inputs["loss_mask"]
    no_eos = attn.astype(bool).all(axis=1)
    assert no_eos.any() and not no_eos.all()
    assert ((loss == 1) <= (attn == 1)).all() and (loss[:, 0] == 0).all()  # response inside real tokens, after a prompt
    assert ex.inputs["rewards"].dtype == np.float32 and attn.dtype == np.float32
    changed = ex.variants["no_eos_rewards"]["rewards"] != ex.inputs["rewards"]
    assert (changed == no_eos).all()


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(H.PROPERTIES["advantages.group_isolation"].strategy())
def test_yaml_round_trip_is_bit_exact(ex):
    prop = H.PROPERTIES["advantages.group_isolation"]
    inv = prop.invariant(ex).summary()
    finding = {"config": ex.config, "inputs": {n: a.tolist() for n, a in ex.inputs.items()}, "variants": {},
               "invariant": inv, "outcome": {"message": "m"}}
    sid, text = H.finding_document(prop, finding, "reference", "sentinel hunt --target reference (commit n/a, seed 0)",
                                   {"examples_to_first": 1, "time_to_first_s": 0.1, "shrink_calls": 0})
    sc, = load_text(text)
    assert sc.id == sid and sc.config == ex.config
    for n, a in ex.inputs.items():
        assert sc.inputs[n].dtype == a.dtype and sc.inputs[n].tobytes() == a.tobytes(), n
    assert len(np.unique(ex.inputs["group"])) >= 2


def test_policy_gradient_property_can_fail(tmp_path):
    """policy_loss.gradient holds on the reference (test_reference_hunt_finds_nothing); a
    token-mean that counts padding breaks the stated -ratio * A / N."""
    rep = hunt(TargetSpec("reference", plant="loss-agg-counts-padding"), tmp_path, names=["policy_loss.gradient"],
               first=True)
    f, = rep.hunt.findings
    assert f.property == "policy_loss.gradient" and f.reproduced is True


@pytest.mark.parametrize("seed", ["0", "1"])
def test_a_round_on_a_loaded_machine_replays_its_failure(monkeypatch, seed):
    """On a loaded machine a round's shrinking budget is spent sooner. The batch Hypothesis
    shrank to is replayed at the end; had the round's condition answered it otherwise then
    (the budget spent, its best violation another batch's), Hypothesis raised FlakyFailure and
    the round lost its shrunk example. A clock that advances 0.5 s per reading is the load."""
    import torch
    from sentinel.hunt import search as S
    from sentinel.hunt.worker import round as R
    from sentinel_adapters.reference.adapter import ReferenceAdapter
    ticks = itertools.count()
    clock = SimpleNamespace(monotonic=lambda: next(ticks) * 0.5, process_time=time.process_time)
    monkeypatch.setattr(R, "time", clock)
    monkeypatch.setattr(S, "time", clock)  # the round's search reads the same clock
    cpu = torch.device("cpu")
    job = {"property": "loss_agg.mode.token-mean", "max_examples": 200, "time_limit": 1e9, "shrink_time": 20.0,
           "seed": seed, "db_key": "test"}
    out = R.run_round(ReferenceAdapter(device=cpu, options={"plant": "loss-agg-counts-padding"}), cpu, job,
                      lambda event: None)
    assert out["note"] == "" and out["finding"]["observable"] == "loss", out["note"]


def test_exit_reasons(tmp_path):
    """Why a hunt stopped: a target that does not load, the time budget, the first finding,
    the properties it waits for, every property decided (no worker needed but for the first)."""
    ExitReason, HuntSettings, Hunter = H.ExitReason, H.HuntSettings, H.Hunter
    h = Hunter(TargetSpec("reference", str(tmp_path / "not-a-repo")), HuntSettings(names=["kl.unmutated"]))
    assert h.run().exit_code() == 3 and h.exit_reason is ExitReason.target_error
    h = Hunter(TargetSpec("reference"), HuntSettings(boundaries=["kl"], first=True, until=["kl.finite.nan"]))
    h.t_search = time.perf_counter()
    assert h.over() is None
    by_name = {s.prop.name: s for s in h.states}
    by_name["kl.finite.nan"].status = "finished"
    assert h.over() is ExitReason.until
    by_name["kl.unmutated"].found.append(Found({}, 1, 0.1, 0.1))
    assert h.over() is ExitReason.first_finding
    h.t_search -= h.settings.time_budget
    assert h.over() is ExitReason.time_budget
    h = Hunter(TargetSpec("reference"), HuntSettings(names=["kl.finite.nan"]))
    h.t_search, h.states[0].status = time.perf_counter(), "finished"
    assert h.over() is ExitReason.finished
    with pytest.raises(UsageError, match="kl.finite"):  # a name that is no property waits forever: refused
        Hunter(TargetSpec("reference"), HuntSettings(boundaries=["kl"], until=["kl.finite"]))


def test_every_property_uses_a_registered_family_and_boundary():
    from sentinel.boundaries import BOUNDARIES
    from sentinel.invariants import REGISTRY
    for p in H.PROPERTIES.values():
        assert p.family in REGISTRY and p.boundary in BOUNDARIES
        assert set(p.config_choices()) <= set(BOUNDARIES[p.boundary].config)
    assert H.select(["opsm_mask"], ["sequence_uniform"])[0].name == "opsm_mask.sequence_uniform"


# --- the real seed bugs -------------------------------------------------------------------

SLIME = os.environ.get("SENTINEL_SLIME_REPO")
needs_slime = pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a clone of THUDM/slime with history")
needs_areal = pytest.mark.skipif(importlib.util.find_spec("areal") is None,
                                 reason="areal is not installed (pip install '.[areal]' && "
                                        "pip install --no-deps areal==1.0.4)")


def _has_commit(repo: str, rev: str) -> bool:
    return subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "-q", rev + "^{commit}"],
                          capture_output=True).returncode == 0


@pytest.mark.slow  # a real trainer's hunt
@needs_slime
def test_slime_head_opsm_leak_rediscovered(tmp_path):
    rep = hunt(TargetSpec("slime", SLIME), tmp_path, names=["opsm_mask.sequence_uniform"], max_examples=100)
    f, = rep.hunt.findings
    assert f.rows == 1 and f.tokens <= 3 and f.reproduced is True


@pytest.mark.slow  # two real trainer hunts
@needs_slime
def test_slime_kl_aliasing_before_fix_and_not_after(tmp_path):
    if not _has_commit(SLIME, "045310b2b"):
        pytest.skip("SENTINEL_SLIME_REPO has no commit 045310b2b")
    names = ["advantages.logged_kl", "advantages.unmutated"]
    reps = concurrently({
        "before": (TargetSpec("slime", SLIME, "045310b2b^"), tmp_path / "before", {"names": names}),
        "after": (TargetSpec("slime", SLIME, "045310b2b"), tmp_path / "after", {"names": names, "max_examples": 150}),
    })
    f, = reps["before"].hunt.findings
    assert f.property == "advantages.logged_kl" and f.rows == 1 and f.tokens <= 3 and f.reproduced is True
    assert reps["after"].hunt.findings == []
    assert all(p.status == "holds" and p.examples > 0 for p in reps["after"].hunt.properties)


def _areal_no_eos(spec: TargetSpec, out: Path):
    rep = hunt(spec, out, names=["advantages.no_eos_isolation"], max_examples=100)
    # the seed's signature first; one more where the config probe keeps a whitening that runs only
    # beside other changes (its signature names the advantage normalisation)
    f = next(g for g in rep.hunt.findings if not g.signature.config)
    assert all(g.reproduced is True for g in rep.hunt.findings)
    assert f.rows <= 2 and f.tokens <= 3  # the seed: 2 x 3
    assert f.reproduced is True  # the written scenario is violated on AReaL, as `sentinel run` runs it
    return f


@pytest.mark.slow  # a real trainer's hunt (its run: test_real_targets)
@needs_areal
def test_areal_no_eos_leak_rediscovered(tmp_path):
    _areal_no_eos(TargetSpec("areal"), tmp_path)


@pytest.mark.slow  # a real trainer's hunt
@needs_areal
@pytest.mark.skipif(not os.environ.get("SENTINEL_AREAL_REPO"), reason="set SENTINEL_AREAL_REPO to an AReaL checkout")
def test_areal_head_no_eos_leak_rediscovered(tmp_path):
    _areal_no_eos(TargetSpec("areal", os.environ["SENTINEL_AREAL_REPO"]), tmp_path)
