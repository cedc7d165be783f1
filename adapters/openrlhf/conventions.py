"""OpenRLHF's own names and shapes, as the adapter speaks them: the modules of its loss path,
the heavy dependencies they import, its estimator names, the ``args`` namespace its experience
maker reads (flat before 0.11, nested ``args.algo.advantage.*`` after) and its ``Experience``
records built with the fields a version has."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import torch

from sentinel.adapters.options import pin

LOSS = "openrlhf.models.loss"
UTILS = "openrlhf.models.utils"
MAKER = "openrlhf.trainer.ppo_utils.experience_maker"
EXPERIENCE = "openrlhf.trainer.ppo_utils.experience"  # Experience moved here from MAKER (0.8)
KL_CONTROLLER = "openrlhf.trainer.ppo_utils.kl_controller"
LOSS_UTILS = "openrlhf.utils.loss_utils"  # the actor's loss normalisers (0.11)
SEQLEN = "openrlhf.utils.seqlen_balancing"  # split_rollout_samples' partition under dynamic batching

# What `sentinel history` watches: the files of the modules above.
LOSS_PATH_FILES = ("openrlhf/models/loss.py", "openrlhf/models/utils.py",
                   "openrlhf/trainer/ppo_utils/experience_maker.py", "openrlhf/trainer/ppo_utils/experience.py", "openrlhf/trainer/ppo_utils/kl_controller.py",
                   "openrlhf/utils/loss_utils.py")

PIP_HINT = "pip install --no-deps openrlhf==0.11.2 && pip install 'rl-sentinel[openrlhf]'"

# Third-party modules OpenRLHF's import chain (openrlhf.models -> actor/model, deepspeed;
# experience_maker -> ray, vllm, the launcher) reaches at module level but no boundary calls.
# Found by importing every sampled commit since v0.5.0 (benchmarks/bench_import_openrlhf_trl.py)
# with torch and RL-Sentinel's dependencies only; stubbed only when not installed.
HEAVY_DEPS = frozenset({
    "deepspeed", "flash_attn", "peft", "transformers", "ray", "vllm", "bitsandbytes", "optimum", "accelerate",
    "datasets", "pylatexenc", "torchdata", "aiohttp", "requests", "wandb", "tensorboard", "tensorboardX",
    "jsonlines", "loralib", "einops", "tqdm", "torchmetrics", "isort", "math_verify", "latex2sympy2",
    "transformers_stream_generator", "flask", "fastapi", "uvicorn", "liger_kernel", "ring_flash_attn",
    "sentencepiece", "tokenizers", "safetensors", "huggingface_hub", "psutil", "packaging", "openai", "msgspec",
    "nvtx", "pynvml", "triton", "mpi4py", "qwen_vl_utils", "PIL", "torchvision",
})
# Below a stubbed flash_attn: `log_probs_from_logits` tries this import and falls back to
# plain torch on ImportError; a stub here would send it down the Triton path.
BLOCKED = ("flash_attn.ops.triton.cross_entropy",)

# Canonical estimator -> OpenRLHF's `advantage_estimator` (grpo -> group_norm, or dr_grpo when
# the scenario's reward_norm keeps the group mean only: see `estimator`).
ESTIMATORS = {"gae": "gae", "ppo": "gae", "reinforce_plus_plus": "reinforce",
              "reinforce_plus_plus_baseline": "reinforce_baseline", "rloo": "rloo", "grpo": "group_norm"}
GROUP_NORM_EPS = 1e-9  # group_norm: (r - mean) / (std + 1e-9), torch.std (unbiased)


class Args:
    """The trainer's ``args`` (a flat argparse Namespace, or ``hierarchize``'s nested one):
    attributes the adapter sets, nested namespaces by dotted name; reading any other raises
    AttributeError naming it (so ``getattr(args.reward, "x", None)`` still gets its default),
    and every read is recorded in `reads` (which code paths ran). Recorded like a config
    (adapters.options) while a hunt observes the call."""

    __sentinel_options__ = True

    def __init__(self, values: dict[str, Any], path: str = "", reads: set[str] | None = None):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_reads", set() if reads is None else reads)
        nested: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            head, dot, rest = key.partition(".")
            if dot:
                nested.setdefault(head, {})[rest] = value
            else:
                object.__setattr__(self, key, value)
        for head, sub in nested.items():
            object.__setattr__(self, head, Args(sub, f"{path}{head}.", self._reads))

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_"):
            object.__getattribute__(self, "_reads").add(object.__getattribute__(self, "_path") + name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # a copy being built (copy.copy, adapters.options) has no _path yet
            raise AttributeError(name)
        raise AttributeError(f"OpenRLHF reads args.{self._path}{name}, which the adapter does not set")


def trainer_args(*, estimator: str, n: int, gamma: float, lambd: float, clip_range: tuple[float, float] | None,
                 stop_coef: float | None, drawn: dict[str, Any] | None = None, width: int = 1) -> Args:
    """The options compute_advantages_and_returns reads, under both the flat names (<= 0.10)
    and the nested ones (0.11): length penalties off unless `stop_coef` (ProRL's
    stop_properly_penalty_coef), advantage std-normalisation on (OpenRLHF's default)."""
    values = {
        # flat (argparse dests up to 0.10)
        "advantage_estimator": estimator, "n_samples_per_prompt": n, "gamma": gamma, "lambd": lambd,
        "reward_clip_range": clip_range, "no_advantage_std_norm": False, "overlong_buffer_len": None,
        "overlong_penalty_factor": 1.0, "stop_properly_penalty_coef": stop_coef,
        # nested (0.11: hierarchize)
        "algo.advantage.estimator": estimator, "algo.advantage.gamma": gamma, "algo.advantage.lambd": lambd,
        "algo.advantage.no_std_norm": False, "rollout.n_samples_per_prompt": n, "reward.clip_range": clip_range,
        "reward.overlong_buffer_len": None, "reward.overlong_penalty_factor": 1.0,
        "reward.stop_properly_penalty_coef": stop_coef,
    }
    for name, value in (drawn or {}).items():  # trainer options (OPTION_DOMAINS), under both spellings
        if name in ARG_NAMES and value is not None:
            values.update({k: value for k in ARG_NAMES[name]})
            if name == "overlong_buffer_len":  # the penalty counts from the generation's max length
                values.update({"generate_max_len": width, "rollout.max_new_tokens": width})
    return Args(values)


# trainer option -> the args it sets (flat <= 0.10, nested 0.11)
ARG_NAMES = {
    "no_advantage_std_norm": ("no_advantage_std_norm", "algo.advantage.no_std_norm"),
    "overlong_buffer_len": ("overlong_buffer_len", "reward.overlong_buffer_len"),
    "overlong_penalty_factor": ("overlong_penalty_factor", "reward.overlong_penalty_factor"),
}
# Under dynamic batching, the micro-batches of the optimizer step the drawn one belongs to (setup_dynamic_batch's
# partition, sized by train.max_tokens_per_gpu; not an option the trainer reads): more than one, so that the step's
# counts differ from the micro-batch's own (with one they are equal, and the dynamic arm is indistinguishable)
DYNAMIC_STEP = 3
# rollout.micro_batch_size (micro_rollout_batch_size before 0.11): the rows per experience split_rollout_samples
# makes; 1 is the trainer's default, ROLLOUT_AT_ONCE a micro-batch as large as any drawn rollout (one experience)
MICRO_ROLLOUT_BATCH, ROLLOUT_AT_ONCE = 1, 256
VLLM_IS_THRESHOLD = [0.5, 2.0]  # policy_loss's trainer option enable_vllm_is_correction: the band it uses

# Trainer options the hunt draws (adapters.options: `trainer:<name>`, OpenRLHF's default first):
# the token_level_loss flag as a command line sets it (GSPO must override it), the vLLM IS correction inside PolicyLoss on the policy loss (every correction type, PPO and
# GSPO), the sequence-masked TIS on is_correction, and the advantage whitening without its std
# and the DAPO overlong penalty on advantages.
OPTION_DOMAINS = {
    # reward_norm: the estimator whose group statistics normalise (algo.advantage.estimator; None: the one
    # the canonical mean / std levels name): rloo's leave-one-out mean and reinforce_baseline's group mean
    # take no std
    "reward_norm": {"trainer:advantage_estimator": (None, "rloo", "reinforce_baseline")},
    "policy_loss": {"trainer:token_level_loss": (None, True, False),  # None: as loss_agg says
                    "trainer:enable_vllm_is_correction": (False, True),
                    "trainer:vllm_is_correction_type": ("tis", "icepop", "seq-mask-tis"),
                    # train.dynamic_batch_enable: the actor's normalisers come from the replay buffer's
                    # per-step counts (get_loss_batch_info's dynamic arm), a step of DYNAMIC_STEP micro-batches
                    "trainer:dynamic_batch_enable": (False, True)},
    "is_correction": {"trainer:vllm_is_correction_type": (None, "seq-mask-tis")},
    "advantages": {"trainer:no_advantage_std_norm": (False, True), "trainer:overlong_buffer_len": (None, 2),
                   "trainer:overlong_penalty_factor": (1.0, 0.5),
                   # the experiences the maker gets (split_rollout_samples): one per micro-batch of rows, or
                   # train.dynamic_batch_enable's seqlen-balanced partition (prompts interleaved across experiences)
                   "trainer:micro_rollout_batch_size": (MICRO_ROLLOUT_BATCH, ROLLOUT_AT_ONCE),
                   "trainer:dynamic_batch_enable": (False, True)},
}
PINNED = (
    *pin("*", "training", reason="nn.Module's train/eval flag: PolicyLoss has no dropout or mode-dependent term"),
    *pin("policy_loss", "vllm_is_truncated_threshold", reason="the band of policy_loss's trainer option "
         "enable_vllm_is_correction is fixed (VLLM_IS_THRESHOLD); is_correction draws it (tis_clip_low, tis_clip)"),
    *pin("is_correction", "dual_clip", reason="the is_correction boundary's loss is the plain PPO clip (policy_loss "
                                              "draws eps_clip_c)"),
    *pin("is_correction", "enable_vllm_is_correction", reason="the is_correction boundary is the correction switched "
                                                              "on (policy_loss draws it off and on)"),
    *pin("is_correction", "policy_loss_type", reason="OpenRLHF weighs by the IS ratio under ppo only (under gspo the "
                                                     "rollout ratio enters the sequence ratio: policy_loss draws it)"),
    *pin("advantages", "reward.stop_properly_penalty_coef", "stop_properly_penalty_coef",
         reason="set from the canonical mask_no_eos_with_zero (0.0 when on, None when off)"),
    *pin("reward_norm", "algo.advantage.no_std_norm", "no_advantage_std_norm", reason="reward_norm observes the "
         "estimator's group statistics before the maker's advantage whitening (the advantages boundary draws it)"),
    *pin("reward_norm", "algo.advantage.gamma", "reward.clip_range", "reward.overlong_buffer_len",
         "reward.stop_properly_penalty_coef", reason="reward_norm is the group statistics on one-token responses "
         "with no KL: discounting, reward clipping and the length penalties are the advantages boundary's, which "
         "draws them"),
)

# Branches of mapped functions no call from one CPU process can take (hunt --coverage lists them apart).
_RANKS = "the counts are all-reduced over data-parallel ranks only when torch.distributed is initialised: several processes"
_GUARD = "raises on an estimator name the adapter never passes (it maps the canonical kl_type to k1 / k2 / k3)"
UNREACHABLE = {
    f"{LOSS_UTILS}:get_loss_batch_info": {
        "if dist.is_available() and dist.is_initialized() -> dist.all_reduce": _RANKS},
    f"{UTILS}:compute_approx_kl": {'elif kl_estimator == "k3" -> raise ValueError': _GUARD},
    f"{LOSS}:PolicyLoss.forward": {'elif self.policy_loss_type == "gspo" -> raise ValueError':
                                   "raises on a policy_loss_type the adapter never passes (ppo, or gspo for "
                                   "importance_sampling_level sequence)"},
    f"{MAKER}:RemoteExperienceMaker.compute_advantages_and_returns": {
        'elif self.advantage_estimator in ["reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo"] '
        '-> raise Exception': "raises on an estimator name the adapter never passes (ESTIMATORS maps the canonical "
                              "ones to OpenRLHF's)"},
    f"{MAKER}:RemoteExperienceMaker.get_advantages_and_returns": {
        "if action_mask is not None -> for t in reversed": "every OpenRLHF caller passes the experience's action_mask, "
                                                           "and the canonical loss_mask is a required input"},
}


def replay_buffer(mask: torch.Tensor, micro_batches: int | None) -> types.SimpleNamespace:
    """The replay buffer's per-step counts get_loss_batch_info reads under dynamic batching, as
    setup_dynamic_batch leaves them on one rank for a step of `micro_batches` micro-batches with
    this one's counts each (its partition balances token counts): the step's action tokens and
    non-empty rows, one entry per micro-batch. None: a buffer dynamic batching never set up
    (empty lists, as NaiveReplayBuffer.__init__ leaves them)."""
    n = micro_batches or 0
    tokens, rows = float(mask.sum()), float((mask.reshape(mask.shape[0], -1).sum(-1) > 0).sum())
    return types.SimpleNamespace(dynamic_batch_num_tokens=[tokens * n] * n, dynamic_global_batch_size=[rows * n] * n)


def placed(parts: list[list[int]], ts: list[torch.Tensor]) -> torch.Tensor:
    """One batch from each micro-batch's tensor (rows at the positions `parts` names); values
    that are not one row per position of their micro-batch (a mutant's scalar, a missing call)
    are concatenated flat in experience order, so their shape tells them apart."""
    if len(parts) == 1 and len(ts) == 1 and parts[0] == list(range(len(parts[0]))):
        return ts[0]
    if len(ts) == len(parts) and all(t.dim() and t.shape[0] == len(p) for t, p in zip(ts, parts)) \
            and len({tuple(t.shape[1:]) for t in ts}) == 1:
        cat = torch.cat(ts)
        out = torch.empty_like(cat)
        out[torch.tensor([i for p in parts for i in p], device=cat.device)] = cat
        return out
    return torch.cat([t.reshape(-1) for t in ts]) if ts else torch.zeros(0)


def whitened(args: Args) -> bool:
    """True when the call normalised the advantages (its whitening reads the std switch)."""
    return bool(args._reads & {"no_advantage_std_norm", "algo.advantage.no_std_norm"})


def experience(cls: type, **values: Any) -> Any:
    """An Experience of this version: the fields it has, the others left at their defaults
    (required ones None); values it has no field for are set as attributes (``index``)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    # a tensor for a field declared a list (rewards, 2025-05: its __init__ did `rewards or []`) is
    # set after construction, as that version's experience maker did (`samples.rewards = rewards`)
    late = {k for k, v in values.items() if k in fields and isinstance(v, torch.Tensor)
            and str(fields[k].type).lower().replace("typing.", "").startswith("list")}
    kw = {k: v for k, v in values.items() if k in fields and k not in late}
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
        if name not in kw and required:
            kw[name] = None
    exp = cls(**kw)
    for k, v in values.items():
        if k not in fields or k in late:
            setattr(exp, k, v)
    return exp
