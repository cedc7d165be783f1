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
that is done here.
"""

from __future__ import annotations

import inspect

from sentinel.adapters.binding import bind
from sentinel.adapters.contract import BoundaryResult, implements, refuse
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
        model = StandInLM(LogitsTable(logits, tokens, inputs["attention_mask"]))
        # what GRPOTrainer.__init__ reads off the model: the forward's keyword names
        keys = tuple(inspect.signature(model.forward).parameters)
        # the entropy bonus on (trainer:entropy_coef): the method then keeps the entropies in the graph
        coef = float(config.get("trainer:entropy_coef") or 0.0)
        trainer = bare_trainer(cls, self.mods[CONFIG].GRPOConfig, model, temperature=float(config["temperature"]),
                               model_kwarg_keys=keys, entropy_coef=coef, _entropy_bonus_enabled=coef != 0.0)
        method = getattr(trainer, fn.__name__)  # bound: the trainer is `self`
        kwargs = bind(method, ACTOR, {"model": model, "input_ids": ids, "attention_mask": mask, "logits_to_keep": keep},
                      {"batch_size": config["micro_batch_size"], "compute_entropy": True if entropies else None},
                      absent={"batch_size": None})
        out = method(**kwargs)
        logps, ent = (out[0], out[1]) if isinstance(out, tuple) else (out, None)
        shape = inputs["loss_mask"].shape
        outputs = {"log_probs": scatter_back(logps, where, shape)}
        if ent is not None:
            outputs["entropy"] = scatter_back(ent, where, shape)
        return BoundaryResult(outputs, function=self._ref(fn))
