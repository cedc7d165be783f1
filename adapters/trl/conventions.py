"""TRL's own names, as the adapter speaks them: the modules of its GRPO loss, the heavy modules
their import reaches but the loss never calls, and its loss types."""

from __future__ import annotations

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
