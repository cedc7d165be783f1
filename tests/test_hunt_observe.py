"""What a differential hunt observes beside the canonical outputs (issue 19, item 3): gradients
through inputs a trainer may hand over still in the graph, masked positions where one side
masks its own output, config attributes one side changed, and findings on an output before
one on an extra (a logged copy of the output)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sentinel import hunt as H
from sentinel.hunt import differences as D
from sentinel.runner import TargetSpec
from sentinel.strategies import Example
from untimed import DIFFERENTIAL, DIFFERENTIAL_SECONDS

HERE = Path(__file__).resolve().parent


def _toys() -> None:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def _answer(**kinds):
    return {"status": "ok", "outputs": {}, "grads": {}, "inputs_after": {}, "extras": {}, **kinds}


def test_gradients_are_taken_through_inputs_a_trainer_may_keep_in_the_graph():
    assert ("loss", "old_log_probs") in D.grads_for("is_correction")
    assert ("loss", "old_log_probs") in D.grads_for("policy_loss")
    assert ("loss", "old_log_probs") not in D.grads_for("policy_loss", graph=False)  # against the reference


def test_masked_positions_count_where_one_side_zeroes_them():
    mask = np.array([[1, 1, 0]], np.float32)
    ex = Example("advantages", {}, {"rewards": np.ones(1, np.float32), "loss_mask": mask})
    clean, junk, other = np.array([[0.5, -0.5, 0.0]]), np.array([[0.5, -0.5, 0.7]]), np.array([[0.5, -0.5, 0.9]])
    # the fix masks its advantages, the parent left whitened values on padding: a difference there
    d, = D.differences("advantages", ex, _answer(outputs={"advantages": junk}), _answer(outputs={"advantages": clean}))
    assert d.observable == "advantages" and d.positions == [[0, 2]]
    # neither side masks them: junk both sides ignore
    assert D.differences("advantages", ex, _answer(outputs={"advantages": junk}),
                         _answer(outputs={"advantages": other})) == []
    # against the reference (which zeroes every masked position) junk there is the trainer's convention
    assert D.differences("advantages", ex, _answer(outputs={"advantages": clean}),
                         _answer(outputs={"advantages": junk}), masked=False) == []
    # a per-token extra shaped like the loss mask follows the same rule
    assert [x.observable for x in D.differences("advantages", ex, _answer(extras={"returned:kl": junk}),
                                                _answer(extras={"returned:kl": clean}))] == ["returned:kl"]


def test_a_config_attribute_only_one_side_changed_is_a_difference():
    ex = Example("kl", {}, {"loss_mask": np.ones((1, 2), np.float32)})
    d, = D.differences("kl", ex, _answer(), _answer(extras={"config:kl_coef": np.float32(1.0),
                                                             "config:kl_coef.value": np.float32(0.05)}))
    assert d.observable == "config:kl_coef" and (d.base, d.head) == (0.0, 1.0)


def test_a_value_on_one_side_only_differs_only_where_both_sides_are_one_code():
    # a logged metric the head adds (a mutant logging entropy_coef where it should not; TRL
    # 776940fc4d survived for this): two commits may log different metrics, a mutant may not
    ex = Example("policy_loss", {}, {"loss_mask": np.ones((1, 2), np.float32)})
    base = _answer(outputs={"loss": np.float32(1.0)}, extras={"returned:logged.kl": np.float32(0.1)})
    head = _answer(outputs={"loss": np.float32(1.0), "clipfrac": np.zeros((1, 2), np.float32)},
                   extras={"returned:logged.kl": np.float32(0.1), "returned:logged.entropy_coef": np.float32(0.0)})
    assert D.differences("policy_loss", ex, base, head) == []
    diffs = D.differences("policy_loss", ex, base, head, one_sided=True)
    assert [(d.observable, d.base, d.head) for d in diffs] == [("clipfrac", 0.0, 1.0),
                                                               ("returned:logged.entropy_coef", 0.0, 1.0)]


def test_an_undetached_is_weight_is_found_through_the_old_log_probs_gradient(tmp_path):
    # the weights, the loss and its gradient w.r.t. log pi are the reference's: only the
    # gradient through old_log_probs (bypass modes pass log pi there) shows the leak
    _toys()
    rep = H.differential(TargetSpec("reference"), TargetSpec("hunt_observe_adapter:UndetachedTis"), ["is_correction"],
                         DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, first=True, max_examples=200,
                         config={"method": "vanilla_tis"}, **DIFFERENTIAL)
    f, = rep.hunt.findings
    assert f.signature.observable == "grad:loss/old_log_probs", f


def test_an_output_difference_is_preferred_to_one_in_a_logged_copy(tmp_path):
    # the logged copy differs wherever log pi < -1 at any position, the output only at a valid
    # one: the hunt reports the output (a family can judge it, a scenario replays it)
    _toys()
    rep = H.differential(TargetSpec("hunt_observe_adapter:KlLogged"), TargetSpec("hunt_observe_adapter:KlShifted"),
                         ["kl"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, first=True, max_examples=300,
                         config={"kl_type": "k1"}, **DIFFERENTIAL)
    f, = rep.hunt.findings
    assert f.signature.observable in ("kl", "grad:kl/log_probs"), f


def test_a_finding_on_an_extra_is_pinned_and_replays(tmp_path):
    # only the logged copy (`returned:metrics.raw_sum`) differs: the finding's scenario pins
    # base's value of that extra, so it replays as `regressed` base -> head; a target without
    # such an extra (the reference) skips it: unsupported, never `holds`
    from sentinel.runner import run
    from sentinel.spec import load_file
    _toys()
    base, head = TargetSpec("hunt_observe_adapter:KlLogged"), TargetSpec("hunt_observe_adapter:KlLoggedOnly")
    rep = H.differential(base, head, ["kl"], DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, first=True,
                         max_examples=300, config={"kl_type": "k1"}, **DIFFERENTIAL)
    f, = rep.hunt.findings
    assert f.signature.observable == "returned:metrics.raw_sum" and f.reproduced is True, f
    sc, = load_file(f.file)
    inv, = sc.invariants
    assert inv.family == "close" and inv.output == "returned:metrics.raw_sum"
    ref = TargetSpec("reference")
    got = {r.target: r.verdict for r in run([sc], [base, head, ref]).results}
    assert got == {base.key: "holds", head.key: "violated", ref.key: "unsupported"}, got


def test_a_loss_gradient_into_a_masked_token_counts_where_the_other_side_has_none():
    mask = np.array([[1, 0]], np.float32)
    ex = Example("policy_loss", {}, {"log_probs": np.zeros((1, 2), np.float32), "loss_mask": mask})
    clean, leak = np.array([[0.5, 0.0]]), np.array([[0.5, 0.25]])
    d, = D.differences("policy_loss", ex, _answer(grads={"loss/log_probs": leak}),
                       _answer(grads={"loss/log_probs": clean}))
    assert d.observable == "grad:loss/log_probs" and d.positions == [[0, 1]]


def test_locals_are_read_at_the_return_of_a_function_called_inside_the_traced_one():
    """TRL's OPSM decides on avg_seq_kl inside get_off_policy_mask, which _compute_loss calls:
    one hook reads both functions' locals (a nested hook would replace the outer one)."""
    from sentinel.adapters.frames import locals_on_return

    def inner(x):
        kl = x * 2
        return kl > 1

    def outer(x):
        mask = inner(x)
        return mask.sum()

    with locals_on_return(outer, ("mask", "kl"), inner) as frames:
        outer(np.arange(3))
    assert [sorted(f) for f in frames] == [["kl"], ["mask"]]
    assert list(frames[0]["kl"]) == [0, 2, 4]


def test_a_side_that_cannot_load_what_the_call_needs_is_rejected_not_a_difference():
    """verl's batched log-probs need tensordict (the `verl` extra): a side without it raises
    MissingDependency on that config, the other side answers. That is this environment's gap, not
    the trainer's: the example is rejected with the message, as an adapter defect is. The
    target's own module failing to import (TargetLoadError) is the target's: a difference."""
    from sentinel.hunt.driver.differential import DiffJudge

    class Hunter:  # the differential hunt's comparison, nothing else
        def unexplained(self, b, ex, a, c):
            return D.differences(b, ex, a, c), []

    judge = object.__new__(DiffJudge)
    judge.h, judge.b = Hunter(), "kl"
    ex = Example("kl", {}, {"log_probs": np.zeros((1, 2), np.float32)})
    missing = {"status": "error", "type": "MissingDependency", "message": "the tensordict package is not installed"}
    for a, b in ((missing, _answer()), (_answer(), missing)):
        answer = judge._answer(ex, a, b)
        assert answer.violations == [] and answer.rejected.startswith("not loadable here: the tensordict"), answer
        assert answer.error["type"] == "MissingDependency"
    own = {"status": "error", "type": "TargetLoadError", "message": "importing verl.x needs module 'verl.gone'"}
    raised = {"status": "error", "type": "ValueError", "message": "shapes differ"}
    for theirs in (own, raised):  # the target's own failures differ
        assert judge._answer(ex, theirs, _answer()).violations == ["exception"]


def test_an_adapter_defect_on_the_head_alone_is_a_mutants_difference_only():
    """An adapter defect (an output its contract forbids) is no answer of the target's between two
    commits: the adapter may not know the other one's layout. A mutant's hunt (`one_sided`: one
    adapter, one commit) is different: the head raising one where the base answers is the mutant's
    doing (verl's logprobs_from_logits with its view back deleted returns [B * T], not [B, T])."""
    from sentinel.hunt.driver.differential import DiffJudge, DiffSettings

    class Hunter:
        def __init__(self, one_sided):
            self.settings = DiffSettings(one_sided=one_sided)

        def unexplained(self, b, ex, a, c):
            return D.differences(b, ex, a, c), []

    judge = object.__new__(DiffJudge)
    judge.b = "kl"
    ex = Example("kl", {}, {"log_probs": np.zeros((1, 2), np.float32)})
    defect = {"status": "error", "type": "AdapterDefect", "message": "adapter defect at x.py:1: ContractError: kl"}
    judge.h = Hunter(one_sided=True)
    assert judge._answer(ex, _answer(), defect).violations == ["exception"]
    assert judge._answer(ex, defect, _answer()).rejected.startswith("adapter defect")  # the base's: not the mutant's
    raised = {"status": "error", "type": "ValueError", "message": "the base raised"}
    assert judge._answer(ex, raised, defect).rejected.startswith("adapter defect")  # nothing of the base's to differ from
    judge.h = Hunter(one_sided=False)
    answer = judge._answer(ex, _answer(), defect)
    assert answer.violations == [] and answer.rejected.startswith("adapter defect"), answer


def _kl_hunt(head: str, tmp_path: Path):
    _toys()
    return H.differential(TargetSpec("reference"), TargetSpec(f"hunt_observe_adapter:{head}"), ["kl"],
                          DIFFERENTIAL_SECONDS, 0, out_dir=tmp_path, max_examples=60,
                          config={"kl_type": "k1"}, **DIFFERENTIAL)


def test_a_hunt_whose_every_example_a_side_cannot_load_is_an_error_not_unsupported(tmp_path):
    """Rejected on every example, nothing was compared, and the option exists: the property is
    an `error` naming the cause (it read `unsupported` and the hunt succeeded)."""
    rep = _kl_hunt("KlNeedsMissing", tmp_path)
    (p,) = rep.hunt.properties
    assert p.status == "error" and "MissingDependency" in p.reason and "tensordict" in p.reason, (p.status, p.reason)
    assert not rep.success and rep.hunt.findings == []


def test_a_side_whose_own_import_broke_is_a_finding(tmp_path):
    rep = _kl_hunt("KlOwnImportBroken", tmp_path)
    assert [f.signature.observable for f in rep.hunt.findings] == ["exception"], rep.hunt.findings
