"""Teeth: the whole catalog holds on the reference and turns `violated` on every planted bug,
through the families the plant says should catch it; and every invariant family is seen to
fail at least once (a check that cannot fail is a defect). One `run` call, all targets in
parallel workers. The whole catalog on every plant takes the better part of a minute: those
tests are slow (`pytest -m slow`, CI runs it); the seed bugs' numbers need only their own
scenario on their own plant, run in the default set."""

from __future__ import annotations

import pytest

from sentinel.catalog import catalog_path
from sentinel.invariants import REGISTRY
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths
from sentinel_adapters.reference.plants import PLANTS


@pytest.fixture(scope="module")
def catalog():
    # the reference's catalog: scenarios written for other targets alone (`targets: [trl]`) are not run on it
    return [sc for sc in load_paths([catalog_path()]) if sc.applies_to("reference")]


def _by_target(report) -> dict[str, dict]:
    by_target: dict[str, dict] = {}
    for r in report.results:
        by_target.setdefault(r.target, {})[r.id] = r
    return by_target


@pytest.fixture(scope="module")
def teeth(catalog):
    targets = [TargetSpec("reference")] + [TargetSpec("reference", plant=p) for p in PLANTS]
    report = run(catalog, targets)
    return report, _by_target(report)


# The seed bugs: each plant and the catalog scenario whose numbers are checked below.
SEEDS = {"opsm-token-level": "opsm-mixed-advantage", "reward-norm-before-no-eos": "no-eos-outlier-reward-norm",
         "kl-inplace-shaping": "ppo-kl-metric-aliasing", "is-weight-attached": "off-policy-is-correction"}


@pytest.fixture(scope="module")
def seeds(catalog):
    """The seed scenarios on the reference and on their plants (the same runner, a few scenarios)."""
    scenarios = [sc for sc in catalog if sc.id in SEEDS.values()]
    assert {sc.id for sc in scenarios} == set(SEEDS.values())
    report = run(scenarios, [TargetSpec("reference")] + [TargetSpec("reference", plant=p) for p in SEEDS])
    return report, _by_target(report)


def plant_key(name: str) -> str:
    return TargetSpec("reference", plant=name).key


@pytest.mark.slow  # the whole catalog on every plant
def test_the_catalog_holds_on_the_reference(teeth, catalog):
    _, by_target = teeth
    results = by_target["reference"]
    assert set(results) == {sc.id for sc in catalog}
    bad = {sid: (r.verdict, r.reason) for sid, r in results.items() if r.verdict != "holds"}
    assert not bad
    for r in results.values():
        assert r.invariants and all(i.verdict == "held" for i in r.invariants), r.id


@pytest.mark.slow  # the whole catalog on every plant
def test_every_target_ran_every_scenario(teeth, catalog):
    report, by_target = teeth
    assert set(by_target) == {"reference", *map(plant_key, PLANTS)}
    assert all(len(v) == len(catalog) for v in by_target.values())
    assert report.statistics.evaluated == len(catalog) * (1 + len(PLANTS))
    assert report.statistics.errors == 0 and report.statistics.unsupported == 0
    assert report.exit_code() == 1
    for name in PLANTS:
        assert report.targets[plant_key(name)].plant == name


def _violated_families(results: dict) -> set[str]:
    return {i.family for r in results.values() for i in r.invariants if i.verdict == "violated"}


def _reached(reference: dict, planted: dict) -> set[str]:
    """Scenarios the plant reaches: its base observations or an invariant verdict differ."""
    return {sid for sid, r in planted.items()
            if r.observations != reference[sid].observations
            or [i.verdict for i in r.invariants] != [i.verdict for i in reference[sid].invariants]}


@pytest.mark.slow  # the whole catalog on every plant
@pytest.mark.parametrize("name", sorted(PLANTS))
def test_every_plant_is_caught_by_the_families_it_trips(teeth, catalog, name):
    _, by_target = teeth
    planted, reference = by_target[plant_key(name)], by_target["reference"]
    violated = {sid for sid, r in planted.items() if r.verdict == "violated"}
    assert violated, f"no catalog scenario catches plant {name!r}"
    assert all(planted[sid].verdict in ("holds", "violated") for sid in planted)
    # of the families the plant names, those present in a scenario the plant reaches must fail
    reached = _reached(reference, planted)
    assert violated <= reached
    exercised = {inv.family for sc in catalog if sc.id in reached for inv in sc.invariants}
    expected = set(PLANTS[name].trips) & exercised
    assert expected, f"plant {name!r}: the catalog exercises none of {PLANTS[name].trips} where the plant reaches"
    missed = expected - _violated_families(planted)
    assert not missed, f"plant {name!r}: {sorted(missed)} held on every scenario the plant reaches"


@pytest.mark.slow  # the whole catalog on every plant
def test_every_family_is_violated_by_some_plant(teeth):
    _, by_target = teeth
    seen: set[str] = set()
    for name in PLANTS:
        seen |= _violated_families(by_target[plant_key(name)])
    assert set(REGISTRY) - seen == set(), "families no plant ever violates (checks that cannot fail)"


def test_catalog_uses_every_family_and_plants_trip_real_families(catalog):
    used = {inv.family for sc in catalog for inv in sc.invariants}
    assert set(REGISTRY) <= used
    for p in PLANTS.values():
        assert set(p.trips) <= set(REGISTRY)


# --- the seed bugs' numbers --------------------------------------------------------------

def _inv(result, family, output=None):
    for i in result.invariants:
        body = next(iter(i.config.values()))
        if i.family == family and (output is None or body.get("output") == output):
            return i
    raise AssertionError(f"{result.id} has no {family} on {output}")


def test_opsm_token_level_seed_numbers(seeds):
    _, by_target = seeds
    r = by_target[plant_key("opsm-token-level")]["opsm-mixed-advantage"]
    assert r.verdict == "violated"
    assert r.observations["opsm_mask"] == [[0.0, 1.0, 0.0]]
    assert r.observations["opsm_clipfrac"] == pytest.approx(0.6666667, abs=1e-6)
    assert r.observations["reduced_policy_loss"] == pytest.approx(-0.030656620860099792, abs=1e-9)
    su = _inv(r, "sequence_uniform")
    assert su.verdict == "violated" and su.positions == [[0, 1]]
    assert su.observed == [[0.0, 1.0, 0.0]] and su.expected == [[0.0, 0.0, 0.0]]
    eq = _inv(r, "equals", "opsm_mask")
    assert eq.verdict == "violated" and eq.positions == [[0, 1]] and eq.difference == [[0.0, 1.0, 0.0]]
    loss = _inv(r, "close", "reduced_policy_loss")
    assert loss.verdict == "violated"
    assert loss.observed == pytest.approx(-0.030656620860099792, abs=1e-9)
    assert loss.difference == pytest.approx(-0.030656620860099792, abs=1e-9)
    # and the reference gives the correct answer
    ok = by_target["reference"]["opsm-mixed-advantage"]
    assert ok.observations["opsm_mask"] == [[0.0, 0.0, 0.0]]
    assert ok.observations["reduced_policy_loss"] == 0.0
    assert ok.observations["opsm_clipfrac"] == 1.0


def test_no_eos_seed_difference_at_the_valid_row(seeds):
    _, by_target = seeds
    r = by_target[plant_key("reward-norm-before-no-eos")]["no-eos-outlier-reward-norm"]
    assert r.verdict == "violated"
    inv = _inv(r, "unchanged_under", "advantages")
    assert inv.verdict == "violated"
    assert inv.positions == [[0, 1]]  # row 0 emitted EOS; token 1 is its only trained token
    assert inv.difference[0][1] == pytest.approx(-49.5)
    assert inv.difference[0][0] == 0.0 and inv.difference[0][2] == 0.0
    assert by_target["reference"]["no-eos-outlier-reward-norm"].verdict == "holds"


def test_kl_inplace_shaping_logs_the_shaped_reward(seeds):
    _, by_target = seeds
    r = by_target[plant_key("kl-inplace-shaping")]["ppo-kl-metric-aliasing"]
    assert r.verdict == "violated"
    assert r.observations["logged_kl"] == r.observations["token_rewards"]
    assert _inv(r, "close", "logged_kl").verdict == "violated"
    ok = by_target["reference"]["ppo-kl-metric-aliasing"]
    assert ok.observations["logged_kl"] != ok.observations["token_rewards"]


def test_is_weight_attached_leaks_gradient(seeds):
    _, by_target = seeds
    r = by_target[plant_key("is-weight-attached")]["off-policy-is-correction"]
    det = _inv(r, "detached", "weights")
    assert det.verdict == "violated" and det.details["requires_grad"] is True
