"""A reference target with two planted bugs that fail one property, `loss_agg.mode.token-mean`,
for two different reasons (imported by the worker as `two_bug_adapter:TwoBugAdapter`; the
tests put this folder on PYTHONPATH). token-mean's denominator
- counts a fully masked row as one token (slime's loss_function did, see
  scenarios/findings/token-mean-counts-masked-sample.yaml), and
- counts the masked holes inside a row (a tool-output span) as tokens.

Either one makes the property fail; a hunt that stops at its first finding reports one of
them, and only signatures (position class masked-row, or a hole) show the other.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sentinel_adapters.reference import ops as R
from sentinel_adapters.reference.adapter import ReferenceAdapter


def two_bugs(x, loss_mask, mode="token-mean"):
    if mode != "token-mean":
        return R.aggregate(x, loss_mask, mode)
    m = loss_mask.bool()
    t = torch.arange(m.shape[-1]).expand_as(m)
    first = torch.where(m, t, m.shape[-1]).min(-1).values
    last = torch.where(m, t, -1).max(-1).values
    span = (last - first + 1).clamp_min(0)  # holes between the first and last valid token counted
    tokens = torch.where(m.any(-1), span, torch.ones_like(span))  # a fully masked row counted as one
    return R.keep(x, m).sum() / tokens.sum()


class TwoBugAdapter(ReferenceAdapter):
    name = "two-bugs"

    def __init__(self, root=None, device=None, options=None):
        super().__init__(root, device, options)
        self.ops = SimpleNamespace(**{**vars(self.ops), "aggregate": two_bugs})
