"""Canonical ``[B, T]`` rows <-> slime's per-sample response lists, for `SlimeAdapter`.

slime's batch holds each response's own tokens, no padding: one tensor per sample,
``response_lengths`` and ``total_lengths`` (prompt + response) beside them. A row's masked tail
is either masked response tokens (a multi-turn sample's last tool output: the whole row is the
response) or padding after the response's last valid token; the drawn ``trainer:masked_tail``
(conventions.MASKED_TAIL) says which, so ragged response lengths reach slime too.
"""

from __future__ import annotations

from typing import Any

import torch

from sentinel.adapters.layout import rows, unrows, valid_ends

from .conventions import MASKED_TAIL


class Responses:
    """The canonical <-> slime layout of one boundary call."""

    _tail_is_padding = False  # set for the length of one `call`

    def _tok(self, inputs: dict[str, torch.Tensor], name: str, mask: torch.Tensor) -> list[torch.Tensor]:
        """Per-sample response tensors: every canonical position of the row, masked ones
        included, or up to the last valid one under the drawn masked_tail padding (clones, so
        autograd reaches the input and in-place changes are seen)."""
        return rows(inputs[name].to(self.device), self._ends(mask))

    def _rollout(self, inputs: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """The drawn rollout log-probs as slime's batch holds them (its trainer options
        use_rollout_logprobs / get_mismatch_metrics read them), where the input has them."""
        return {"rollout_log_probs": self._tok(inputs, "rollout_log_probs", mask)} if "rollout_log_probs" in inputs else {}

    def _masks(self, mask: torch.Tensor) -> list[torch.Tensor]:
        return [m.to(torch.int32) for m in rows(mask, self._ends(mask))]

    def _ends(self, mask: torch.Tensor) -> list[int] | None:
        """Each response's length in canonical positions: the whole row (None), or, under the drawn
        ``trainer:masked_tail`` padding, up to its last valid position (`valid_ends`)."""
        return valid_ends(mask) if self._tail_is_padding else None

    def call(self, boundary, inputs, config):
        # the drawn layout of a row's masked tail, for this call's `_tok` / `_masks` (MASKED_TAIL)
        self._tail_is_padding = config.get(MASKED_TAIL) == "padding"
        try:
            return super().call(boundary, inputs, config)
        finally:
            self._tail_is_padding = False

    @staticmethod
    def _lengths(mask: torch.Tensor, parts: list[torch.Tensor], prompt: int = 1) -> tuple[list[int], list[int]]:
        """(response_lengths, total_lengths): each response as `_tok` cut it, after a one-token
        prompt (the prompt the loss entry builds; canonical inputs carry none) or `prompt` tokens."""
        response = [int(p.numel()) for p in parts]
        return response, [n + prompt for n in response]

    def _unrows(self, parts: list[torch.Tensor], mask: torch.Tensor, fill: torch.Tensor | None = None) -> torch.Tensor:
        """Per-sample results back in [B, T] (mask's shape): each must have its response's length (a
        cut row's tail from `fill`, else 0)."""
        return unrows(parts, mask, fill=fill, ends=self._ends(mask))

    def _back(self, cat: torch.Tensor, lengths: list[int], mask: torch.Tensor) -> torch.Tensor:
        return self._unrows(list(cat.split(lengths, dim=0)), mask)

    def _whole(self, value: Any, mask: torch.Tensor) -> Any:
        """`value` with every list of per-sample response tensors in it as a [B, T] batch (`_unrows`),
        so an observed extra is compared at the valid positions as an output is (ragged lists would
        read as one flat run, masked positions included); anything else as it is."""
        if isinstance(value, dict):
            return {k: self._whole(v, mask) for k, v in value.items()}
        ends = self._ends(mask) or [int(mask.shape[1])] * int(mask.shape[0])
        if isinstance(value, list) and len(value) == len(ends) and all(
                isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() == n for t, n in zip(value, ends)):
            return self._unrows(value, mask)
        return value

    def _after(self, inputs: dict[str, torch.Tensor], given: dict[str, list[torch.Tensor]],
               mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """The canonical inputs as slime left the tensors it was given (in-place changes show)."""
        return {k: self._unrows([p.detach() for p in v], mask, fill=inputs[k]).to(inputs[k].dtype)
                for k, v in given.items()}
