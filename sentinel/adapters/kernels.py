"""CPU stand-ins for GPU kernels a trainer calls through a library, so the trainer's own code around
the call runs on any machine.

A trainer often keeps two arms for one computation: a fused GPU kernel where its library is
installed, plain torch elsewhere (verl's ``logprobs_from_logits``: flash-attn's Triton cross-entropy,
else a log-softmax gather). On a CPU machine the kernel's arm never runs, and neither does the
trainer's code in it (its reshapes, its views, the arguments it passes). A stand-in here keeps the
kernel's contract (its signature, the shapes it asserts, the dtype it returns) and computes the same
mathematics with differentiable torch ops, written here from the kernel's documented behaviour. An
adapter takes it where the real kernel cannot run (not installed, or the call not on its device).

What a stand-in hides: the kernel's own numerics (a Triton reduction's rounding) and any memory it
writes outside its outputs. Each stand-in says which of those its kernel has. It plays the target's
dependency, yet lives under sentinel/adapters/: a TypeError raised in its body reads as an adapter
defect (sentinel/adapters/defects.py), never as the target's error.
"""

from __future__ import annotations

from typing import Optional

import torch

from sentinel.errors import MissingDependency


def flash_attn_cross_entropy_loss(logits: torch.Tensor, labels: torch.Tensor,
                                  precomputed_lse: Optional[torch.Tensor] = None, label_smoothing: float = 0.0,
                                  logit_scale: float = 1.0, lse_square_scale: float = 0.0, ignore_index: int = -100,
                                  inplace_backward: bool = False, process_group=None):
    """flash-attn's ``flash_attn.ops.triton.cross_entropy.cross_entropy_loss`` (>= 2.4.3), on CPU.

    Its contract: ``logits`` [n, V] (two dimensions, nothing else unpacks), ``labels`` [n] (asserted);
    it returns ``(losses, z_losses)``, both [n] float32 whatever the logits' dtype: the loss of row i
    is logsumexp(s * logits[i]) - s * logits[i, labels[i]] plus the z-loss lse_square_scale * lse^2,
    0 where labels[i] == ignore_index; the gradient reaches the logits only, in their dtype.

    Not modelled: label smoothing, a precomputed lse and a tensor-parallel process group (refused as
    this environment's limit, MissingDependency: no trainer here passes them); labels outside the
    vocabulary (torch's gather raises); the kernel's NaN log-sum-exp of a row of +inf or all -inf
    logits (torch gives +-inf); and ``inplace_backward``, with which the real kernel writes the gradient
    into the logits' own memory during the backward. A trainer that passes it while another backward
    still needs those logits (verl turns it off where it computes the entropy on its remove-padding
    paths) gets wrong gradients on a GPU, which this stand-in does not show."""
    if label_smoothing or precomputed_lse is not None or process_group is not None:
        raise MissingDependency("flash-attn is not usable here, and its cross-entropy stand-in models no label "
                                "smoothing, precomputed lse or tensor-parallel group")
    n_rows, _ = logits.shape  # the kernel unpacks two dimensions
    assert labels.shape == (n_rows,), f"labels {tuple(labels.shape)} for {n_rows} rows"
    scaled = logits.float() * logit_scale  # the kernel loads each row in float32
    lse = torch.logsumexp(scaled, dim=-1)
    ignored = labels == ignore_index
    picked = scaled.gather(-1, labels.masked_fill(ignored, 0).long().unsqueeze(-1)).squeeze(-1)
    z_losses = (lse_square_scale * lse.square()).masked_fill(ignored, 0.0)
    losses = (lse - picked + z_losses).masked_fill(ignored, 0.0)
    return losses, z_losses.detach()  # z-losses are for logging: no gradient (mark_non_differentiable)
