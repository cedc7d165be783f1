"""The seed results on real trainer code, run as a user would: `sentinel run` / `compare` /
`bisect` on the catalog's scenario files.

AReaL (PyPI 1.0.4, installed by .ci/run) and verl (PyPI 0.9.1) run on every CI run. slime
has no package: set SENTINEL_SLIME_REPO to a checkout; AReaL's git HEAD: SENTINEL_AREAL_REPO.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SEEDS = Path(__file__).resolve().parents[1] / "scenarios" / "seeds"
FINDINGS = SEEDS.parent / "findings"
SLIME = os.environ.get("SENTINEL_SLIME_REPO")
AREAL_REPO = os.environ.get("SENTINEL_AREAL_REPO")
needs_slime = pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")
needs_areal = pytest.mark.skipif(importlib.util.find_spec("areal") is None,
                                 reason="areal is not installed (pip install '.[areal]' && pip install --no-deps areal==1.0.4)")
needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                                reason="verl is not installed (pip install '.[verl]' && pip install --no-deps verl==0.9.1)")


def sentinel(*args: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", *args, "-o", "-", "--json"], capture_output=True, text=True)
    assert p.stdout, p.stderr
    return p.returncode, json.loads(p.stdout)


def result(report: dict, scenario: str, target: str | None = None) -> dict:
    return next(r for r in report["results"] if r["id"] == scenario and (target is None or r["target"] == target))


def inv(res: dict, family: str, output: str | None = None) -> dict:
    return next(i for i in res["invariants"] if i["family"] == family
                and (output is None or next(iter(i["config"].values())).get("output") == output))


def _no_eos_shift(code: int, rep: dict) -> None:
    assert code == 1
    r = result(rep, "no-eos-outlier-reward-norm")
    assert r["verdict"] == "violated"
    i = inv(r, "unchanged_under")
    assert i["positions"] == [[0, 1]]  # row 0 (has EOS), its trained token
    assert i["difference"][0][1] == pytest.approx(-49.5)
    assert r["function"]["qualname"].endswith("compute_advantages")


@needs_areal
def test_areal_pypi_no_eos_leak():
    _no_eos_shift(*sentinel("run", str(SEEDS / "no-eos-outlier-reward-norm.yaml"), "--target", "areal"))


@pytest.mark.slow  # a real trainer; test_areal_pypi_no_eos_leak stays in the default set
@needs_areal
def test_areal_decoupled_loss_has_no_behaviour_weight_without_rejection_sampling():
    code, rep = sentinel("run", str(FINDINGS / "decoupled-loss-behaviour-weight.yaml"), "--target", "areal")
    r = result(rep, "decoupled-loss-behaviour-weight")
    assert code == 1 and r["verdict"] == "violated"
    assert "weights" not in r["observations"]  # no behave_imp_weight at all
    pg = inv(r, "close", "pg_loss")
    # what AReaL trains on: the unweighted PPO surrogate against the proximal policy
    assert pg["observed"][0][0] == pytest.approx(-0.5 * math.exp(0.05), abs=1e-6)
    assert pg["expected"][0][0] == pytest.approx(-0.5 * math.exp(0.05) * math.exp(0.15), abs=1e-6)
    assert inv(r, "detached")["verdict"] == "skipped"


@pytest.mark.slow  # a real trainer; test_areal_pypi_no_eos_leak stays in the default set
@needs_areal
def test_areal_single_trajectory_ref_logp_mutated_in_place():
    code, rep = sentinel("run", str(FINDINGS / "single-trajectory-ref-logp-mutated.yaml"),
                         str(SEEDS / "ppo-kl-metric-aliasing.yaml"), "--target", "areal")
    one = inv(result(rep, "single-trajectory-ref-logp-mutated"), "unmutated")
    assert one["verdict"] == "violated" and one["positions"] == [[0, 2]]  # the masked token, zeroed
    assert one["observed"][0][2] == 0.0 and one["expected"][0][2] == pytest.approx(-0.4)
    # two trajectories: AReaL works on a concatenated copy and the caller's tensor survives
    assert inv(result(rep, "ppo-kl-metric-aliasing"), "unmutated")["verdict"] == "held"


@pytest.mark.slow  # the checkout's run; test_adapter_areal checks the checkout in the default set
@needs_areal
@pytest.mark.skipif(not AREAL_REPO, reason="set SENTINEL_AREAL_REPO to an AReaL checkout")
def test_areal_head_no_eos_leak():
    code, rep = sentinel("run", str(SEEDS / "no-eos-outlier-reward-norm.yaml"), "--target", "areal", "--repo", AREAL_REPO)
    _no_eos_shift(code, rep)
    assert rep["targets"]["areal"]["commit"]


@needs_verl
def test_verl_findings_reproduce():
    code, rep = sentinel("run", str(FINDINGS), "--target", "verl")
    verdicts = {r["id"]: r["verdict"] for r in rep["results"]}
    assert verdicts == {"gae-nan-at-masked-position": "violated", "reinforce-pp-nan-masked-kl": "violated",
                        "grpo-rejected-row-in-group-stats": "violated", "seq-mean-loss-nan-masked": "violated",
                        "grpo-unequal-group-sizes": "holds", "token-mean-counts-masked-sample": "holds",
                        "masked-token-nan-reaches-loss": "holds", "decoupled-loss-behaviour-weight": "unsupported",
                        "single-trajectory-ref-logp-mutated": "holds",
                        # verl's masked_whiten selects; its approx-KL metric is old - new
                        "whiten-nan-at-masked-position": "holds", "areal-approx-kl-sign": "holds",
                        "gae-interior-hole-discount": "holds", "grpo-loss-counts-masked-rows": "violated",
                        "gspo-seq-ratio-nan-masked": "violated",
                        # verl 0.9.1's wheel ships no workers/actor (the checkout's verl: tests/test_actor_verl.py)
                        "verl-fused-ulysses-label-roll": "unsupported", "verl-fused-vlm-ulysses-labels": "unsupported",
                        # k1's ratio bounds taken as bounds of 1 / ratio (verl PR #6377)
                        "verl-k1-rejection-ratio-bounds": "violated"}
    assert code == 1


@needs_slime
def test_slime_head_seeds():
    code, rep = sentinel("run", str(SEEDS), str(SEEDS.parent / "is_correction"), "--target", "slime", "--repo", SLIME)
    opsm = result(rep, "opsm-mixed-advantage")
    assert opsm["verdict"] == "violated"
    assert opsm["observations"]["opsm_mask"] == [[0.0, 1.0, 0.0]]
    assert opsm["observations"]["reduced_policy_loss"] == pytest.approx(-0.030656620860099792, abs=1e-12)
    assert opsm["observations"]["opsm_clipfrac"] == pytest.approx(0.6666667, abs=1e-6)
    assert inv(opsm, "sequence_uniform")["positions"] == [[0, 1]]
    assert opsm["function"]["qualname"] == "compute_opsm_mask"
    # the reduced loss is slime's own: loss_function -> policy_loss_function on logits
    assert [a["qualname"] for a in opsm["function"]["also"]] == ["loss_function", "policy_loss_function"]
    # no off-policy IS hook at HEAD; slime's own TIS / IcePop weights are checked for detachment
    ois = result(rep, "off-policy-is-correction")
    assert ois["verdict"] == "unsupported" and "off_policy_is" in ois["reason"]
    for sid in ("vanilla-tis-detached", "icepop-detached"):
        r = result(rep, sid)
        assert r["verdict"] == "holds" and inv(r, "detached")["verdict"] == "held", r["reason"]
    assert "megatron" in rep["targets"]["slime"]["stubs"]


@needs_slime
def test_slime_kl_aliasing_compare_fixed():
    code, rep = sentinel("compare", str(SEEDS / "ppo-kl-metric-aliasing.yaml"), "--target", "slime", "--repo", SLIME,
                         "--base", "045310b2b^", "--head", "045310b2b")
    assert code == 0
    assert rep["comparisons"][0]["verdict"] == "fixed"
    base = result(rep, "ppo-kl-metric-aliasing", "base")
    # before the fix the logged KL is the shaped reward: -kl_coef * kl, + reward at the response's
    # last token, k[-1] (the whole row reaches slime: in row 1 that is the masked third position)
    kl = [[0.1, -0.2, 0.2], [-0.1, 0.2, 0.0]]
    shaped = [[-0.05 * k for k in row] for row in kl]
    shaped[0][2] += 1.0
    shaped[1][2] += 0.5
    flat = lambda x: [v for row in x for v in row]  # noqa: E731
    assert flat(base["observations"]["logged_kl"]) == pytest.approx(flat(shaped), abs=1e-6)
    head = result(rep, "ppo-kl-metric-aliasing", "head")
    assert flat(head["observations"]["logged_kl"]) == pytest.approx(flat(kl), abs=1e-6)


@pytest.mark.slow
@needs_slime
def test_slime_bisect_lands_on_the_fix(tmp_path):
    log = tmp_path / "bisect.json"
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", "bisect", str(SEEDS / "ppo-kl-metric-aliasing.yaml"),
                        "--target", "slime", "--repo", SLIME, "--good", "045310b2b~20", "--bad", "045310b2b",
                        "-o", str(log)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    first = json.loads(log.read_text())["first"]
    assert first["commit"].startswith("045310b2b") and "preserve raw KL" in first["subject"]


@needs_slime
def test_slime_findings():
    """Through slime's own loss_function: a fully masked sample counts as one token, and a NaN
    at a masked token inside a response reaches the loss."""
    code, rep = sentinel("run", str(FINDINGS / "token-mean-counts-masked-sample.yaml"),
                         str(FINDINGS / "masked-token-nan-reaches-loss.yaml"), "--target", "slime", "--repo", SLIME)
    r = result(rep, "token-mean-counts-masked-sample")
    assert code == 1 and r["verdict"] == "violated"
    assert r["observations"]["loss"] == pytest.approx(-2 / 3)  # two valid tokens over a count of three
    assert inv(r, "gradient")["observed"][0] == pytest.approx([-1 / 3, -1 / 3])
    nan = result(rep, "masked-token-nan-reaches-loss")
    assert nan["verdict"] == "violated" and str(inv(nan, "close")["observed"]).lower() == "nan"
    assert inv(nan, "finite")["verdict"] == "violated"


@pytest.mark.slow
@needs_slime
def test_slime_per_token_loss_scale_fixed_by_pr_987(tmp_path):
    """Rediscovered through loss_function: before slime PR #987 (763f18d5b) the per-token loss
    was also divided by global_batch_size, so the gradient shrank with the batch (here / 2)."""
    code, rep = sentinel("compare", str(SEEDS.parent / "policy" / "ppo-clip.yaml"), "--target", "slime",
                         "--repo", SLIME, "--base", "763f18d5b^", "--head", "763f18d5b")
    verdicts = {c["id"]: c["verdict"] for c in rep["comparisons"]}
    assert verdicts["ppo-gradient-unclipped"] == "fixed", verdicts
    # the masked positions of ppo-clip-masked-batch reach slime (no trimming): a NaN there reaches
    # the loss on both sides (get_sum_of_sample_mean multiplies by the mask, the
    # masked-token-nan-reaches-loss finding)
    assert verdicts["ppo-clip-masked-batch"] == "still-violated" and code == 1, verdicts
    base = inv(result(rep, "ppo-gradient-unclipped", "base"), "gradient")
    assert [o * 2 for o in base["observed"][0]] == pytest.approx(base["expected"][0], abs=1e-7)
    log = tmp_path / "bisect.json"
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", "bisect", str(SEEDS.parent / "policy" / "ppo-clip.yaml"),
                        "--scenario", "ppo-gradient-unclipped", "--target", "slime", "--repo", SLIME,
                        "--good", "763f18d5b~40", "--bad", "763f18d5b", "-o", str(log)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(log.read_text())["first"]["commit"].startswith("763f18d5b")


@needs_slime
def test_slime_gspo_sequence_level_through_its_gspo_estimator():
    code, rep = sentinel("run", str(SEEDS.parent / "policy" / "gspo.yaml"), "--target", "slime", "--repo", SLIME)
    r = result(rep, "gspo-sequence-level-ratio")
    assert code == 0 and r["verdict"] == "holds", r["reason"]
    assert inv(r, "gradient")["verdict"] == "held"  # through policy_loss_function with advantage_estimator gspo
