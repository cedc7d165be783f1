"""TRL's own names, as the adapter speaks them: the modules of its GRPO loss, the heavy modules
their import reaches but the loss never calls, and its loss types."""

from __future__ import annotations

from sentinel.adapters.options import pin

GRPO = "trl.trainer.grpo_trainer"
CONFIG = "trl.trainer.grpo_config"
# What `sentinel history` watches: the trainer and its config, the helpers its log-probs and
# metrics call (trl/trainer/utils.py) and the fused log-prob kernel.
LOSS_PATH_FILES = ("trl/trainer/grpo_trainer.py", "trl/trainer/grpo_config.py", "trl/trainer/utils.py",
                   "trl/kernels/logprob_entropy.py")
PIP_HINT = "pip install --no-deps trl==1.16.0 && pip install 'rl-sentinel[trl]'"

# Third-party modules TRL's import chain (trl -> trainer.grpo_trainer) reaches at module level
# but the loss never calls; found by importing every sampled commit since v0.17.0
# (benchmarks/bench_import_openrlhf_trl.py) with rl-sentinel[trl] installed. transformers,
# accelerate and huggingface_hub are imported for real (GRPOConfig is a TrainingArguments).
HEAVY_DEPS = frozenset({
    "datasets", "pandas", "pyarrow", "requests", "urllib3", "vllm", "vllm_ascend", "mergekit", "llm_blender",
    "deepspeed", "weave", "peft", "liger_kernel", "wandb", "rich", "jmespath", "math_verify", "PIL", "torchvision",
    "fastapi", "uvicorn", "aiohttp", "bitsandbytes", "openreward", "harbor", "num2words", "kernels", "trackio",
    "comet_ml", "mlflow", "flash_attn", "optimum", "unsloth", "jinja2", "psutil", "httpx", "openai",
})

# Packages TRL probes with find_spec (trl.import_utils) before importing them.
OPTIONAL = ("vllm", "vllm_ascend", "liger_kernel", "peft", "deepspeed", "mergekit", "llm_blender", "weave",
            "math_verify", "rich", "jmespath", "wandb", "bitsandbytes", "unsloth", "openreward", "harbor", "kernels")

# Canonical loss_agg -> TRL loss_type (options.loss_type picks another of the same reduction,
# e.g. "dapo" for token-mean, or "dr_grpo" whose normaliser B * max_completion_length is no
# canonical mode).
LOSS_TYPES = {"token-mean": "bnpo", "seq-mean-token-mean": "grpo"}
TOKEN_MEAN_TYPES = ("bnpo", "dapo", "cispo")
OUTPUTS = ("per_token_loss", "per_token_kl", "is_region_clipped", "off_policy_mask")

# Trainer options the hunt draws (adapters.options: `trainer:<name>`, TRL's default first) on the
# boundaries that run the whole of _compute_loss: the loss types no canonical loss_agg names
# (None: the one loss_agg maps to) and their parameters (sapo, vespo), the KL term in the loss
# (beta; the behaviour log-probs as its reference where the boundary has none), the entropy mask
# and bonus (static or adaptive), the vLLM IS ratio (exp(old - rollout)), the gradient-accumulation
# normaliser and the off-policy mask. Each value is set on the bare trainer and, where GRPOConfig has the field, its args.
_LOSS_OPTIONS = {
    "trainer:beta": (0.0, 0.04),
    "trainer:use_bias_correction_kl": (False, True),
    "trainer:top_entropy_quantile": (1.0, 0.5),
    "trainer:entropy_coef": (0.0, 0.01, 0.1),
    # Skywork-OR1's adaptive entropy control: the bonus gated by the last step's entropy against the
    # target, the coefficient updated from this step's (logged as entropy_coef); the stand-in's
    # entropies lie in [0, ln 2], so a target of 0.6 puts the update on either side
    "trainer:use_adaptive_entropy": (False, True),
    "trainer:entropy_target": (0.2, 0.6),
    # the controller's state from the last optimizer step, which gates this step's bonus (the bare
    # trainer's 0.0 lies below every target: the gate never closed)
    "trainer:_last_world_entropy": (0.0, 0.4, 0.6),
    # evaluation (prediction_step) too: no accumulation normaliser, no controller update
    "trainer:model.training": (True, False),
    "trainer:use_vllm": (False, True),
    "trainer:vllm_importance_sampling_correction": (False, True),
    "trainer:sapo_temperature_pos": (1.0, 0.5),
    "trainer:sapo_temperature_neg": (1.05, 2.0),
    "trainer:vespo_k_pos": (2.0, 1.0),
    "trainer:vespo_lambda_pos": (3.0, 1.0),
    "trainer:vespo_k_neg": (3.0, 1.0),
    "trainer:vespo_lambda_neg": (2.0, 1.0),
    "trainer:current_gradient_accumulation_steps": (1, 2),
    "trainer:off_policy_mask_threshold": (None, 0.5),
    # the adaptive update's step and bounds: from a coefficient of 0.01, a step of 0.05 crosses either
    # bound, and bounds of 0.008 / 0.012 bind after the default step of 0.005
    "trainer:entropy_coef_delta": (0.005, 0.05),
    "trainer:entropy_coef_min": (0.0, 0.008),
    "trainer:entropy_coef_max": (1.0, 0.012),
    # a micro-batch inside an accumulation window (the accelerator does not sync): the controller only
    # accumulates; and the window's earlier micro-batches (None: this is the first; 0.5: one earlier
    # micro-batch of WINDOW_TOKENS trained tokens whose mean entropy was 0.5)
    "trainer:accelerator.sync_gradients": (True, False),
    "trainer:_entropy_window_stats": (None, 0.5),
    # an MoE policy (bare.CanonicalPolicy answers output_router_logits with a load-balancing loss)
    "trainer:aux_loss_enabled": (False, True),
    "trainer:router_aux_loss_coef": (0.001, 0.1),
    # the generation limit dr_grpo divides by (None: the batch's width; 16: longer than every completion)
    "trainer:max_completion_length": (None, 16),
    # each loss type takes its own branches (listed last when the config draw starved the first keys;
    # since strategies._configs scrambles its integer, a key's place no longer matters)
    "trainer:loss_type": (None, "dr_grpo", "dapo", "sapo", "luspo", "vespo"),
}
WINDOW_TOKENS = 4
_LOSS_TYPE_PARAMETERS = ("trainer:loss_type", "trainer:sapo_temperature_pos", "trainer:sapo_temperature_neg",
                         "trainer:vespo_k_pos", "trainer:vespo_lambda_pos", "trainer:vespo_k_neg",
                         "trainer:vespo_lambda_neg", "trainer:max_completion_length")  # read only under their loss type: policy_loss's draws
_FIXED_LOSS_TYPE = {k: v for k, v in _LOSS_OPTIONS.items() if k not in _LOSS_TYPE_PARAMETERS}
OPTION_DOMAINS = {
    "policy_loss": _LOSS_OPTIONS,
    "opsm_mask": {k: v for k, v in _FIXED_LOSS_TYPE.items() if k != "trainer:off_policy_mask_threshold"}  # opsm_delta
    | {"trainer:importance_sampling_level": ("token", "sequence")},
    "cispo_loss": _FIXED_LOSS_TYPE | {"trainer:importance_sampling_level": ("token", "sequence")},
    # with the entropy bonus on, _get_per_token_logps_and_entropies computes the entropies with their
    # gradient (a loss term); off, under no_grad (logging and the entropy mask only)
    "actor_logprobs": {"trainer:entropy_coef": (0.0, 0.01),
                       # an MoE model: the method asks for router logits and averages the micro-batches' aux losses
                       "trainer:aux_loss_enabled": (False, True),
                       # the forward's keyword names (GRPOTrainer.__init__ inspects them): "signature" takes
                       # logits_to_keep; "no_logits_to_keep" is a model that does not (SmolVLM, Idefics3)
                       "trainer:model_kwarg_keys": ("signature", "no_logits_to_keep"),
                       # a vision-language batch: which image inputs the method slices per micro-batch (actor.py)
                       "trainer:vision_inputs": (None, "pixel_values", "image_grid_thw", "image_position_ids",
                                                 "spatial_shapes", "pixel_attention_mask", "image_sizes",
                                                 "token_type_ids", "mm_token_type_ids")},
}
_LOGGING = "read for logging / profiling only (the metrics, never the loss)"
_ONE_MODEL = "the stand-in policy (adapters/trl/bare.py) has no liger kernel or sampling temperature"
_OTHER_TERMS = "the MoE aux loss is a term of the reduced loss, drawn on policy_loss, cispo_loss and opsm_mask"
_THE_ACTORS = ("the actor_logprobs boundary draws it (a forward with and without logits_to_keep): _compute_loss "
               "only hands it to _get_per_token_logps_and_entropies")
PINNED = (
    *pin("*", "args.report_to", "state.global_step", reason=_LOGGING),
    *pin("*", "temperature", reason=_ONE_MODEL),
    *pin("kl", "aux_loss_enabled", "router_aux_loss_coef", reason=_OTHER_TERMS),
    *pin("loss_agg", "aux_loss_enabled", "router_aux_loss_coef", reason=_OTHER_TERMS),
    *(p for b in ("policy_loss", "cispo_loss", "opsm_mask", "kl", "loss_agg")
      for p in pin(b, "model_kwarg_keys", reason=_THE_ACTORS)),
    *pin("kl", "beta", "loss_type", "epsilon_low", "epsilon_high", "args.delta", "importance_sampling_level",
         "off_policy_mask_threshold", "top_entropy_quantile", "use_vllm", "args.use_bias_correction_kl",
         "current_gradient_accumulation_steps",
         reason="the kl boundary observes per_token_kl alone (beta 1, zero advantages): the loss's other terms "
                "and normalisers are the policy_loss boundary's, where they are drawn"),
    *pin("loss_agg", "beta", "epsilon_low", "epsilon_high", "args.delta", "importance_sampling_level",
         "off_policy_mask_threshold", "top_entropy_quantile", "use_vllm", "current_gradient_accumulation_steps",
         reason="loss_agg runs _compute_loss at ratio 1 with no KL, mask or IS term, to observe the reduction "
                "alone; those terms are drawn on policy_loss"),
    *pin("opsm_mask", "loss_type", reason="the opsm_mask boundary's reduced loss is token-mean (bnpo)"),
    *pin("opsm_mask", "args.delta", reason="the opsm_mask boundary has no dual clip (policy_loss draws eps_clip_c)"),
    *pin("cispo_loss", "loss_type", reason="the cispo_loss boundary is loss_type cispo"),
)

# Branches of the mapped functions no call can take, each with why (`sentinel hunt --coverage`
# lists them apart; "text of the branching line -> text of the line it jumps to" is one arc)
_GUARD = "raises on a value the adapter never sets (its loss types and ratio levels are TRL's own names)"
UNREACHABLE = {
    f"{GRPO}:GRPOTrainer._compute_loss": {
        'elif self.importance_sampling_level == "sequence" -> raise ValueError': _GUARD,
        'elif self.loss_type == "vespo" -> raise ValueError': _GUARD,
        'elif self.loss_type == "luspo" -> raise ValueError': _GUARD,
    },
}
