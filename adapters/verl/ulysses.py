"""verl's actor under Ulysses sequence parallelism (``ulysses_sequence_parallel_size`` > 1), each rank a
thread of one process (sentinel.adapters.ranks: torch's threaded process group, real collectives).

With padding removed, ``_forward_micro_batch`` pads the packed sequence to a multiple of the
sequence-parallel size and gives each rank its slice of the ids, the position ids and the rolled
labels (``ulysses_pad_and_slice_inputs``); the model's attention exchanges the slices (all-to-all)
so each token sees its whole context, and each rank's model returns the logits of its own slice; verl
gathers the ranks' log-probs and entropy (``gather_outputs_and_unpad``: an all-gather whose backward
keeps the rank's own slice of the gradient, times the size, ``grad_scaler``) and strips the padding.
What is played here:

- `UlyssesStandIn`: the stand-in model as a Ulysses model answers, from the ids alone: it gathers
  the ranks' slices of the ids and positions over the group (the attention's exchange), answers the
  whole packed sequence once per call (each canonical row its own, as one model would), and returns
  the rank's slice of the logits, its own tensor. A vision-language model (adapters/verl/vlm.py) is
  given the whole padded sequence on every rank and slices after its embedding
  (``patch_vlm_for_ulysses_input_slicing``): nothing to gather, the rank's slice returned.
- `sequence_parallel_group`: verl keeps the group in one process-wide variable, set once per process
  by its sharding manager; ranks here are threads of one process, so for the call its getter answers
  each thread its own group.
- `collected`: the value is sequence-parallel rank 0's (verl's dispatch collects that rank's output:
  ``is_collect``), and the gradient each rank's own graph gives, averaged over the ranks, as FSDP
  averages the ranks' gradients (every rank of the group trained on the same batch).
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections import defaultdict

import torch
import torch.distributed as dist

from sentinel.adapters.ranks import current

from .vlm import is_vlm

SP = "sp"


def _gathered(t: torch.Tensor, group, n: int) -> torch.Tensor:
    """The ranks' slices of `t` along its last dimension, in rank order."""
    parts = [torch.empty_like(t) for _ in range(n)]
    dist.all_gather(parts, t.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


class UlyssesStandIn(torch.nn.Module):
    """The stand-in model (sentinel.adapters.standin.StandInLM, packed) under sequence parallelism:
    a forward per rank, each with its slice of one packed sequence (see the module's docstring)."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm, self.vlm = lm, is_vlm(lm)
        # a text model has no vision_config (verl's is_vlm_model test)
        self.config = lm.config if self.vlm else types.SimpleNamespace(model_type="sentinel_stand_in")
        self._lock = threading.Lock()
        self._answers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # i-th forward of every rank: its ids, logits
        self._calls: defaultdict[int, int] = defaultdict(int)  # forwards per rank so far

    @property
    def table(self):
        return self.lm.table

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        rank = current()
        if rank is None or attention_mask is not None or position_ids is None:
            raise RuntimeError("the Ulysses stand-in serves a packed slice (position ids, no attention mask) "
                               "inside simulated ranks")
        group, n, r = rank.group(SP), rank.size_of(SP), rank.rank_in(SP)
        if self.vlm:  # the whole sequence on every rank, sliced after embedding
            ids, pos = input_ids, position_ids
        else:
            ids, pos = _gathered(input_ids, group, n), _gathered(position_ids, group, n)
        with self._lock:  # the ranks' i-th forwards are one forward of the model: the same rows' logits
            i = self._calls[r]
            self._calls[r] += 1
            if i not in self._answers:
                self._answers[i] = (ids, self.lm(input_ids=ids, position_ids=pos, **kwargs).logits)
            asked, whole = self._answers[i]
        if not torch.equal(asked, ids):  # the ranks' i-th forwards meet in one all-gather: one sequence
            raise RuntimeError("the sequence-parallel ranks' forwards fell out of step")
        if whole.shape[1] % n:
            raise RuntimeError(f"a sequence of {whole.shape[1]} tokens cannot be sliced for {n} ranks")
        w = whole.shape[1] // n
        return types.SimpleNamespace(logits=whole[:, r * w:(r + 1) * w].clone(), aux_loss=None)


@contextlib.contextmanager
def sequence_parallel_group(ulysses: types.ModuleType):
    """verl.utils.ulysses' group getter answers each simulated rank its own group, for the call."""
    real = ulysses.get_ulysses_sequence_parallel_group

    def mine(*args, **kwargs):
        rank = current()
        return rank.group(SP) if rank is not None else real(*args, **kwargs)

    ulysses.get_ulysses_sequence_parallel_group = mine
    try:
        yield
    finally:
        ulysses.get_ulysses_sequence_parallel_group = real


class _Collected(torch.autograd.Function):
    """Rank 0's value; backward, each rank's output gets the gradient divided by the ranks."""

    @staticmethod
    def forward(ctx, *outs):
        ctx.n = len(outs)
        return outs[0].clone()

    @staticmethod
    def backward(ctx, grad):
        return tuple(grad / ctx.n for _ in range(ctx.n))


def collected(outs: list[dict]) -> dict:
    """The ranks' results of one call as verl trains on them (see the module's docstring)."""
    return {k: (_Collected.apply(*(o[k] for o in outs)) if isinstance(v, torch.Tensor) else v)
            for k, v in outs[0].items()}
