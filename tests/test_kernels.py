"""sentinel.adapters.kernels: a GPU kernel's CPU stand-in keeps the kernel's contract (shapes it
asserts, the dtype it returns) and computes its mathematics, checked against torch's own."""

from __future__ import annotations

import pytest
import torch

from sentinel.adapters.kernels import flash_attn_cross_entropy_loss
from sentinel.errors import MissingDependency


def _logits(dtype=torch.float32):
    torch.manual_seed(0)
    return (torch.randn(6, 11, dtype=torch.float64) * 3).to(dtype)


def test_flash_cross_entropy_is_torchs_per_row_cross_entropy_with_its_gradient():
    logits, labels = _logits().requires_grad_(), torch.tensor([0, 3, 10, 7, 7, 1])
    losses, z = flash_attn_cross_entropy_loss(logits, labels)
    ref_logits = logits.detach().clone().requires_grad_()
    want = torch.nn.functional.cross_entropy(ref_logits, labels, reduction="none")
    assert torch.allclose(losses, want, atol=1e-6) and torch.equal(z, torch.zeros(6))
    w = torch.arange(6.0)  # a weight per row: a gradient that mixes rows would differ
    g, = torch.autograd.grad((losses * w).sum(), logits)
    ref, = torch.autograd.grad((want * w).sum(), ref_logits)
    assert torch.allclose(g, ref, atol=1e-6)


def test_flash_cross_entropy_returns_float32_and_a_gradient_in_the_logits_dtype():
    logits = _logits(torch.bfloat16).requires_grad_()
    losses, _ = flash_attn_cross_entropy_loss(logits, torch.tensor([1, 2, 3, 4, 5, 6]))
    assert losses.dtype == torch.float32  # the kernel's losses are float32 whatever it reads
    want = torch.nn.functional.cross_entropy(logits.detach().float(), torch.tensor([1, 2, 3, 4, 5, 6]), reduction="none")
    assert torch.allclose(losses, want, atol=1e-6)  # computed in float32 from the bf16 values, not in bf16
    g, = torch.autograd.grad(losses.sum(), logits)
    assert g.dtype == torch.bfloat16


def test_flash_cross_entropy_ignored_rows_z_loss_and_scale():
    logits, labels = _logits().requires_grad_(), torch.tensor([0, -100, 10, 7, -100, 1])
    losses, z = flash_attn_cross_entropy_loss(logits, labels, logit_scale=0.5, lse_square_scale=0.1)
    keep = labels != -100
    x = logits.detach()
    lse = torch.logsumexp(x * 0.5, -1)
    want = lse - (x * 0.5).gather(-1, labels.clamp(min=0)[:, None])[:, 0] + 0.1 * lse.square()
    assert torch.allclose(losses[keep], want[keep], atol=1e-5) and torch.equal(losses[~keep], torch.zeros(2))
    assert torch.allclose(z[keep], 0.1 * lse[keep].square()) and torch.equal(z[~keep], torch.zeros(2))
    assert losses.requires_grad and not z.requires_grad  # z-losses are the kernel's log, without a gradient


def test_flash_cross_entropy_refuses_what_the_kernel_refuses_or_is_not_modelled():
    with pytest.raises(ValueError):  # the kernel unpacks exactly two dimensions
        flash_attn_cross_entropy_loss(_logits()[None], torch.zeros(1, 6, dtype=torch.long))
    with pytest.raises(AssertionError):  # labels [n]
        flash_attn_cross_entropy_loss(_logits(), torch.zeros(6, 1, dtype=torch.long))
    with pytest.raises(MissingDependency):  # this environment's limit, never the target's error
        flash_attn_cross_entropy_loss(_logits(), torch.zeros(6, dtype=torch.long), label_smoothing=0.1)
