"""Differential hunts: the same drawn inputs through two sides; a finding is where they differ.

Against the reference, every planted bug of `sentinel list plants` differs from the correct
math on its boundary; the reference against itself differs nowhere; a side that lacks a
config has it excluded and counted. On slime (SENTINEL_SLIME_REPO) the KL-logging fix
045310b2b and the per-token-loss fix 763f18d5b are `fixed` findings and two revisions that
do not touch the loss path give none.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from sentinel import hunt as H
from sentinel.runner import TargetSpec
from sentinel.spec import load_file
from sentinel_adapters.reference.plants import PLANTS
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS

HERE = Path(__file__).parent
REFERENCE = TargetSpec("reference")
# Plants the differential hunt cannot see, and why (each is caught by the single-target hunt).
NOT_DIFFERENTIAL = {
    "ratio-in-low-precision": "both sides are called in fp32, where the plant changes nothing; the "
                              "precision axis is drawn by the precision family's own runs only",
}
PLANT_BOUNDARY = {name: p.hunt for name, p in PLANTS.items() if name not in NOT_DIFFERENTIAL}


@pytest.fixture(scope="module")
def plant_hunts(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))

    def one(plant):  # bounded by its example count (tests/untimed.py): the same outcome under load
        return H.differential(REFERENCE, TargetSpec("reference", plant=plant), [PLANT_BOUNDARY[plant]],
                              DIFFERENTIAL_SECONDS, 0, against=True, out_dir=root / plant, first=True,
                              max_examples=400, **DIFFERENTIAL)
    with ThreadPoolExecutor(3) as pool:
        return dict(zip(PLANT_BOUNDARY, pool.map(one, PLANT_BOUNDARY)))


def test_every_plant_is_listed():
    assert set(PLANT_BOUNDARY) | set(NOT_DIFFERENTIAL) == set(PLANTS)
    assert not set(PLANT_BOUNDARY) & set(NOT_DIFFERENTIAL)


@pytest.mark.slow  # one differential hunt per plant (~40 s on a quiet machine)
@pytest.mark.parametrize("plant", sorted(PLANT_BOUNDARY))
def test_against_reference_finds_each_plant(plant_hunts, plant):
    rep = plant_hunts[plant]
    f, = rep.hunt.findings
    assert f.boundary == PLANT_BOUNDARY[plant] and f.classification in ("bug", "changed"), f
    assert f.reproduced is True  # `sentinel run FILE --target reference --plant P` is violated, the reference holds
    sc, = load_file(f.file)
    assert "differential" in sc.tags and f"--plant {plant}" in sc.provenance[1]
    assert rep.hunt.differential.against_reference and rep.hunt.differential.compared > 0


def test_reference_against_itself_differs_nowhere(tmp_path):
    rep = H.differential(REFERENCE, REFERENCE, ["kl", "policy_loss", "advantages"], DIFFERENTIAL_SECONDS, 0,
                         out_dir=tmp_path, max_examples=100, **DIFFERENTIAL)
    assert rep.hunt.findings == [] and rep.exit_code() == 0
    assert rep.hunt.differential.compared > 0 and rep.hunt.differential.differing == 0
    assert set(rep.targets) == {"base:reference", "head:reference"}  # one key each, though both are the same
    for p in rep.hunt.properties:  # progress over time: a sample at each round's start and end
        assert len(p.progress) == 2 * p.rounds and p.progress[-1].examples == p.examples


# A difference a differential hunt found on GSPO, shrunk: one partially masked row whose valid
# tokens carry different advantages (the hunt draws per-token advantages). The classifier asks
# each side which properties it violates there; the reference's GSPO-token loss follows the
# per-token advantage (arXiv 2507.18071 eq. 13), so policy_loss.sequence_uniform, whose claim
# is for one advantage per sequence, called it a "reference-bug".
GSPO_PARTIAL_ROW = dict(
    config={"eps_clip": 0.2, "eps_clip_high": None, "eps_clip_c": None, "loss_agg": "token-mean",
            "importance_sampling_level": "sequence"},
    inputs={"log_probs": [[-1.0, -0.5, -0.25]], "old_log_probs": [[-1.0, -0.5, -0.25]],
            "advantages": [[0.0, 0.5, -0.5]], "loss_mask": [[0.0, 1.0, 1.0]]})


def test_the_reference_violates_no_property_where_a_differential_hunt_asks():
    import torch
    from sentinel.hunt.properties import select
    from sentinel.hunt.worker.session import _properties
    from sentinel.strategies import Example
    from sentinel_adapters.reference.adapter import ReferenceAdapter
    ex = Example("policy_loss", GSPO_PARTIAL_ROW["config"],
                 {n: np.asarray(v, np.float32) for n, v in GSPO_PARTIAL_ROW["inputs"].items()})
    names = [p.name for p in select(["policy_loss"]) if p.admits(ex.config)]  # what _classify asks
    assert "policy_loss.sequence_uniform" in names
    verdicts = _properties(ReferenceAdapter(device=torch.device("cpu")), torch.device("cpu"), ex, names)
    assert {n: v for n, v in verdicts.items() if v["verdict"] != "held"} == {}
    assert "policy_loss.sequence_uniform" not in verdicts  # outside its claim: not checked at all


@pytest.mark.slow  # a differential hunt; one stays in the default set
def test_a_config_one_side_lacks_is_excluded_and_counted(tmp_path):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rep = H.differential(REFERENCE, TargetSpec("hunt_crash_adapter:CrashAdapter"), ["kl"], DIFFERENTIAL_SECONDS, 0,
                         out_dir=tmp_path, max_examples=100, **DIFFERENTIAL)
    d = rep.hunt.differential
    assert d.excluded_config == {"base": {}, "head": {"kl": {"kl_type": ["k2", "k3", "low_var_kl", "k1+", "k3+"]}}}
    assert rep.hunt.findings == [] and d.compared > 0


@pytest.mark.slow  # a differential hunt
def test_a_refused_default_choice_is_excluded(tmp_path):
    # slime's is_correction has no method off_policy_is, the default: it was never excluded (only
    # other choices were probed), and Hypothesis draws a first choice most: 131 of 143 rejected
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    side = TargetSpec("hunt_crash_adapter:NoDefaultAdapter")
    rep = H.differential(side, side, ["kl"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, max_examples=100,
                         **DIFFERENTIAL)
    d, p = rep.hunt.differential, rep.hunt.properties[0]
    assert d.excluded_config == {"base": {"kl": {"kl_type": ["k1"]}}, "head": {"kl": {"kl_type": ["k1"]}}}
    assert rep.hunt.findings == [] and p.examples == 100 and p.rejected == 0


@pytest.mark.slow  # a differential hunt
def test_a_default_refused_on_one_side_only_leaves_a_choice_to_draw(tmp_path):
    # base lacks k1 (the default) and head has only k1: excluding k1 for base's sake too left kl_type
    # no choice at all, and Hypothesis raised on sampling from nothing (an OpenRLHF mutant's hunt)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rep = H.differential(TargetSpec("hunt_crash_adapter:NoDefaultAdapter"), TargetSpec("hunt_crash_adapter:CrashAdapter"),
                         ["kl"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, max_examples=20, **DIFFERENTIAL)
    assert rep.hunt.differential.excluded_config["base"] == {} and rep.hunt.findings == []


@pytest.mark.slow  # a differential hunt
def test_a_choice_refused_alone_and_in_pairs_is_drawn_where_a_whole_config_runs_it(tmp_path):
    # slime's reward normalisation divides by the group std only beside the group mean and eps 1e-6:
    # tried alone and beside one other change, std_level=group was excluded from every slime hunt
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    side = TargetSpec("hunt_crash_adapter:JointAdapter")
    rep = H.differential(side, side, ["reward_norm"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, max_examples=100,
                         **DIFFERENTIAL)
    d = rep.hunt.differential
    assert "group" not in d.excluded_config["base"].get("reward_norm", {}).get("std_level", [])
    assert rep.hunt.findings == [] and d.compared > 0


def test_a_refused_choice_is_tried_in_whole_configs_the_same_in_every_run():
    from sentinel.hunt.probe import BESIDE, beside
    small = {"mean_level": ["batch", "group", None], "std_level": ["batch", "group", None], "eps": [1e-05, 1e-06]}
    got = beside("reward_norm", small, "std_level", "group")  # 3 x 2 others: every one of them
    assert len(got) == 6 and {"mean_level": "group", "std_level": "group", "eps": 1e-06} in got
    big = {f"k{i}": [0, 1, 2] for i in range(6)} | {"trainer:opt": [False, True]}
    first, again = beside("policy_loss", big, "k0", 2), beside("policy_loss", big, "k0", 2)
    assert len(first) == BESIDE and first == again and all(c["k0"] == 2 for c in first)
    assert all(c.get("trainer:opt", True) is True for c in first)  # a trainer option at its default is left unset


def test_a_vocab_gradient_is_compared_at_valid_positions_only():
    """grad:log_probs/logits is [B, T, V]: a masked position's V values are not compared (the
    reference zeroes a masked log-prob, a trainer may not; neither trains on it)."""
    from sentinel.hunt import differences as D
    from sentinel.strategies import Example
    mask = np.array([[1, 0]], np.float32)
    ex = Example("logprobs", {"temperature": 1.0}, {"logits": np.zeros((1, 2, 3), np.float32),
                                                    "tokens": np.zeros((1, 2), np.int64), "loss_mask": mask})
    ga, gb = np.zeros((1, 2, 3)), np.zeros((1, 2, 3))
    gb[0, 1] = [0.5, -0.5, np.nan]  # differs only at the masked position
    answer = lambda g: {"status": "ok", "grads": {"log_probs/logits": g}, "outputs": {}, "inputs_after": {}}  # noqa: E731
    assert D.differences("logprobs", ex, answer(ga), answer(gb)) == []
    gb[0, 0, 2] = 1.0  # and at a valid one
    d, = D.differences("logprobs", ex, answer(ga), answer(gb))
    assert d.observable == "grad:log_probs/logits" and d.positions == [[0, 0, 2]]


# --- slime revisions --------------------------------------------------------------------------

SLIME = os.environ.get("SENTINEL_SLIME_REPO")
needs_slime = pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a clone of THUDM/slime with history")


def _has(rev: str) -> bool:
    return subprocess.run(["git", "-C", SLIME, "rev-parse", "--verify", "-q", rev + "^{commit}"],
                          capture_output=True).returncode == 0


@pytest.mark.slow
@needs_slime
@pytest.mark.parametrize("fix, boundary, prop", [("045310b2b", "advantages", "advantages.logged_kl"),
                                                 ("763f18d5b", "policy_loss", "policy_loss.gradient")])
def test_slime_fix_is_a_fixed_finding(tmp_path, fix, boundary, prop):
    if not _has(fix):
        pytest.skip(f"SENTINEL_SLIME_REPO has no commit {fix}")
    rep = H.differential(TargetSpec("slime", SLIME, f"{fix}^"), TargetSpec("slime", SLIME, fix), [boundary],
                         DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, first=True, max_examples=400, **DIFFERENTIAL)
    f, = rep.hunt.findings
    # slime's returned rollout data holds the same logged KL (an extra): the output is found first
    assert not f.signature.observable.startswith(("returned:", "config:")), f.signature
    assert f.classification == "fixed" and prop in f.base.violates and prop not in f.head.violates
    assert f.reproduced is True  # `sentinel compare FILE --base B --head H`: fixed
    base, head = rep.hunt.differential.base, rep.hunt.differential.head
    assert base.endswith(rep.targets[base].commit[:12]) and rep.targets[base].commit != rep.targets[head].commit


@pytest.mark.slow
@needs_slime
def test_slime_commit_off_the_loss_path_differs_nowhere(tmp_path):
    # 624b824a8 "[NFC] Add observability subfolder": moves code out of cp_utils.py and rollout.py
    # (loss-path files) without changing what the loss path computes
    if not _has("624b824a8"):
        pytest.skip("SENTINEL_SLIME_REPO has no commit 624b824a8")
    rep = H.differential(TargetSpec("slime", SLIME, "624b824a8^"), TargetSpec("slime", SLIME, "624b824a8"),
                         ["policy_loss", "advantages", "opsm_mask"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path,
                         max_examples=150, **DIFFERENTIAL)
    assert rep.hunt.findings == [] and rep.hunt.differential.compared > 100


# --- the command line refuses what cannot run, before any work ------------------------------

def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    import sys
    return subprocess.run([sys.executable, "-m", "sentinel.cli", "hunt", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize("args, says", [
    (["--base", "HEAD"], "needs both --base REV and --head REV"),
    (["--head", "HEAD"], "needs both --base REV and --head REV"),
    (["--target", "slime", "--base", "HEAD^", "--head", "HEAD"], "give the checkout with --repo"),
    (["--repo", str(HERE.parent), "--base", "HEAD^", "--head", "HEAD"], "the reference has no revisions"),
    (["--against", "verl-main"], "the one side to hunt against is `reference`"),
    (["--against", "reference"], "needs a --target other than the reference"),
    (["--time", "0"], "--time 0: give the seconds of search"),
    (["-b", "kl", "-c", "kl_coef=0.1"], "no option 'kl_coef' on the hunted boundaries"),
])
def test_refused_with_a_reason(args, says, monkeypatch):
    # in this process (Typer's CliRunner): a refusal starts no worker, so a subprocess would only
    # add an interpreter start; one that raises fails here instead of reading as an exit code.
    # The hunt command sets HYPOTHESIS_STORAGE_DIRECTORY for its workers: undone afterwards.
    from typer.testing import CliRunner

    from sentinel.cli import app
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    p = CliRunner().invoke(app, ["hunt", *args], catch_exceptions=False)
    assert p.exit_code == 2 and says in p.stderr, p.stderr


@pytest.mark.slow  # a differential hunt; one stays in the default set
def test_a_yaml_1_2_number_pins_a_config(tmp_path):
    # 1e-3 is a number in a scenario file (YAML 1.2), and so in --config; nothing is left in the folder
    p = _cli("-b", "advantages", "-c", "kl_coef=1e-3", "--time", "1", "-n", "5", "--no-db", "-o", "-",
             "--out", str(tmp_path / "out"), "--json", cwd=tmp_path)
    # accepted (not 2); whether one second of search decides a property (0) or none (5) is the machine's
    assert p.returncode in (0, 5), p.stderr
    assert not (tmp_path / ".hypothesis").exists()


def test_a_worktree_head_replays_as_worktree():
    """The replay command of a `--head WORKTREE` finding names WORKTREE, not the HEAD commit
    under it (which would compare a commit with itself)."""
    from types import SimpleNamespace as NS
    from sentinel.hunt.driver.findings import _replay_command
    base = NS(spec=TargetSpec("slime", "/r", "abc"), target=NS(commit="a" * 40))
    head = NS(spec=TargetSpec("slime", "/r", None), target=NS(commit="a" * 40))
    cmd = _replay_command("f.yaml", base, head, against=False)
    assert cmd.endswith(f"--base {'a' * 40} --head WORKTREE"), cmd
