"""The slime adapter against a real slime checkout.

Set SENTINEL_SLIME_REPO to a git clone of https://github.com/THUDM/slime (full history) to
run these; without it every test is skipped. One interpreter holds one slime version, so
each adapter load runs in a fresh `python -c` subprocess that prints JSON; other commits
are checked out into temporary git worktrees under tmp_path and removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ENV = "SENTINEL_SLIME_REPO"
SLIME_REPO = os.environ.get(REPO_ENV)
pytestmark = pytest.mark.skipif(
    not SLIME_REPO, reason=f"{REPO_ENV} is not set (point it at a git clone of THUDM/slime)")

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
KL_FIX = "045310b2b"  # fix(ppo): preserve raw KL so rollout/kl logging is correct (#2114)
OLD_SIGNATURES = "c7bb60ce4^"  # before GSPO support: compute_policy_loss(log_probs, old_logprobs, ...)

# Prelude of every subprocess: import the adapter (installed, or served from adapters/),
# load slime from ROOT, and give the body a `call` that never raises for Unsupported.
PRELUDE = """
import json, os, sys
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
try:
    import sentinel_adapters  # noqa: F401
except ImportError:
    import importlib.machinery, importlib.util
    _spec = importlib.machinery.ModuleSpec("sentinel_adapters", None, is_package=True)
    _spec.submodule_search_locations = [ADAPTERS]
    sys.modules["sentinel_adapters"] = importlib.util.module_from_spec(_spec)
import torch
from pathlib import Path
from sentinel.errors import Unsupported
from sentinel_adapters.slime import SlimeAdapter

T = torch.tensor
adapter = SlimeAdapter(Path(ROOT), torch.device("cpu"))
out = {"load": adapter.load()}


def plain(v):
    return v.detach().tolist() if isinstance(v, torch.Tensor) else v


def call(boundary, inputs, config):
    try:
        res = adapter.call(boundary, inputs, config)
    except Unsupported as e:
        return {"unsupported": str(e)}
    return {"outputs": {k: plain(v) for k, v in res.outputs.items()},
            "requires_grad": {k: bool(getattr(v, "requires_grad", False)) for k, v in res.outputs.items()},
            "function": res.function.as_dict() if res.function else None, "res": res}
"""


def start_slime(root: Path | str, body: str) -> subprocess.Popen:
    """A fresh interpreter that loads slime from `root`, runs `body` and prints `out` as JSON."""
    code = f"ROOT = {str(root)!r}\nADAPTERS = {str(ADAPTERS)!r}\n{PRELUDE}\n{body}\n" \
           "for v in out.values():\n    v.pop('res', None) if isinstance(v, dict) else None\n" \
           "print('@@' + json.dumps(out))\n"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_slime(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-4000:]
    line = next(x for x in reversed(stdout.splitlines()) if x.startswith("@@"))
    return json.loads(line[2:])


def run_slime(root: Path | str, body: str) -> dict:
    return finish_slime(start_slime(root, body))


def flat(x) -> list[float]:
    return [v for row in x for v in row]


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", SLIME_REPO, *args], capture_output=True, text=True)


@pytest.fixture
def worktree(tmp_path):
    """Factory: a detached worktree of SLIME_REPO at a revision, removed after the test."""
    made = []

    def make(rev: str) -> Path:
        if git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode != 0:
            pytest.skip(f"{REPO_ENV} has no commit {rev} (a shallow or older clone?)")
        path = tmp_path / ("slime-" + rev.replace("^", "-parent").replace("~", "-"))
        done = git("worktree", "add", "--detach", str(path), rev)
        assert done.returncode == 0, done.stderr
        made.append(path)
        return path

    yield make
    for path in made:
        git("worktree", "remove", "--force", str(path))
    git("worktree", "prune")


# --- HEAD: one subprocess, many calls --------------------------------------------------

HEAD_BODY = """
opsm_inputs = {"log_probs": T([[0.0, 0.0, 0.0]]), "old_log_probs": T([[1.0, 1.0, 1.0]]),
               "advantages": T([[-0.5, 0.25, -0.25]]), "loss_mask": T([[1.0, 1.0, 1.0]])}
out["opsm"] = call("opsm_mask", opsm_inputs, {"opsm_delta": 0.1, "eps_clip": 0.2, "eps_clip_high": 0.2})

lp = T([[-1.0, -0.5, -0.2, 9.0], [0.0, -0.3, -0.6, -0.9]], requires_grad=True)
tis_inputs = {"log_probs": lp, "old_log_probs": T([[-1.1, -0.4, -0.3, 0.0], [0.0, -0.2, -0.7, -1.0]]),
              "rollout_log_probs": T([[-0.2, -0.4, -2.0, 0.0], [0.0, -0.1, -0.6, -3.0]]),
              "advantages": T([[1.0, -1.0, 0.5, 7.0], [0.0, 2.0, -1.0, 1.0]]),
              "loss_mask": T([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])}
for method in ("vanilla_tis", "icepop", "off_policy_is"):
    r = call("is_correction", tis_inputs, {"method": method, "tis_clip_low": 0.5, "tis_clip": 2.0})
    if "res" in r:
        g = torch.autograd.grad(r["res"].outputs["loss"], lp)[0]
        r["grad_log_probs"] = g.tolist()
        r["inputs_after"] = {k: v.tolist() for k, v in r["res"].inputs_after.items()}
    out["is_" + method] = r
r = call("policy_loss", tis_inputs, {"eps_clip": 0.2, "eps_clip_c": 3.0})
r["grad_log_probs"] = torch.autograd.grad(r["res"].outputs["loss"], lp)[0].tolist()
out["policy_loss"] = r
out["kl_k3"] = call("kl", {"log_probs": T([[0.5, -0.5, 0.0]]), "ref_log_probs": T([[0.0, 0.0, 0.0]]),
                           "loss_mask": T([[1.0, 1.0, 0.0]])}, {"kl_type": "k3"})
adv_inputs = {"rewards": T([1.0, 0.0]), "loss_mask": T([[1.0, 1.0], [1.0, 1.0]]),
              "values": T([[0.0, 0.0], [0.0, 0.0]])}
out["no_eos"] = call("advantages", adv_inputs, {"estimator": "gae", "mask_no_eos_with_zero": True})
out["reward_norm_cfg"] = call("advantages", adv_inputs, {"estimator": "grpo", "reward_norm": {"mean_level": "group"}})
out["grpo"] = call("advantages", {**adv_inputs, "rewards": T([1.0, 0.0, 3.0, 3.0]), "group": T([7, 7, 2, 2]),
                                  "loss_mask": T([[1.0, 1.0]] * 4)}, {"estimator": "grpo"})
# drawn trainer options on advantages: OPD's reverse-KL penalty (ref_log_probs as the teacher's),
# and --disable-rewards-normalization
opd_inputs = {"rewards": T([1.0, 0.0]), "log_probs": T([[-0.1, -0.2], [-0.3, -0.2]]),
              "ref_log_probs": T([[-0.2, -0.2], [-0.3, -0.1]]), "loss_mask": T([[1.0, 1.0], [1.0, 1.0]])}
for name, cfg in (("opd_off", {}), ("opd", {"trainer:use_opd": True}),
                  ("opd_half", {"trainer:use_opd": True, "trainer:opd_kl_coef": 0.5})):
    r = call("advantages", opd_inputs, {"estimator": "reinforce_plus_plus", **cfg})
    r["extras"] = sorted(r["res"].extras)
    out[name] = r
out["raw_rewards"] = call("advantages", {**adv_inputs, "rewards": T([1.0, 0.0, 3.0, 3.0]), "group": T([7, 7, 2, 2]),
                                         "loss_mask": T([[1.0, 1.0]] * 4)},
                          {"estimator": "grpo", "trainer:rewards_normalization": False})
# the actor's on-policy reuse: no old log-probs in the batch, the current ones (detached) stand in
for name, cfg in (("own_old", {}), ("reused_old", {"trainer:can_reuse_log_probs_in_loss": True})):
    lp = T([[-1.0, -0.5, -0.2], [-0.3, -0.6, -0.9]], requires_grad=True)
    reuse_inputs = {"log_probs": lp, "old_log_probs": T([[-1.1, -0.4, -0.3], [-0.2, -0.7, -1.0]]),
                    "advantages": T([[1.0, -1.0, 0.5], [2.0, -1.0, 1.0]]),
                    "loss_mask": T([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])}
    r = call("policy_loss", reuse_inputs, {"eps_clip": 0.2, **cfg})
    r["grad_log_probs"] = torch.autograd.grad(r["res"].outputs["loss"], lp)[0].tolist()
    out[name] = r
# the forward-only log-prob pass: with_entropy False
lp_inputs = {"logits": T([[[0.5, -1.0, 2.0], [0.0, 0.3, -0.2]]]), "tokens": T([[2, 1]]), "loss_mask": T([[1.0, 1.0]])}
out["with_entropy"] = call("logprobs", lp_inputs, {})
out["without_entropy"] = call("logprobs", lp_inputs, {"trainer:with_entropy": False})
out["top_p"] = call("logprobs", lp_inputs, {"trainer:rollout_top_p": 0.5})  # the rollout's nucleus replayed
import tempfile
from sentinel.errors import TargetLoadError
try:
    SlimeAdapter(Path(tempfile.mkdtemp()), torch.device("cpu")).load()
except TargetLoadError as e:
    out["bad_root"] = str(e)
out["seq_sum"] = call("loss_agg", {"values": T([[1.0, 2.0]]), "loss_mask": T([[1.0, 1.0]])},
                      {"mode": "seq-mean-token-sum"})
# the surfaces' modules (observability.train_metric_utils) are imported on first use
out["metrics"] = call("metrics", {"log_probs": T([[-0.25, -1.5]]), "old_log_probs": T([[-0.5, -1.0]]),
                                  "advantages": T([[1.0, 1.0]]), "loss_mask": T([[1.0, 1.0]])}, {})
from sentinel.adapters.binding import resolve
out["unresolved"] = sorted(c for row in SlimeAdapter.mapping().values() for c in row["calls"] if resolve(c) is None)
"""


@pytest.fixture(scope="module")
def head():
    return run_slime(SLIME_REPO, HEAD_BODY)


def test_load_facts(head):
    facts = head["load"]
    assert facts["eager"] is True
    assert "megatron.core.mpu" in facts["stubs"]
    assert "slime/utils/ppo_utils.py" in facts["module_files"]
    assert "slime/backends/megatron_utils/loss.py" in facts["module_files"]
    assert all(not f.startswith("/") for f in facts["module_files"])
    assert facts["version"] and facts["version"] != "unknown"


def test_opsm_seed_reproduced_at_head(head):
    """PR #1917's trigger: the token-wise OPSM decision leaks position 1 of a rejected sequence."""
    r = head["opsm"]
    out = r["outputs"]
    assert out["opsm_mask"] == [[0.0, 1.0, 0.0]]
    assert out["opsm_clipfrac"] == pytest.approx(0.6666667, abs=1e-7)
    assert abs(out["reduced_policy_loss"] - (-0.030656620860099792)) < 1e-9
    assert out["pg_loss"][0][1] == pytest.approx(-0.09196986258029938, abs=1e-9)
    assert r["function"]["qualname"] == "compute_opsm_mask"
    assert r["function"]["file"] == "slime/utils/ppo_utils.py"


def test_is_correction_weights_detached_and_masked_grads(head):
    import math
    for method in ("vanilla_tis", "icepop"):
        r = head["is_" + method]
        assert r["function"]["qualname"] == method + "_function"
        assert [a["qualname"] for a in r["function"]["also"]] == ["loss_function", "policy_loss_function"]
        assert r["requires_grad"]["weights"] is False and r["requires_grad"]["loss"] is True
        # masked positions (row 0 col 3, row 1 col 0) get no gradient
        assert r["grad_log_probs"][0][3] == 0.0 and r["grad_log_probs"][1][0] == 0.0
        # the adapter hands slime copies: inputs come back unchanged
        assert flat(r["inputs_after"]["log_probs"]) == pytest.approx([-1.0, -0.5, -0.2, 9.0, 0.0, -0.3, -0.6, -0.9])
    w = head["is_vanilla_tis"]["outputs"]["weights"][0]
    # exp(old - rollout) = [e^-0.9, 1, e^1.7]: clipped into [tis_clip_low 0.5, tis_clip 2.0]
    assert w[:3] == pytest.approx([0.5, 1.0, 2.0])
    assert head["is_vanilla_tis"]["outputs"]["weights"][1][1:] == pytest.approx([math.exp(-0.1), math.exp(-0.1), 2.0])
    assert head["is_icepop"]["outputs"]["weights"][0][2] == 0.0  # ratio e^1.7 > 2: popped
    assert "off_policy_is_function" in head["is_off_policy_is"]["unsupported"]


def test_policy_loss_and_kl(head):
    r = head["policy_loss"]
    assert r["function"]["qualname"] == "compute_policy_loss"
    also = {a["qualname"]: a["file"] for a in r["function"]["also"]}
    assert also == {"loss_function": "slime/backends/megatron_utils/loss.py",
                    "policy_loss_function": "slime/backends/megatron_utils/loss.py"}
    assert r["grad_log_probs"][0][3] == 0.0
    k3 = head["kl_k3"]["outputs"]["kl"][0]
    import math
    assert k3[0] == pytest.approx(math.exp(-0.5) - 1 + 0.5, abs=1e-6)
    assert k3[2] == 0.0  # masked position is padding in slime's per-sample layout


def test_unsupported_configs(head):
    assert "mask_no_eos_with_zero" in head["no_eos"]["unsupported"]
    assert "reward_norm" in head["reward_norm_cfg"]["unsupported"]
    assert "seq-mean-token-sum" in head["seq_sum"]["unsupported"]


def test_grpo_group_normalisation(head):
    """grpo runs slime's RolloutManager._post_process_rewards, then compute_advantages_and_returns."""
    adv = head["grpo"]["outputs"]["advantages"]
    # group {1, 0}: (r - 0.5) / (std 0.7071 + 1e-6); group {3, 3}: 0
    assert adv[0][0] == pytest.approx(0.5 / (0.5 ** 0.5 + 1e-6), abs=1e-5)
    assert adv[1][1] == pytest.approx(-adv[0][0])
    assert adv[2] == [0.0, 0.0] and adv[3] == [0.0, 0.0]


def test_drawn_opd_penalises_the_advantages(head):
    """trainer:use_opd: advantages - opd_kl_coef * (log_probs - teacher), the teacher being the
    reference log-probs; the reverse KL kept for logging."""
    assert head["opd_off"]["outputs"]["advantages"] == [[1.0, 1.0], [0.0, 0.0]]
    assert flat(head["opd"]["outputs"]["advantages"]) == pytest.approx([0.9, 1.0, 0.0, 0.1], abs=1e-6)
    assert flat(head["opd_half"]["outputs"]["advantages"]) == pytest.approx([0.95, 1.0, 0.0, 0.05], abs=1e-6)
    assert "returned:rollout_data.opd_reverse_kl" in head["opd"]["extras"]
    assert "returned:rollout_data.opd_reverse_kl" not in head["opd_off"]["extras"]


def test_drawn_rewards_normalization_off_keeps_raw_rewards(head):
    """trainer:rewards_normalization False (--disable-rewards-normalization): grpo on the raw rewards."""
    adv = head["raw_rewards"]["outputs"]["advantages"]
    assert [row[0] for row in adv] == pytest.approx([1.0, 0.0, 3.0, 3.0])


def test_drawn_reuse_of_the_loss_pass_log_probs(head):
    """trainer:can_reuse_log_probs_in_loss: the batch has no old log-probs, slime takes the current
    ones detached: ratio 1, so the loss is minus the mean advantage over the 5 valid tokens
    (token-mean, the default loss_agg) and its gradient -A / 5; the drawn old_log_probs go unread."""
    reused, own = head["reused_old"], head["own_old"]
    assert reused["outputs"]["loss"] == pytest.approx(-0.5 / 5, abs=1e-6)
    assert reused["grad_log_probs"][0] == pytest.approx([-0.2, 0.2, -0.1], abs=1e-6)
    assert reused["grad_log_probs"][1] == pytest.approx([0.0, 0.2, -0.2], abs=1e-6)
    assert own["outputs"]["loss"] != pytest.approx(reused["outputs"]["loss"], abs=1e-4)


def test_drawn_with_entropy_off_is_the_forward_only_pass(head):
    """trainer:with_entropy False: the same log-probs, no entropy returned."""
    on, off = head["with_entropy"]["outputs"], head["without_entropy"]["outputs"]
    assert "entropy" in on and "entropy" not in off
    assert flat(off["log_probs"]) == pytest.approx(flat(on["log_probs"]))


def test_drawn_rollout_top_p_replays_the_nucleus(head):
    """trainer:rollout_top_p 0.5: log-probs renormalised over the nucleus (position 0 keeps token 2
    alone: log-prob 0; position 1 keeps tokens 1 and 0), entropy over the whole vocabulary."""
    import math
    on, top = head["with_entropy"]["outputs"], head["top_p"]["outputs"]
    p = [math.exp(x) for x in (0.0, 0.3, -0.2)]
    assert top["log_probs"][0] == pytest.approx([0.0, math.log(p[1] / (p[0] + p[1]))], abs=1e-6)
    assert flat(top["entropy"]) == pytest.approx(flat(on["entropy"]))


# --- other commits: temporary worktrees ------------------------------------------------

KL_BODY = """
inputs = {"rewards": T([1.0, 0.5]),
          "log_probs": T([[0.5, 0.7, 0.9, 0.0], [0.0, 0.1, 0.2, 0.3]]),
          "ref_log_probs": T([[0.4, 0.5, 0.6, 0.0], [0.0, 0.0, 0.0, 0.0]]),
          "values": T([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),
          "loss_mask": T([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])}
out["adv"] = call("advantages", inputs,
                  {"estimator": "gae", "kl_coef": 0.05, "kl_type": "k1", "gamma": 1.0, "lam": 1.0})
"""


@pytest.fixture(scope="module")
def kl_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kl")
    revs = (f"{KL_FIX}^", KL_FIX)
    for rev in revs:
        if git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode != 0:
            pytest.skip(f"{REPO_ENV} has no commit {rev}")
    paths = {rev: tmp / rev.replace("^", "-parent") for rev in revs}
    try:
        for rev, path in paths.items():
            assert git("worktree", "add", "--detach", str(path), rev).returncode == 0
        procs = {rev: start_slime(path, KL_BODY) for rev, path in paths.items()}  # in parallel
        return {rev: finish_slime(proc)["adv"] for rev, proc in procs.items()}
    finally:
        for path in paths.values():
            git("worktree", "remove", "--force", str(path))
        git("worktree", "prune")


@pytest.mark.slow  # two slime worktrees; test_real_targets' compare of the fix stays in the default set
def test_kl_aliasing_before_fix(kl_runs):
    """045310b2b^: `k *= kl_coef` aliases rollout_data["kl"]: the logged KL is the shaped reward."""
    out = kl_runs[f"{KL_FIX}^"]["outputs"]
    assert out["logged_kl"] == out["token_rewards"]
    # the whole row reaches slime (masked tail included): slime adds the reward at the response's
    # last token, k[-1], which here is the masked fourth position
    assert out["logged_kl"][0] == pytest.approx([-0.005, -0.01, -0.015, 1.0], abs=1e-6)


@pytest.mark.slow  # two slime worktrees; test_real_targets' compare of the fix stays in the default set
def test_kl_aliasing_fixed(kl_runs):
    """045310b2b: the logged KL is the raw k1 KL; the advantages are the same as before the fix."""
    fixed, before = kl_runs[KL_FIX]["outputs"], kl_runs[f"{KL_FIX}^"]["outputs"]
    assert fixed["logged_kl"][0][:3] == pytest.approx([0.1, 0.2, 0.3], abs=1e-6)
    assert fixed["logged_kl"][1][1:] == pytest.approx([0.1, 0.2, 0.3], abs=1e-6)
    assert flat(fixed["token_rewards"]) == pytest.approx(flat(before["token_rewards"]))
    assert fixed["advantages"] == before["advantages"]
    assert kl_runs[KL_FIX]["function"]["qualname"] == "compute_advantages_and_returns"


DRIFT_BODY = """
inputs = {"log_probs": T([[-1.0, -0.5, -0.2]]), "old_log_probs": T([[-1.1, -0.4, -0.3]]),
          "advantages": T([[1.0, -1.0, 0.5]]), "loss_mask": T([[1.0, 1.0, 1.0]])}
out["policy_loss"] = call("policy_loss", inputs, {"eps_clip": 0.2})
out["kl"] = call("kl", {"log_probs": T([[0.5]]), "ref_log_probs": T([[0.0]]), "loss_mask": T([[1.0]])},
                 {"kl_type": "k1"})
out["opsm"] = call("opsm_mask", inputs, {})
"""


@pytest.mark.slow  # a slime worktree at an old commit
def test_signature_drift_old_commit(worktree):
    """2025-07 slime: compute_policy_loss(log_probs, old_logprobs, ...), k1 spelled "kl", no OPSM."""
    out = run_slime(worktree(OLD_SIGNATURES), DRIFT_BODY)
    loss = out["policy_loss"]["outputs"]["loss"]
    import math
    ratios = [math.exp(-1.0 + 1.1), math.exp(-0.5 + 0.4), math.exp(-0.2 + 0.3)]
    want = [max(-a * r, -a * min(max(r, 0.8), 1.2)) for a, r in zip([1.0, -1.0, 0.5], ratios)]
    assert loss == pytest.approx(sum(want) / 3, abs=1e-6)
    assert flat(out["kl"]["outputs"]["kl"]) == pytest.approx([0.5])
    assert "compute_opsm_mask" in out["opsm"]["unsupported"]


def test_declared_calls_resolve_at_head(head):
    missing = {"slime.backends.megatron_utils.loss:off_policy_is_function"}  # PR #2084, not merged
    if "rollout_module_error" in head["load"]:  # slime/ray/rollout.py did not import here
        missing.add("slime.ray.rollout:RolloutManager._post_process_rewards")
    assert set(head["unresolved"]) == missing


def test_bad_root_names_target_path_and_module(head):
    msg = head["bad_root"]
    assert msg.startswith("slime target:") and "slime.utils.ppo_utils" in msg and "slime/utils/ppo_utils.py" in msg
