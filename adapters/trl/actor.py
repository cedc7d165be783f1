"""TRL's actor method at the `actor_logprobs` boundary: ``GRPOTrainer._get_per_token_logps_and_entropies``
(``_get_per_token_logps`` before entropies were returned) called on a bare trainer with a stand-in
model (sentinel/adapters/standin.py) that returns the drawn logits for the ids it is given.

TRL's layout, translated here: the batch is ``prompt_completion_ids``, prompts left-padded to the
longest prompt, completions right-padded to the longest completion, and ``logits_to_keep`` the
completion width; the method scores every completion column. A canonical row's completion starts
at its first trained token (every real token before it is prompt; a row with no trained token is
all prompt), so its holes and any real token after its last trained one are completion tokens
that are scored and not trained. The method's [B, C] results go back to the canonical positions
they score. The method itself micro-batches (``batch_size``), calls the model, drops the last
position, keeps ``logits_to_keep`` columns, divides by ``self.temperature`` and gathers: nothing of
that is done here.
"""

from __future__ import annotations

import inspect

import torch

from sentinel.adapters.binding import bind
from sentinel.adapters.contract import BoundaryResult, Precondition, implements, refuse
from sentinel.adapters.standin import LogitsTable, StandInLM, one_span_after_a_token, real_positions, \
    same_ids_same_logits
from sentinel.errors import Unsupported

from .bare import bare_trainer
from .conventions import CONFIG, GRPO

ACTOR = "actor_logprobs"
_ONE_MODEL = "https://github.com/huggingface/trl/blob/main/trl/trainer/grpo_trainer.py"


def trl_layout(tokens: torch.Tensor, attn: torch.Tensor, loss: torch.Tensor):
    """(input_ids [B, P + C], attention_mask, logits_to_keep C, and per row the canonical
    positions of its C completion columns (-1 past its completion))."""
    rows = []
    for b in range(tokens.shape[0]):
        pos = real_positions(attn[b])
        trained = loss[b, pos].bool()
        start = int(trained.nonzero()[0]) if bool(trained.any()) else int(pos.numel())
        rows.append((pos[:start], pos[start:]))
    width_p = max(int(p.numel()) for p, _ in rows)
    width_c = max(1, max(int(c.numel()) for _, c in rows))  # a generation returns at least one column
    ids = tokens.new_zeros(len(rows), width_p + width_c)
    mask = torch.zeros_like(ids)
    where = torch.full((len(rows), width_c), -1, dtype=torch.long, device=tokens.device)
    for b, (p, c) in enumerate(rows):
        lo = width_p - int(p.numel())
        ids[b, lo:width_p], mask[b, lo:width_p] = tokens[b, p], 1
        ids[b, width_p:width_p + c.numel()], mask[b, width_p:width_p + c.numel()] = tokens[b, c], 1
        where[b, :c.numel()] = c
    return ids, mask, width_c, where


def canonical(values: torch.Tensor, where: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """TRL's [B, C] completion results at the canonical [B, T] positions they score (0 elsewhere)."""
    b, j = (where >= 0).nonzero(as_tuple=True)
    return values.new_zeros(shape).index_put((b, where[b, j]), values[b, j])


class ActorSurface:
    """The `actor_logprobs` boundary on TRL (mixed into `TRLAdapter`)."""

    unsupported = (refuse(ACTOR, "use_dynamic_bsz", "use_remove_padding",
                          reason="TRL's GRPOTrainer scores fixed-size micro-batches of padded rows (batch_size): it "
                                 "has no token-budget batching and no padding-free forward"),)
    preconditions = {
        "actor-one-span": Precondition(
            one_span_after_a_token, boundaries=(ACTOR,), link=_ONE_MODEL,
            reason="TRL's batch is a left-padded prompt then a right-padded completion: a row's real tokens are one "
                   "span, and a completion token always follows at least one prompt token that predicts it"),
        "actor-same-ids-same-logits": Precondition(
            same_ids_same_logits, boundaries=(ACTOR,), link=_ONE_MODEL,
            reason="a model's logits are a function of the ids it reads: two rows with the same ids get the same "
                   "logits, so the stand-in model cannot give them different ones"),
    }

    @implements(ACTOR, calls=(f"{GRPO}:GRPOTrainer._get_per_token_logps_and_entropies",
                              f"{GRPO}:GRPOTrainer._get_per_token_logps"))
    def b_actor_logprobs(self, inputs, config):
        cls = self.trainer_cls
        fn = getattr(cls, "_get_per_token_logps_and_entropies", None)
        entropies = fn is not None
        fn = fn or getattr(cls, "_get_per_token_logps", None)
        if fn is None:
            raise Unsupported("TRL's GRPOTrainer has no _get_per_token_logps at this version")
        logits, tokens = inputs["logits"], inputs["tokens"]
        ids, mask, keep, where = trl_layout(tokens, inputs["attention_mask"], inputs["loss_mask"])
        model = StandInLM(LogitsTable(logits, tokens, inputs["attention_mask"]))
        # what GRPOTrainer.__init__ reads off the model: the forward's keyword names
        keys = tuple(inspect.signature(model.forward).parameters)
        trainer = bare_trainer(cls, self.mods[CONFIG].GRPOConfig, model, temperature=float(config["temperature"]),
                               model_kwarg_keys=keys)
        method = getattr(trainer, fn.__name__)  # bound: the trainer is `self`
        kwargs = bind(method, ACTOR, {"model": model, "input_ids": ids, "attention_mask": mask, "logits_to_keep": keep},
                      {"batch_size": config["micro_batch_size"], "compute_entropy": True if entropies else None},
                      absent={"batch_size": None})
        out = method(**kwargs)
        logps, ent = (out[0], out[1]) if isinstance(out, tuple) else (out, None)
        shape = inputs["loss_mask"].shape
        outputs = {"log_probs": canonical(logps, where, shape)}
        if ent is not None:
            outputs["entropy"] = canonical(ent, where, shape)
        return BoundaryResult(outputs, function=self._ref(fn))
