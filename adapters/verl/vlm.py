"""verl's actor on a vision-language model (Qwen2-VL) fed a text-only batch: the drawn
``trainer:mrope_position_ids`` (adapters/verl/actor.py).

A Qwen2-VL batch carries 3-D "mrope" position ids, [bsz, C, seqlen]: three rotary channels (time,
height, width) and, where verl feeds transformers' four-channel layout (its qwen2_vl
``process_position_ids``, since 0d4541f3), the text positions before them. For text-only rows every
channel is the same count over the row's real tokens, with 1 at padding: Qwen2-VL's
``get_rope_index`` without an image or video grid (``attention_mask.cumsum(-1) - 1``, 1 where
masked), and verl's agent loop's text channel (``_compute_position_ids``: ones, ``arange`` at the
real tokens). ``_forward_micro_batch`` transposes them to [C, bsz, seqlen], unpads each channel with
padding removed, and under Ulysses sequence parallelism pads them unsliced: a VLM slices its inputs
after embedding (``patch_vlm_for_ulysses_input_slicing``), so each rank's model gets the whole
sequence and returns its slice.

- `mrope_position_ids`: the batch's position ids as above.
- `qwen2_vl_output_class`: verl's qwen2_vl fused forward (use_fused_kernels on a VLM) builds its output on
  transformers 4's ``Qwen2VLCausalLMOutputWithPast``, which transformers 5 dropped: given back as that
  dataclass (fields only) where it is missing.
- `VisionLanguageStandIn`: the stand-in model as a VLM reads a text-only batch: a ``vision_config``
  (verl's ``is_vlm_model`` test) and position ids of C channels. Position ids of another shape raise,
  as Qwen2-VL's do (``process_position_ids``). Rotary positions are relative: a model's logits are the
  same under any constant offset of a channel within a sequence, and change when a channel does not
  advance by one from token to token. A sequence whose channels do not is answered NaN logits, as the
  table answers ids of no row.
"""

from __future__ import annotations

import types

import torch

QWEN2_VL = "verl.models.transformers.qwen2_vl"


def mrope_position_ids(mask: torch.Tensor, channels: int) -> torch.Tensor:
    """[bsz, channels, seqlen]: each channel the real tokens' count from 0, 1 at padding."""
    rope = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return rope.unsqueeze(1).expand(-1, channels, -1).contiguous()


def vision_config() -> types.SimpleNamespace:
    """What verl reads of a VLM's config: ``vision_config`` present (its ``is_vlm_model``)."""
    return types.SimpleNamespace(model_type="qwen2_vl", vision_config=types.SimpleNamespace())


def is_vlm(model: torch.nn.Module) -> bool:
    return hasattr(getattr(model, "config", None), "vision_config")


class VisionLanguageStandIn(torch.nn.Module):
    """The stand-in model (sentinel.adapters.standin.StandInLM) as a Qwen2-VL on a text-only batch
    (see the module's docstring): it answers the text positions (channel 0) as the language model."""

    def __init__(self, lm: torch.nn.Module, channels: int):
        super().__init__()
        self.lm, self.channels = lm, channels
        self.config = vision_config()

    @property
    def table(self):
        return self.lm.table

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        if position_ids is None or position_ids.dim() != 3 or position_ids.shape[0] != self.channels:
            raise ValueError(f"a Qwen2-VL takes position ids of shape ({self.channels}, batch_size, seq_length); "
                             f"got {None if position_ids is None else tuple(position_ids.shape)}")
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids[0])
        logits = out.logits
        for row, span in _sequences(input_ids, attention_mask, position_ids[0]):
            steps = position_ids[:, row, span].diff(dim=-1)
            if not bool((steps == 1).all()):
                logits = logits.index_put((torch.full_like(span, row), span), logits.new_tensor(float("nan")))
        return types.SimpleNamespace(**{**vars(out), "logits": logits})


def _sequences(input_ids, attention_mask, text_positions) -> list[tuple[int, torch.Tensor]]:
    """The sequences the model reads, each (row, its token positions): a padded row's real tokens, or
    a packed row's spans, each starting where the text positions restart at 0 (as the stand-in reads them)."""
    if attention_mask is not None:
        return [(r, attention_mask[r].bool().nonzero().reshape(-1)) for r in range(input_ids.shape[0])]
    starts = (text_positions[0] == 0).nonzero().reshape(-1).tolist() + [input_ids.shape[1]]
    return [(0, torch.arange(a, b, device=input_ids.device)) for a, b in zip(starts, starts[1:])]


QWEN2_VL_OUTPUT = "Qwen2VLCausalLMOutputWithPast"


def qwen2_vl_output_class() -> bool:
    """transformers 5 dropped ``Qwen2VLCausalLMOutputWithPast`` (one multimodal output class serves every
    model); verl's qwen2_vl subclasses it for its fused forward's output (``Qwen2VLCausalLMOutputForPPO``:
    log_probs, entropy). Where transformers lacks it (or holds a shim's stub of it), it gets transformers
    4.x's dataclass: its fields, no behaviour. True where it was added."""
    import dataclasses
    from typing import Any, Optional

    from transformers.models.qwen2_vl import modeling_qwen2_vl as modeling
    from transformers.utils import ModelOutput

    from sentinel.adapters.shims import is_stub

    if not is_stub(getattr(modeling, QWEN2_VL_OUTPUT, None)) and hasattr(modeling, QWEN2_VL_OUTPUT):
        return False

    @dataclasses.dataclass
    class Qwen2VLCausalLMOutputWithPast(ModelOutput):  # transformers 4.57's fields
        loss: Optional[torch.FloatTensor] = None
        logits: Optional[torch.FloatTensor] = None
        past_key_values: Optional[Any] = None
        hidden_states: Optional[tuple] = None
        attentions: Optional[tuple] = None
        rope_deltas: Optional[torch.LongTensor] = None

    Qwen2VLCausalLMOutputWithPast.__module__ = modeling.__name__
    setattr(modeling, QWEN2_VL_OUTPUT, Qwen2VLCausalLMOutputWithPast)
    return True
