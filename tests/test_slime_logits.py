"""The slime adapter's translation of log-probs into logits (so slime's own loss_function runs
on them) and its one-rank Megatron cross-entropy shim. Pure torch: runs without slime."""

from __future__ import annotations

import math

import pytest
import torch

from sentinel_adapters.slime.entry import GradAt, logged, logits_for
from sentinel_adapters.slime.megatron import one_rank_cross_entropy

LP = [-1.5, -0.7, -0.125, -1e-3, 0.0, -30.0]


def test_log_softmax_of_the_logits_is_the_log_prob_exactly():
    lp = torch.tensor(LP)
    got = torch.log_softmax(logits_for(lp), dim=-1)[:, 0]
    assert got.tolist() == pytest.approx(LP, abs=1e-6)
    assert got[4].item() == 0.0  # p == 1 is exact, not 1 - eps
    assert torch.isfinite(torch.softmax(logits_for(lp), -1)).all()


def test_non_finite_log_probs_pass_through():
    got = torch.log_softmax(logits_for(torch.tensor([float("nan"), float("-inf")])), dim=-1)[:, 0]
    assert math.isnan(got[0].item()) and got[1].item() == float("-inf")


def test_gradient_reaches_the_log_prob_unscaled_except_where_saturated():
    lp = torch.tensor(LP, requires_grad=True)
    torch.log_softmax(logits_for(lp), dim=-1)[:, 0].sum().backward()
    g = lp.grad.tolist()
    assert g[:3] + g[5:] == pytest.approx([1.0, 1.0, 1.0, 1.0], abs=1e-5)
    assert g[4] == 0.0  # p == 1: softmax saturates; the adapter supplies this gradient (GradAt)


def test_grad_at_adds_nothing_forward_and_its_gradient_backward():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = GradAt.apply(x, torch.tensor([0.5, -3.0]))
    assert out.item() == 0.0
    out.backward()
    assert x.grad.tolist() == [0.5, -3.0]


def test_one_rank_cross_entropy_is_minus_log_softmax():
    logits = torch.randn(3, 1, 5)
    target = torch.tensor([[1], [4], [0]])
    want = -torch.log_softmax(logits, -1).gather(-1, target[..., None])[..., 0]
    assert torch.allclose(one_rank_cross_entropy(logits, target, None), want)


def test_the_logged_metrics_are_observed_by_name_and_together_but_not_the_reporting_count():
    # slime 7405851 made the leading count a 0 placeholder (no --calculate-per-token-loss), loss and
    # metrics unchanged: a history across it must not see a difference there
    log = lambda count: {"keys": ["pg_clipfrac", "kl_loss"], "values": torch.tensor([count, 0.25, 0.5])}  # noqa: E731
    a, b = logged(log(2.0)), logged(log(0.0))
    assert sorted(a) == ["returned:logged.kl_loss", "returned:logged.pg_clipfrac", "returned:logged.values"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    dropped = logged({"keys": ["pg_clipfrac"], "values": torch.tensor([2.0, 0.25])})  # a metric deleted
    assert dropped["returned:logged.values"].shape != a["returned:logged.values"].shape
