"""TRL's actor method at the `actor_logprobs` boundary: ``GRPOTrainer._get_per_token_logps_and_entropies``
(``_get_per_token_logps`` before entropies were returned) called on a bare trainer with a stand-in
model (sentinel/adapters/standin.py) that returns the drawn logits for the ids it is given.

TRL's layout, translated here: the batch is ``prompt_completion_ids``, prompts left-padded to the
longest prompt, completions right-padded to the longest completion, and ``logits_to_keep`` the
completion width (`standin.prompt_response`: a canonical row's completion starts at its first
trained token); the method scores every completion column, and its [B, C] results go back to the
canonical positions they score (`standin.scatter_back`). Since TRL 1.11 the method asks the model
for a fused LM head's log-probs instead (``fused_lm_head=True``): unsupported here, the stand-in
returns logits, not hidden states and an lm_head. The method itself micro-batches (``batch_size``), calls the model, drops the last
position, keeps ``logits_to_keep`` columns, divides by ``self.temperature`` and gathers: nothing of
that is done here. A vision-language batch (``trainer:vision_inputs``) adds the image inputs the method slices
per micro-batch, made from each row's ids, and a stand-in that checks it got its own rows' images
(`StandInVLM`).
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import torch

from sentinel.adapters.binding import bind
from sentinel.adapters.contract import BoundaryResult, implements, refuse
from sentinel.adapters.observables import extras
from sentinel.adapters.standin import LogitsTable, StandInLM, actor_preconditions, prompt_response, scatter_back
from sentinel.errors import Unsupported

from .bare import bare_trainer
from .conventions import CONFIG, GRPO

ACTOR = "actor_logprobs"
_ONE_MODEL = "https://github.com/huggingface/trl/blob/main/trl/trainer/grpo_trainer.py"


class ActorSurface:
    """The `actor_logprobs` boundary on TRL (mixed into `TRLAdapter`)."""

    unsupported = (refuse(ACTOR, "use_dynamic_bsz", "use_remove_padding",
                          reason="TRL's GRPOTrainer scores fixed-size micro-batches of padded rows (batch_size): it "
                                 "has no token-budget batching and no padding-free forward"),)
    preconditions = actor_preconditions("TRL", _ONE_MODEL)

    # declared as HEAD names it; older versions had _get_per_token_logps (log-probs only), called below
    @implements(ACTOR, calls=(f"{GRPO}:GRPOTrainer._get_per_token_logps_and_entropies",))
    def b_actor_logprobs(self, inputs, config):
        cls = self.trainer_cls
        fn = getattr(cls, "_get_per_token_logps_and_entropies", None)
        entropies = fn is not None
        fn = fn or getattr(cls, "_get_per_token_logps", None)
        if fn is None:
            raise Unsupported("TRL's GRPOTrainer has no _get_per_token_logps at this version")
        if self.facts.get("fused_lm_head"):
            raise Unsupported("TRL scores completions with a fused LM head at this version (add_fused_lm_head: "
                              "log-probs from the hidden states and the lm_head weight, the temperature inside the "
                              "kernel); the stand-in model returns logits, not hidden states")
        logits, tokens = inputs["logits"], inputs["tokens"]
        ids, mask, keep, where = prompt_response(tokens, inputs["attention_mask"], inputs["loss_mask"])
        layout = config.get("trainer:vision_inputs")
        table = LogitsTable(logits, tokens, inputs["attention_mask"])
        moe = bool(config.get("trainer:aux_loss_enabled"))  # what _compute_loss passes as compute_aux_loss
        model = StandInVLM(table, layout) if layout or moe else StandInLM(table)
        # what GRPOTrainer.__init__ reads off the model: the forward's keyword names
        keys = tuple(inspect.signature(model.forward).parameters)
        if config.get("trainer:model_kwarg_keys") == "no_logits_to_keep":  # a forward that cannot take it
            keys = tuple(k for k in keys if k != "logits_to_keep")
        # the entropy bonus on (trainer:entropy_coef): the method then keeps the entropies in the graph
        coef = float(config.get("trainer:entropy_coef") or 0.0)
        trainer = bare_trainer(cls, self.mods[CONFIG].GRPOConfig, model, temperature=float(config["temperature"]),
                               model_kwarg_keys=keys, entropy_coef=coef, _entropy_bonus_enabled=coef != 0.0)
        method = getattr(trainer, fn.__name__)  # bound: the trainer is `self`
        images = vision_batch(layout, ids) if layout else {}
        # no refusal when the rows are not a whole number of micro-batches: TRL's eval path hands such
        # a batch (its last, partial one) to this method, which then indexes past its cumulative
        # image counts (docs/findings.md, "Found by the reach hunts")
        kwargs = bind(method, ACTOR, {"model": model, "input_ids": ids, "attention_mask": mask, "logits_to_keep": keep},
                      {"batch_size": config["micro_batch_size"], "compute_entropy": True if entropies else None,
                       "compute_aux_loss": True if moe else None, **images},
                      absent={"batch_size": None, "compute_aux_loss": False, **{k: None for k in images}})
        out = method(**kwargs)
        logps, ent = (out[0], out[1]) if isinstance(out, tuple) else (out, None)
        shape = inputs["loss_mask"].shape
        outputs = {"log_probs": scatter_back(logps, where, shape)}
        if ent is not None:
            outputs["entropy"] = scatter_back(ent, where, shape)
        aux = out[2] if isinstance(out, tuple) and len(out) > 2 else None  # the micro-batches' mean aux loss
        return BoundaryResult(outputs, function=self._ref(fn), extras=extras({"aux_loss": aux}) if moe else {})


# The per-sample pieces of each image layout _get_per_token_logps_and_entropies slices per micro-batch
# (the method's argument -> pieces), and the arguments only the method reads (counts per sample).
_COUNTS = ("num_images", "num_tiles")


def _images(layout: str, x: torch.Tensor) -> dict[str, Any]:
    """One sample's image inputs, made from its ids `x` [L] so that each piece names the sample it
    belongs to; `n` images (tiles) where the layout allows several: 1 or 2, by the ids."""
    n = 1 + int(x.sum()) % 2
    img, ids = x.double()[None], x[None]
    shape = torch.tensor([[x.numel(), int(x.sum())]])
    if layout == "image_grid_thw":  # Qwen-VL: 2 patch rows per image, a (t, h, w) grid per image
        return {"pixel_values": img.repeat(2 * n, 1), "image_grid_thw": torch.tensor([[1, 1, 2]] * n), "num_images": n}
    if layout == "image_position_ids":
        return {"pixel_values": img.repeat(n, 1), "image_position_ids": ids.repeat(n, 1), "num_images": n}
    if layout == "spatial_shapes":  # LFM2-VL: tiles
        return {"pixel_values": img.repeat(n, 1), "pixel_attention_mask": ids.repeat(n, 1),
                "spatial_shapes": shape.repeat(n, 1), "num_tiles": n}
    one = {"pixel_values": img}  # one image per sample, and beside it:
    extra = {"pixel_values": {}, "pixel_attention_mask": {"pixel_attention_mask": ids},
             "image_sizes": {"image_sizes": shape}, "token_type_ids": {"token_type_ids": ids},
             "mm_token_type_ids": {"mm_token_type_ids": ids}}[layout]
    return {**one, **extra}


def vision_batch(layout: str, ids: torch.Tensor) -> dict[str, Any]:
    """The batch's image inputs in `layout`: each sample's pieces concatenated in row order, the
    per-sample counts as lists (what TRL's generation hands _get_per_token_logps_and_entropies)."""
    rows = [_images(layout, ids[b].cpu()) for b in range(ids.shape[0])]
    out: dict[str, Any] = {}
    for k in rows[0]:
        out[k] = [r[k] for r in rows] if k in _COUNTS else torch.cat([r[k] for r in rows]).to(ids.device)
    return out


class StandInVLM(StandInLM):
    """A vision-language stand-in: the logits of `StandInLM` for the rows it reads, when the image
    inputs it is given are those of those rows (`vision_batch` of its ids); a forward given other
    rows' images (or a piece too many or too few) answers NaN logits, as the table does for ids of
    no row: a VLM's output depends on its images, and a wrong slice shows. Asked for
    ``output_router_logits`` (an MoE model), it returns an ``aux_loss`` of its micro-batch: the mean
    squared probability of the logits it returns (no experts here; what the method does with it,
    one per micro-batch then their mean, is what is observed)."""

    def __init__(self, table: LogitsTable, layout: str | None):
        super().__init__(table)
        self.layout = layout

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, logits_to_keep=0, **kwargs: Any):
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              logits_to_keep=logits_to_keep)
        want = {k: v for k, v in vision_batch(self.layout, input_ids).items() if k not in _COUNTS} if self.layout else {}
        given = {k: kwargs[k] for k in kwargs if k in _IMAGE_KEYS}
        same = want.keys() == given.keys() and all(
            given[k].shape == v.shape and bool((given[k].to(v.dtype) == v).all()) for k, v in want.items())
        logits = out.logits if same else torch.full_like(out.logits, float("nan"))
        aux = logits.softmax(-1).pow(2).mean() if kwargs.get("output_router_logits") else None
        return types.SimpleNamespace(logits=logits, aux_loss=aux)


_IMAGE_KEYS = ("pixel_values", "image_grid_thw", "image_position_ids", "pixel_attention_mask", "spatial_shapes",
               "image_sizes", "token_type_ids", "mm_token_type_ids")
