"""verl's actor methods (`DataParallelPPOActor._forward_micro_batch`, and `compute_log_prob` where a
scenario sets micro_batch_size or use_dynamic_bsz) at the `actor_logprobs` boundary, from the checkout
SENTINEL_VERL_REPO names: the catalog scenarios hold (the batched ones need the real tensordict
package, the `verl` extra: without it they are an error naming it, never unsupported), the method
really packs the rows into one sequence for the stand-in model, a pad step one token off inside
verl's own path is seen, so are micro-batches put back out of order and a token-budget batch not
restored, and a short seeded hunt finds nothing."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

import untimed
from inprocess import restored_imports
from sentinel import hunt as H
from sentinel.adapters import standin
from sentinel.catalog import catalog_path
from sentinel.errors import PreconditionUnmet
from sentinel.runner import TargetSpec, run
from sentinel.spec import load_paths
from sentinel_adapters.reference.adapter import ReferenceAdapter

REPO = os.environ.get("SENTINEL_VERL_REPO")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not REPO, reason="set SENTINEL_VERL_REPO to a verl checkout (the actor method's code)")]

BATCH = {"logits": torch.tensor([
    [[0.5, -1.0, 0.25], [1.0, 0.0, -0.5], [2.0, -2.0, 0.0], [0.0, 0.75, 1.5], [9.0, 9.0, 9.0]],
    [[1.0, 1.0, 0.0], [0.25, 0.5, -1.0], [-1.0, 2.0, 0.5], [1.5, 0.0, 0.0], [0.0, -0.25, 3.0]],
    [[7.0, 7.0, 7.0], [0.0, 1.0, -1.0], [3.0, 0.5, 0.5], [0.0, 0.0, 2.0], [7.0, 7.0, 7.0]]]),
    "tokens": torch.tensor([[1, 0, 2, 1, 0], [2, 1, 0, 2, 2], [0, 1, 0, 2, 0]]),
    "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.float32),
    "loss_mask": torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 0, 1], [0, 0, 1, 1, 1]], dtype=torch.float32)}
M = BATCH["loss_mask"].bool()


@pytest.fixture(scope="module")
def verl():
    """The checkout's verl, imported in this process for this module only: its `verl` entries and
    the adapter's record of where verl came from are taken out again afterwards (test_adapter_verl
    after it found the checkout's verl already imported, took it for the installed one, and its
    declared calls no longer resolved)."""
    from sentinel_adapters.verl import VerlAdapter, adapter as verl_adapter

    with restored_imports("verl"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(verl_adapter, "_last_root", [])  # the one-root-per-process guard: this module's root only
        adapter = VerlAdapter(Path(REPO), torch.device("cpu"))
        adapter.facts = adapter.load()
        yield adapter


def _reference(config):
    return ReferenceAdapter().call("actor_logprobs", dict(BATCH), config).outputs


TENSORDICT = importlib.util.find_spec("tensordict") is not None
needs_tensordict = pytest.mark.skipif(not TENSORDICT, reason="tensordict is not installed (pip install '.[verl]')")


def test_another_targets_flash_attn_stub_is_not_taken_for_the_real_package():
    """OpenRLHF and TRL stub flash_attn; in a process that loaded one of them first (a test
    process loading several targets), verl's remove-padding path took the stub's unpad_input
    (it returns nothing: 'not enough values to unpack'). A subprocess: the stub is process-wide."""
    import subprocess
    code = ("from sentinel.adapters import shims; from sentinel_adapters.verl import actor; "
            "shims.install_stubs(['flash_attn']); import flash_attn; "
            "print(shims.is_stub(flash_attn), shims.module_exists_anywhere('flash_attn.bert_padding'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["True", "False"], r.stdout + r.stderr


def test_the_catalog_holds_on_verl_and_batching_is_never_unsupported():
    rep = run(load_paths([catalog_path() / "actor_logprobs"]), [TargetSpec("verl", REPO)])
    got = {r.id: (r.verdict, r.reason) for r in rep.results}
    assert got.pop("actor-logprobs-packed")[0] == "holds"
    for sid, (verdict, reason) in got.items():  # micro_batch_size / use_dynamic_bsz: compute_log_prob
        if TENSORDICT:
            assert verdict == "holds", (sid, reason)
        else:  # verl has the options; this environment lacks the package their input needs
            assert verdict == "error" and "tensordict" in reason, (sid, verdict, reason)
    if TENSORDICT:
        assert {r.function.qualname for r in rep.results if r.id != "actor-logprobs-packed"} == \
            {"DataParallelPPOActor.compute_log_prob"}


@pytest.mark.parametrize("packed", [False, True])
def test_verl_packs_the_rows_for_the_stand_in_when_asked(verl, monkeypatch, packed):
    shapes = []
    forward = standin.StandInLM.forward
    monkeypatch.setattr(standin.StandInLM, "forward", lambda self, input_ids=None, attention_mask=None, **k: (
        shapes.append((tuple(input_ids.shape), attention_mask is None)) or
        forward(self, input_ids=input_ids, attention_mask=attention_mask, **k)))
    config = {"temperature": 0.5, "use_remove_padding": packed}
    out = verl.call("actor_logprobs", dict(BATCH), config).outputs
    real = int(BATCH["attention_mask"].sum())
    assert shapes == ([((1, real), True)] if packed else [((3, shapes[0][0][1]), False)])
    want = _reference(config)
    for name in ("log_probs", "entropy"):
        assert torch.allclose(out[name][M], want[name][M], atol=1e-5), name


def test_a_pad_step_one_token_off_in_verls_path_is_seen(verl, monkeypatch):
    """Rolling the packed results by one before verl's pad_input puts them back is the plant
    `actor-unpad-offset` on the real code path: the result leaves the reference gather."""
    actor = sys.modules["verl.workers.actor.dp_actor"]
    pad = actor.pad_input
    monkeypatch.setattr(actor, "pad_input", lambda hidden_states, indices, batch, seqlen: pad(
        torch.roll(hidden_states, 1, 0), indices, batch, seqlen))
    config = {"temperature": 0.5, "use_remove_padding": True}
    out = verl.call("actor_logprobs", dict(BATCH), config).outputs
    assert not torch.allclose(out["log_probs"][M], _reference(config)["log_probs"][M], atol=1e-3)


def test_a_short_seeded_hunt_on_verl_finds_nothing(tmp_path):
    rep = H.hunt(TargetSpec("verl", REPO), boundaries=["actor_logprobs"], seed=0, db=None, out_dir=tmp_path,
                 names=["actor_logprobs.batching_invariant", "actor_logprobs.log_probs"],
                 max_examples=8, min_examples=8, **untimed.HUNT)
    assert not rep.hunt.findings, [(f.property, f.message) for f in rep.hunt.findings]
    ran = {p.property: p.examples for p in rep.hunt.properties}
    assert ran["actor_logprobs.batching_invariant"] >= 8 and ran["actor_logprobs.log_probs"] >= 8, ran


@needs_tensordict
def test_micro_batches_put_back_out_of_order_in_verls_path_are_seen(verl, monkeypatch):
    """DataProto.split handing compute_log_prob its micro-batches last first: the rows' results come
    back in another order, which the reference gather (and one pass over the whole batch) tells."""
    config = {"temperature": 0.5, "micro_batch_size": 2}
    whole = verl.call("actor_logprobs", dict(BATCH), {"temperature": 0.5}).outputs["log_probs"]
    out = verl.call("actor_logprobs", dict(BATCH), config).outputs["log_probs"]
    assert torch.allclose(out[M], _reference(config)["log_probs"][M], atol=1e-5) and torch.allclose(out, whole)
    proto = sys.modules["verl.protocol"].DataProto
    split = proto.split
    monkeypatch.setattr(proto, "split", lambda self, size: split(self, size)[::-1])
    out = verl.call("actor_logprobs", dict(BATCH), config).outputs["log_probs"]
    assert not torch.allclose(out[M], _reference(config)["log_probs"][M], atol=1e-3)


@needs_tensordict
def test_a_token_budget_batch_left_unrestored_in_verls_path_is_seen(verl, monkeypatch):
    """restore_dynamic_batch skipped: with the longest row (5 real tokens) last, the token budget (the
    padded length: one row per micro-batch) runs it first, so without the restore the rows keep the
    budget's order."""
    batch = {k: v[[0, 2, 1]] for k, v in BATCH.items()}
    m = batch["loss_mask"].bool()
    config = {"temperature": 2.0, "use_dynamic_bsz": True, "use_remove_padding": True}
    want = ReferenceAdapter().call("actor_logprobs", dict(batch), config).outputs["log_probs"]
    out = verl.call("actor_logprobs", dict(batch), config).outputs["log_probs"]
    assert torch.allclose(out[m], want[m], atol=1e-5)
    actor = sys.modules["verl.workers.actor.dp_actor"]
    monkeypatch.setattr(actor, "restore_dynamic_batch", lambda data, batch_idx_list: data)
    out = verl.call("actor_logprobs", dict(batch), config).outputs["log_probs"]
    assert not torch.allclose(out[m], want[m], atol=1e-3)


def test_a_token_budget_below_the_padded_length_is_excluded_not_an_error(verl):
    """verl asserts max_token_len >= the padded sequence length (6 here): a declared precondition,
    so the call is never made."""
    with pytest.raises(PreconditionUnmet, match="verl-token-budget"):
        verl.call("actor_logprobs", dict(BATCH), {"use_dynamic_bsz": True, "max_token_len": 5})


@needs_tensordict
def test_compute_log_probs_missing_gradient_is_a_declared_deviation_not_a_finding(tmp_path):
    # verl's compute_log_prob runs under no_grad by design: against the reference, a batched draw
    # showed "grad:log_probs/logits reference [..] vs verl [0, 0]" as a finding (adversarial review)
    rep = H.differential(TargetSpec("reference"), TargetSpec("verl", REPO), ["actor_logprobs"], 60.0, 1,
                         against=True, out_dir=tmp_path, verify=False, max_examples=40, min_examples=40,
                         config={"micro_batch_size": 2, "temperature": 1.0, "use_remove_padding": False})
    assert not rep.hunt.findings, [(f.property, f.message) for f in rep.hunt.findings]
    met = {d.name for d in rep.hunt.deviations}
    assert "compute-log-prob-without-gradient-micro_batch_size" in met, met


@pytest.mark.parametrize("packed", [False, True])
def test_drawn_actor_options_entropy_off_and_sum_pi_squared(verl, packed):
    """conventions.OPTION_DOMAINS on actor_logprobs: calculate_entropy off gives the log-probs alone
    (the same ones, through verl's own inplace_backward branch), calculate_sum_pi_squared adds verl's
    sum over the vocabulary of pi^2 at the temperature-scaled logits, observed."""
    config = {"temperature": 0.5, "use_remove_padding": packed}
    both = verl.call("actor_logprobs", dict(BATCH), config).outputs
    alone = verl.call("actor_logprobs", dict(BATCH), {**config, "trainer:calculate_entropy": False})
    assert "entropy" not in alone.outputs and torch.equal(alone.outputs["log_probs"][M], both["log_probs"][M])
    pi = verl.call("actor_logprobs", dict(BATCH), {**config, "trainer:calculate_sum_pi_squared": True})
    expect = torch.softmax(BATCH["logits"] / 0.5, -1).square().sum(-1)
    assert torch.allclose(pi.extras["returned:sum_pi_squared"][M], expect[M], atol=1e-5)


@pytest.mark.parametrize("packed", [False, True])
def test_drawn_checkpointing_runs_torch_checkpoint_with_the_same_values(verl, monkeypatch, packed):
    """entropy_checkpointing and sum_pi_squared_checkpointing (conventions.OPTION_DOMAINS, pinned off
    until stop 47): verl wraps each computation in torch.utils.checkpoint, which changes no value and
    no gradient, and torch.autograd.grad (how the hunt observes gradients) still runs: verl passes no
    use_reentrant, and torch's reentrant default refuses it."""
    calls = []
    real = torch.utils.checkpoint.checkpoint

    def counted(fn, *args, **kw):
        calls.append(kw.get("use_reentrant"))
        return real(fn, *args, **kw)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", counted)
    config = {"temperature": 0.5, "use_remove_padding": packed, "trainer:calculate_sum_pi_squared": True}
    got = {}
    for name, over in (("plain", {}), ("checkpointed", {"trainer:entropy_checkpointing": True,
                                                         "trainer:sum_pi_squared_checkpointing": True})):
        logits = BATCH["logits"].clone().requires_grad_(True)
        out = verl.call("actor_logprobs", {**BATCH, "logits": logits}, {**config, **over})
        y = out.outputs["entropy"][M].sum() + out.extras["returned:sum_pi_squared"][M].sum()
        got[name] = (out, torch.autograd.grad(y, logits)[0])
        assert calls == ([False, False] if over else []), calls
    (plain, g0), (ck, g1) = got["plain"], got["checkpointed"]
    for k in ("log_probs", "entropy"):
        assert torch.equal(ck.outputs[k][M], plain.outputs[k][M]), k
    assert torch.equal(ck.extras["returned:sum_pi_squared"][M], plain.extras["returned:sum_pi_squared"][M])
    assert torch.equal(g1, g0) and g0.abs().sum() > 0


def test_a_checkpoint_called_wrongly_is_killed_once_checkpointing_is_drawn(tmp_path, monkeypatch):
    """The mutants that swap torch.utils.checkpoint's arguments ran nothing while the adapter pinned
    entropy_checkpointing / sum_pi_squared_checkpointing off (stop 46's verl survivors); drawn, the
    hunt's first example with one on sees verl fail where the unmutated code returns."""
    from sentinel.mutate.driver import Options, mutate
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    fn = "verl.workers.actor.dp_actor:DataParallelPPOActor._forward_micro_batch"
    keys = ("c2d32e6748", "a73f8f797f")  # checkpoint(logits, fn) for the packed entropy / sum of pi^2
    rep = mutate(load_paths([catalog_path() / "actor_logprobs"]),
                 Options("verl", repo=REPO, only=[f"{fn}#swap-args@{k}" for k in keys], budget=20,
                         hunt_examples=200, survivor_examples=200, cache=None))  # 200 whatever the load
    by = {m.key: m for m in rep.mutate.mutants}
    assert all(by[k].verdict == "killed" for k in keys), [(m.key, m.verdict, m.reason) for m in by.values()]


@pytest.mark.parametrize("packed", [False, True])
def test_drawn_fused_kernels_run_verls_fused_forward_and_its_backward(verl, monkeypatch, packed):
    """trainer:use_fused_kernels: verl's own fused forward (patch_forward_with_backends, torch backend) over
    a base model whose hidden states are the drawn logits: FusedLinearForPPO's chunked log-softmax and
    its hand-written backward run, give the reference's log-probs, entropy and gradient; a backward that
    drops the entropy's share of the gradient (planted in verl's Function) is seen."""
    fused_mod = sys.modules.get("verl.utils.experimental.torch_functional") or \
        importlib.import_module("verl.utils.experimental.torch_functional")
    calls = []
    real = fused_mod.FusedLinearForPPOFunction.forward
    monkeypatch.setattr(fused_mod.FusedLinearForPPOFunction, "forward",
                        staticmethod(lambda ctx, *a, **k: calls.append(1) or real(ctx, *a, **k)))
    config = {"temperature": 0.5, "use_remove_padding": packed, "trainer:use_fused_kernels": True}
    logits = BATCH["logits"].clone().requires_grad_()
    out = verl.call("actor_logprobs", {**BATCH, "logits": logits}, config).outputs
    assert calls, "the fused forward never ran"
    ref_logits = BATCH["logits"].clone().requires_grad_()
    plain = {k: v for k, v in config.items() if not k.startswith("trainer:")}  # the reference has no such option
    want = ReferenceAdapter().call("actor_logprobs", {**BATCH, "logits": ref_logits}, plain).outputs
    for name in ("log_probs", "entropy"):
        assert torch.allclose(out[name][M], want[name][M], atol=1e-5), name
    loss = lambda o: (o["log_probs"] * M).sum() + (o["entropy"] * M).sum()  # noqa: E731
    got, = torch.autograd.grad(loss(out), logits)
    expect, = torch.autograd.grad(loss(want), ref_logits)
    assert torch.allclose(got[M], expect[M], atol=1e-5)
    backward = fused_mod.FusedLinearForPPOFunction.backward
    monkeypatch.setattr(fused_mod.FusedLinearForPPOFunction, "backward",
                        staticmethod(lambda ctx, dlp, dent: backward(ctx, dlp, None)))
    logits = BATCH["logits"].clone().requires_grad_()
    planted, = torch.autograd.grad(loss(verl.call("actor_logprobs", {**BATCH, "logits": logits}, config).outputs), logits)
    assert not torch.allclose(planted[M], expect[M], atol=1e-3)


def _mutants_killed(tmp_path, monkeypatch, boundary: str, ids: tuple[str, ...]) -> None:
    """`sentinel mutate` on `boundary`'s catalog kills each of `ids`, having run its change (200 hunt
    examples and a survivor's floor of 200, whatever the load)."""
    from sentinel.mutate.driver import Options, mutate
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    rep = mutate(load_paths([catalog_path() / boundary]),
                 Options("verl", repo=REPO, only=list(ids), budget=20, hunt_examples=200, survivor_examples=200,
                         cache=None))
    by = {m.id: m for m in rep.mutate.mutants}
    assert all(by[i].verdict == "killed" and by[i].reached for i in ids), [(m.id, m.verdict, m.reason) for m in by.values()]


@pytest.mark.parametrize("packed", [False, True])
def test_drawn_flash_attn_cross_entropy_gives_the_reference_log_probs_and_gradient(verl, monkeypatch, packed):
    """trainer:flash_attn_cross_entropy on the actor: _forward_micro_batch's logprobs_from_logits takes its
    flash-attn arm (the kernel's stand-in, sentinel.adapters.kernels), with inplace_backward as verl
    passes it, entropy on or off: the reference's log-probs and gradient."""
    for entropy in (True, False):
        config = {"temperature": 0.5, "use_remove_padding": packed, "trainer:calculate_entropy": entropy}
        logits = BATCH["logits"].clone().requires_grad_()
        out = verl.call("actor_logprobs", {**BATCH, "logits": logits},
                        {**config, "trainer:flash_attn_cross_entropy": True}).outputs
        ref_logits = BATCH["logits"].clone().requires_grad_()
        want = ReferenceAdapter().call("actor_logprobs", {**BATCH, "logits": ref_logits},
                                       {"temperature": 0.5, "use_remove_padding": packed}).outputs
        assert torch.allclose(out["log_probs"][M], want["log_probs"][M], atol=1e-5)
        got, = torch.autograd.grad((out["log_probs"] * M).sum(), logits)
        expect, = torch.autograd.grad((want["log_probs"] * M).sum(), ref_logits)
        assert torch.allclose(got[M], expect[M], atol=1e-5)
    verl_F = importlib.import_module("verl.utils.torch_functional")
    monkeypatch.setattr(verl_F, "logprobs_from_logits_flash_attn", lambda *a, **k: verl_F.cross_entropy_loss(*a, **k)[0])
    planted = verl.call("actor_logprobs", dict(BATCH), {"temperature": 0.5, "use_remove_padding": packed,
                                                       "trainer:flash_attn_cross_entropy": True}).outputs
    assert not torch.allclose(planted["log_probs"][M], want["log_probs"][M])  # the arm ran: its planted sign shows


def test_the_flash_attn_arms_mutants_run_and_are_killed_once_it_is_drawn(tmp_path, monkeypatch):
    """logprobs_from_logits' flash-attn arm was unreachable on CPU (conventions.UNREACHABLE until stop 48):
    drawn on the kernel's stand-in, the output detached after the kernel and the view back to the batch's
    shape deleted (an output of the wrong shape: the adapter's contract check, the mutant's doing) are killed."""
    fn = "verl.utils.torch_functional:logprobs_from_logits"
    _mutants_killed(tmp_path, monkeypatch, "logprobs", (f"{fn}#detach@9d83b7cc72", f"{fn}#delete@ad1dc968b8"))


def _ulysses_calls(monkeypatch):
    """verl's gathers of the ranks' outputs, each with the group it gathered over (None: no group)."""
    ulysses = importlib.import_module("verl.utils.ulysses")
    dp_actor = importlib.import_module("verl.workers.actor.dp_actor")
    calls, real = [], ulysses.gather_outputs_and_unpad

    def counted(x, *args, **kw):
        calls.append(ulysses.get_ulysses_sequence_parallel_group())
        return real(x, *args, **kw)

    monkeypatch.setattr(dp_actor, "gather_outputs_and_unpad", counted)
    return calls


@pytest.mark.parametrize("batching", [{}, {"micro_batch_size": 2}])
def test_two_ulysses_ranks_give_one_ranks_log_probs_entropy_and_gradient(verl, monkeypatch, batching):
    """trainer:ulysses_sequence_parallel_size 2 (adapters/verl/ulysses.py): _forward_micro_batch on two
    threaded ranks, each handed its slice of the packed sequence, verl's own all-gather (and its backward's
    scaled slice) putting them together: the same log-probs, entropy, sum of pi^2 and gradient as one rank,
    through verl's gathers on a real group; a gather that drops its gradient scaling (planted) is seen."""
    if batching and not TENSORDICT:
        pytest.skip("tensordict is not installed (pip install '.[verl]')")
    calls = _ulysses_calls(monkeypatch)
    config = {"temperature": 0.5, "use_remove_padding": True, "trainer:calculate_sum_pi_squared": True, **batching}

    def run(sp):
        logits = BATCH["logits"].clone().requires_grad_()
        out = verl.call("actor_logprobs", {**BATCH, "logits": logits},
                        {**config, "trainer:ulysses_sequence_parallel_size": sp})
        y = (out.outputs["log_probs"] * M).sum() + (out.outputs["entropy"] * M).sum()
        return out, torch.autograd.grad(y, logits)[0] if y.requires_grad else None  # compute_log_prob: no_grad

    (one, g1), (two, g2) = run(1), run(2)
    n = 2 if batching else 1  # micro-batches of one call
    assert len(calls) == 2 * 3 * n and all(g is not None for g in calls)  # 2 ranks x (log-probs, entropy, pi^2)
    for k in ("log_probs", "entropy"):
        assert torch.allclose(two.outputs[k][M], one.outputs[k][M], atol=1e-6), k
    assert torch.allclose(two.extras["returned:sum_pi_squared"][M], one.extras["returned:sum_pi_squared"][M], atol=1e-6)
    if not batching:  # compute_log_prob runs under no_grad: no gradient to compare
        assert torch.allclose(g2, g1, atol=1e-6) and g1.abs().sum() > 0
        ulysses = importlib.import_module("verl.utils.ulysses")
        monkeypatch.setattr(ulysses.Gather, "backward", staticmethod(
            lambda ctx, g: (None, g.split(ctx.part_size, dim=ctx.gather_dim)[ctx.sp_rank].contiguous(), None, None,
                            None, None)))  # grad_scaler ignored: each rank's share halved
        assert not torch.allclose(run(2)[1], g1, atol=1e-3)


def test_ulysses_without_remove_padding_is_excluded_as_verls_config_refuses_it(verl):
    with pytest.raises(PreconditionUnmet, match="verl-sequence-parallel-packed"):
        verl.call("actor_logprobs", dict(BATCH), {"temperature": 0.5, "use_remove_padding": False,
                                                 "trainer:ulysses_sequence_parallel_size": 2})


def test_the_fused_forward_on_two_ulysses_ranks_rolls_each_slices_labels_a_finding(tmp_path):
    """scenarios/findings/verl-fused-ulysses-label-roll.yaml: violated on verl's fused forward under two
    sequence-parallel ranks (the slice's last position scored against its own first token); the same
    batch holds unfused on two ranks, and fused on one."""
    finding = Path(__file__).resolve().parents[1] / "scenarios" / "findings" / "verl-fused-ulysses-label-roll.yaml"
    text = finding.read_text()

    def verdict(over: str) -> str:
        f = tmp_path / "s.yaml"
        f.write_text(text.replace('"trainer:use_fused_kernels": true', over))
        return run(load_paths([f]), [TargetSpec("verl", REPO)]).results[0].verdict

    assert verdict('"trainer:use_fused_kernels": true') == "violated"
    assert verdict('"trainer:use_fused_kernels": false') == "holds"
    f = tmp_path / "one.yaml"
    f.write_text(text.replace('"trainer:ulysses_sequence_parallel_size": 2}', '"trainer:ulysses_sequence_parallel_size": 1}')
                 .replace('  - batching_invariant: {against: [{"trainer:ulysses_sequence_parallel_size": 1}]}\n', ''))
    assert run(load_paths([f]), [TargetSpec("verl", REPO)]).results[0].verdict == "holds"


def test_the_ulysses_arms_mutants_are_killed_once_two_ranks_are_drawn(tmp_path, monkeypatch):
    """_forward_micro_batch's Ulysses arms were unreachable from one process (conventions.UNREACHABLE until
    stop 48): on two threaded ranks, the log-probs left ungathered and the gathered ones detached are killed."""
    fn = "verl.workers.actor.dp_actor:DataParallelPPOActor._forward_micro_batch"
    _mutants_killed(tmp_path, monkeypatch, "actor_logprobs", (f"{fn}#delete@ff072d5945", f"{fn}#detach@6824b3fbd4"))


@needs_tensordict
def test_the_empty_micro_batch_scenario_runs_verls_all_masked_branch_and_sees_it_broken(tmp_path, monkeypatch):
    """verl #4165 feeds an all-masked micro-batch (padding removed) one dummy token and drops its output.
    actor-logprobs-empty-micro-batch reaches that branch (its mutants run), and kills the one that deletes
    the dummy ids (the empty micro-batch then reaches the model); every other verdict holds on verl."""
    from sentinel.mutate.driver import Options, mutate
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hypothesis"))
    fn = "verl.workers.actor.dp_actor:DataParallelPPOActor._forward_micro_batch"
    dummy_ids, dummy_ids_detached = "604b166712", "b6f9cc6733"  # delete / .detach() of its input_ids fill
    rep = mutate(load_paths([catalog_path() / "actor_logprobs"]),
                 Options("verl", repo=REPO, only=[f"{fn}#delete@{dummy_ids}", f"{fn}#detach@{dummy_ids_detached}"],
                         budget=0, cache=None))
    by = {m.key: m for m in rep.mutate.mutants}
    assert by[dummy_ids].verdict == "killed" and by[dummy_ids].killed_by.startswith(
        "actor-logprobs-empty-micro-batch: holds -> error"), by[dummy_ids]
    assert by[dummy_ids_detached].reached is True  # ran, and (an int tensor) changed nothing


@pytest.mark.parametrize("sp", [0, 1, 2])  # 0: padded; 1, 2: padding removed, on 1 or 2 sequence-parallel ranks
def test_drawn_mrope_position_ids_run_verls_vlm_arms_with_the_same_log_probs_and_gradient(verl, monkeypatch, sp):
    """trainer:mrope_position_ids (adapters/verl/vlm.py): the model a Qwen2-VL on a text-only batch, its
    position ids [bsz, 4, seqlen]; _forward_micro_batch transposes and unpads them (on two ranks: its VLM
    arm, the whole sequence on each rank, sliced after the embedding): the log-probs, entropy and gradient
    of the 2-D ids. A channel unpadded at another pace (planted in verl's index_first_axis) is seen; a
    constant offset, which a rotary model does not see, is not."""
    dp_actor = importlib.import_module("verl.workers.actor.dp_actor")
    arms = []
    if sp == 2:
        real_pad = dp_actor.ulysses_pad
        monkeypatch.setattr(dp_actor, "ulysses_pad", lambda *a, **k: arms.append(1) or real_pad(*a, **k))
    config = {"temperature": 0.5, "use_remove_padding": sp > 0, "trainer:ulysses_sequence_parallel_size": max(sp, 1)}

    def run(**over):
        logits = BATCH["logits"].clone().requires_grad_()
        out = verl.call("actor_logprobs", {**BATCH, "logits": logits}, {**config, **over}).outputs
        y = (out["log_probs"] * M).sum() + (out["entropy"] * M).sum()
        return out, torch.autograd.grad(y, logits)[0]

    (text, g0), (vlm, g1) = run(), run(**{"trainer:mrope_position_ids": True})
    assert len(arms) == (2 if sp == 2 else 0)  # each rank took the VLM arm
    for k in ("log_probs", "entropy"):
        assert torch.allclose(vlm[k][M], text[k][M], atol=1e-6), k
    assert torch.allclose(g1, g0, atol=1e-6) and g0.abs().sum() > 0
    if sp:
        real = dp_actor.index_first_axis  # a constant offset of a channel: rotary positions are relative
        monkeypatch.setattr(dp_actor, "index_first_axis", lambda x, i: real(
            torch.cat([x[..., :1], x[..., 1:] + 5], dim=-1) if x.dim() == 2 else x, i))
        assert torch.equal(run(**{"trainer:mrope_position_ids": True})[0]["log_probs"], vlm["log_probs"])
        monkeypatch.setattr(dp_actor, "index_first_axis", lambda x, i: real(  # a channel at twice the pace
            torch.cat([x[..., :1], x[..., 1:2] * 2, x[..., 2:]], dim=-1) if x.dim() == 2 else x, i))
        assert run(**{"trainer:mrope_position_ids": True})[0]["log_probs"][M].isnan().all()


def test_mrope_position_ids_of_another_shape_raise_as_a_qwen2_vls_do():
    from sentinel.adapters.standin import LogitsTable, StandInLM
    from sentinel_adapters.verl.vlm import VisionLanguageStandIn, mrope_position_ids
    mask = BATCH["attention_mask"].long()
    model = VisionLanguageStandIn(StandInLM(LogitsTable(BATCH["logits"], BATCH["tokens"], mask)), 4)
    pos = mrope_position_ids(mask, 4)
    assert pos.shape == (3, 4, 5) and bool((pos[2, :, 0] == 1).all()) and pos[2, 0].tolist() == [1, 0, 1, 2, 3]
    ok = model(input_ids=BATCH["tokens"], attention_mask=mask, position_ids=pos.transpose(0, 1)).logits
    assert not ok[mask.bool()].isnan().any()
    with pytest.raises(ValueError, match=r"\(4, batch_size, seq_length\)"):
        model(input_ids=BATCH["tokens"], attention_mask=mask, position_ids=pos)  # not transposed: (bsz, 4, seqlen)


def test_the_mrope_arms_mutants_are_killed_once_a_qwen2_vl_is_drawn(tmp_path, monkeypatch):
    """_forward_micro_batch's 3-D position-ids arms were unreachable (conventions.UNREACHABLE until stop 49): the
    transpose deleted, index_first_axis' arguments swapped and the VLM Ulysses arm's pad "detached" (a tuple)
    are killed by the hunt; the all-masked micro-batch's dummy position ids deleted or of another shape by
    verl-vlm-empty-micro-batch."""
    fn = "verl.workers.actor.dp_actor:DataParallelPPOActor._forward_micro_batch"
    _mutants_killed(tmp_path, monkeypatch, "actor_logprobs", tuple(f"{fn}#{k}" for k in (
        "delete@7c8f4c7c11", "swap-args@cd93d3b64e", "detach@04ae616655", "delete@fb874fae52", "slice@1c00910df3",
        "slice@9951c2bbce")))


def test_fused_kernels_on_a_qwen2_vl_run_verls_qwen2_vl_forward_and_find_its_ulysses_labels(verl, tmp_path):
    """use_fused_kernels with mrope_position_ids: verl's qwen2_vl fused forward runs (on transformers 5 its
    output container is given transformers 4's class, vlm.qwen2_vl_output_class): on one rank the text
    model's log-probs; findings/verl-fused-vlm-ulysses-labels is violated on two ranks (each rank's hidden
    states paired with the whole sequence's first labels) and holds unfused on two ranks or fused on one."""
    config = {"temperature": 0.5, "use_remove_padding": True, "trainer:use_fused_kernels": True}
    lm = verl.call("actor_logprobs", dict(BATCH), config).outputs["log_probs"][M]
    vlm = verl.call("actor_logprobs", dict(BATCH), {**config, "trainer:mrope_position_ids": True}).outputs["log_probs"][M]
    assert torch.allclose(vlm, lm, atol=1e-6)
    finding = Path(__file__).resolve().parents[1] / "scenarios" / "findings" / "verl-fused-vlm-ulysses-labels.yaml"
    text = finding.read_text()

    def verdict(old: str, new: str) -> str:
        f = tmp_path / "s.yaml"
        f.write_text(text.replace(old, new))
        return run(load_paths([f]), [TargetSpec("verl", REPO)]).results[0].verdict

    assert verdict("", "") == "violated"
    assert verdict('"trainer:use_fused_kernels": true', '"trainer:use_fused_kernels": false') == "holds"
    one = text.replace('"trainer:ulysses_sequence_parallel_size": 2}', '"trainer:ulysses_sequence_parallel_size": 1}') \
        .replace('  - batching_invariant: {against: [{"trainer:ulysses_sequence_parallel_size": 1}]}\n', '')
    assert one != text and verdict(text, one) == "holds"
