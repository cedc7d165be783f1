"""How a slime training step hands its batch to the loss path, drawn: the step's rows in several
micro-batches (``trainer:num_microbatches`` on metrics: one loss_function call each, their logging
dicts reduced together by reduce_train_step_metrics), and the loss pass's own log-probs reused as
the old policy's under TIS (``trainer:can_reuse_log_probs_in_loss`` on is_correction).

With one micro-batch a reduction that subtracts the second dict (`values - item['values']`)
could not be told apart; without reuse under TIS, policy_loss_function's
`train_log_probs_for_tis = [lp.detach() ...]` never ran (survivors of results section 43).
"""

from __future__ import annotations

import os

import pytest
import torch

SLIME = os.environ.get("SENTINEL_SLIME_REPO")
needs_slime = pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout to run slime tests")

BODY = """
from sentinel.adapters.spying import spy
loss_mod = adapter.mods["slime.backends.megatron_utils.loss"]
import slime.observability.train_metric_utils as metric_mod
metrics = {"log_probs": T([[-0.5, -1.0, -0.2], [-0.1, -0.2, -0.3], [-1.2, -0.4, -0.9]]),
           "old_log_probs": T([[-0.7, -0.8, -0.2], [-0.3, -0.2, -0.1], [-1.0, -0.9, -0.9]]),
           "ref_log_probs": T([[-0.6, -0.9, -0.4], [-0.2, -0.2, -0.5], [-1.1, -0.5, -0.7]]),
           "advantages": T([[0.5, -1.0, 0.25], [-0.5, 1.0, 0.0], [1.5, -0.25, 0.75]]),
           "loss_mask": T([[1, 1, 0], [1, 0, 1], [1, 1, 1]])}
for agg in ("token-mean", "seq-mean-token-mean"):
    calls, dicts = [], []
    with spy(loss_mod, "loss_function", before=lambda a: calls.append((len(a["batch"]["loss_masks"]), a["num_microbatches"]))), \\
         spy(metric_mod, "reduce_train_step_metrics", before=lambda a: dicts.append(len(a["losses_reduced"]))):
        one = call("metrics", metrics, {"metric_agg": agg, "eps_clip": 0.2, "kl_type": "k3"})
        three = call("metrics", metrics, {"metric_agg": agg, "eps_clip": 0.2, "kl_type": "k3",
                                          "trainer:num_microbatches": 3})
        two = call("metrics", metrics, {"metric_agg": agg, "eps_clip": 0.2, "kl_type": "k3",
                                        "trainer:num_microbatches": 2})
    out[agg] = {"one": one["outputs"], "three": three["outputs"], "two": two["outputs"], "calls": calls, "dicts": dicts}

lp = T([[-1.0, -0.5, -0.2, -0.7], [-0.1, -0.3, -0.6, -0.9]], requires_grad=True)
tis = {"log_probs": lp, "old_log_probs": T([[-1.5, -0.4, -0.3, -0.5], [-0.2, -0.2, -0.7, -1.0]]),
       "rollout_log_probs": T([[-1.3, -0.6, -0.1, -0.4], [-0.3, -0.1, -0.5, -1.2]]),
       "advantages": T([[1.0, -0.5, 0.5, 0.25], [-1.0, 0.5, 1.0, -0.25]]), "loss_mask": T([[1, 1, 1, 0], [1, 1, 0, 1]])}
seen = []
with spy(loss_mod, "vanilla_tis_function", before=lambda a: seen.append([x.tolist() for x in a["train_log_probs"]])):
    for reuse in (False, True):
        r = call("is_correction", tis, {"method": "vanilla_tis", "tis_clip_low": 0.5, "tis_clip": 2.0,
                                        "trainer:can_reuse_log_probs_in_loss": reuse})
        grad, = torch.autograd.grad(r["res"].outputs["loss"], lp)
        out[f"reuse={reuse}"] = {"loss": r["outputs"]["loss"], "grad": grad.tolist()}
out["seen"] = seen
"""


@needs_slime
def test_a_step_in_micro_batches_reports_the_metrics_of_one():
    from test_adapter_slime import run_slime

    out = run_slime(SLIME, BODY)
    for agg in ("token-mean", "seq-mean-token-mean"):
        o = out[agg]
        # slime got one loss_function call per micro-batch, told how many there are, and one reduction of them all
        assert o["calls"] == [[3, 1], [1, 3], [1, 3], [1, 3], [2, 2], [1, 2]], o["calls"]
        assert o["dicts"] == [1, 3, 2], o["dicts"]
        assert set(o["one"]) == {"clipfrac", "approx_kl", "kl_loss"}, o["one"]
        for k, v in o["one"].items():
            assert o["three"][k] == pytest.approx(v, rel=1e-6) and o["two"][k] == pytest.approx(v, rel=1e-6), (agg, k)


@needs_slime
def test_under_tis_a_reused_old_policy_is_the_current_one_and_the_hook_weighs_it():
    from test_adapter_slime import run_slime

    out = run_slime(SLIME, BODY)
    given, current = out["seen"][0], out["seen"][-1]
    assert given[0][:3] == pytest.approx([-1.5, -0.4, -0.3])  # the batch's old log-probs (each response cut)
    assert current[0][:3] == pytest.approx([-1.0, -0.5, -0.2])  # reused: the loss pass's own, detached
    # token [0, 0]'s ratio exp(-1.0 + 1.5) is clipped against the old policy given (no gradient there);
    # reused, the ratio is 1, inside the clip, and the token takes the gradient of adv * exp(lp - rollout)
    assert out["reuse=True"]["loss"] != pytest.approx(out["reuse=False"]["loss"])
    g, g0 = torch.tensor(out["reuse=True"]["grad"]), torch.tensor(out["reuse=False"]["grad"])
    assert g0[0, 0] == 0 and g[0, 0] != 0, (g0, g)
    assert torch.all(g[torch.tensor([[1, 1, 1, 0], [1, 1, 0, 1]]).bool()] != 0), g
    assert g[0, 3] == 0 and g[1, 2] == 0


@pytest.mark.slow  # one slime prepare, four mutants, hunts bounded by examples
@needs_slime
def test_the_step_shapes_kill_what_one_micro_batch_and_no_reuse_left(tmp_path, monkeypatch):
    from sentinel.catalog import catalog_path
    from sentinel.mutate.driver import Options, mutate
    from sentinel.spec import load_paths

    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    loss = "slime.backends.megatron_utils.loss:policy_loss_function"
    only = ["slime.observability.train_metric_utils:reduce_train_step_metrics#sign@09ac3f4306",  # values - item
            f"{loss}#detach@738a7d7282",  # train_log_probs_for_tis not detached
            f"{loss}#delete@5fcd79f983",  # train_log_probs_for_tis never set
            # assert eps_clip_c > 2.0: the dual-clip constant is drawn at 1.5 too (it was 3.0 or none)
            "slime.utils.ppo_utils:compute_policy_loss#constant@5d7cf1d501"]
    rep = mutate(load_paths([catalog_path()]), Options("slime", repo=SLIME, boundaries=["metrics", "is_correction",
                                                                                         "policy_loss"],
                                                        only=only, budget=300, hunt_examples=200, cache=None))
    assert {m.id: m.verdict for m in rep.mutate.mutants} == {i: "killed" for i in only}
