"""`TRLAdapter`: TRL's GRPO loss at the canonical boundaries (see the package docstring for
what each boundary reaches and the conventions translated)."""

from __future__ import annotations

import contextlib
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.adapters.frames import locals_on_return
from sentinel.adapters.loading import keep_host_logging, source_of, version_facts
from sentinel.adapters.observables import Watch, extras
from sentinel.adapters.options import recorded, trainer_options
from sentinel.adapters.shims import hidden
from sentinel.adapters.trainer import TrainerAdapter
from sentinel.errors import TargetLoadError, Unsupported

from .actor import ActorSurface
from .bare import PROMPT, CanonicalPolicy, bare_trainer, missing_attribute, representable
from .conventions import (
    CONFIG,
    OPTION_DOMAINS,
    PINNED,
    GRPO,
    HEAVY_DEPS,
    LOSS_PATH_FILES,
    LOSS_TYPES,
    OPTIONAL,
    OUTPUTS,
    PIP_HINT,
    TOKEN_MEAN_TYPES,
    UNREACHABLE,
    WINDOW_TOKENS,
)


# the boundaries whose old log-probs are drawn (loss_agg and kl set them equal to the policy's)
_DRAWN_OLD = ("policy_loss", "cispo_loss", "opsm_mask")


def _tool() -> None:
    """A tool, so that versions which apply tool_mask only for a trainer with tools apply it."""


class TRLAdapter(ActorSurface, TrainerAdapter):
    """huggingface/trl from a checkout (``--repo``) or the installed package."""

    name = "trl"
    package, marker, extra, install_hint, heavy = "trl", GRPO, "trl", PIP_HINT, HEAVY_DEPS
    modules = (GRPO, CONFIG)
    loss_path_files = LOSS_PATH_FILES
    description = ("huggingface/trl: GRPOTrainer._compute_loss (loss types grpo, bnpo, dr_grpo, dapo, cispo; "
                   "sequence-level IS; k3 KL in the loss) and get_off_policy_mask, on a bare trainer.")
    declines = {
        "advantages": "TRL computes GRPO advantages inside generation (_generate_and_score_completions), which "
                      "needs the model, the reward functions and the accelerator's gather",
        "reward_norm": "TRL's reward normalisation is inline in _generate_and_score_completions (generation)",
        "gae": "TRL's GRPOTrainer has no value model and no GAE",
        "gspo_kl": "TRL computes the sequence log-ratio inline in _compute_loss (use policy_loss with "
                   "importance_sampling_level sequence)",
        "is_correction": "TRL's vLLM importance-sampling ratio is computed during generation "
                         "(_generate_and_score_completions); _compute_loss only multiplies by it",
    }

    option_domains, pinned, unreachable = OPTION_DOMAINS, PINNED, UNREACHABLE

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        super().__init__(root, device, options)
        self.source = ""  # this version's GRPOTrainer._compute_loss

    # --- loading ------------------------------------------------------------------------
    def _importing(self):
        # TRL imports its vLLM / optional integrations when find_spec finds them: not another target's stubs
        stack = contextlib.ExitStack()
        stack.enter_context(keep_host_logging())
        stack.enter_context(hidden(list(OPTIONAL)))
        return stack

    def _facts(self, root: Path) -> dict[str, Any]:
        cls = getattr(self.mods[GRPO], "GRPOTrainer", None)
        if not isinstance(cls, type) or not callable(getattr(cls, "_compute_loss", None)):
            raise TargetLoadError("trl target: GRPOTrainer._compute_loss is absent at this version "
                                  "(it arrived in v0.17)")
        self.source = source_of(cls._compute_loss)
        return {"fused_lm_head": "fused_lm_head=True" in source_of(self._logps_method(cls))}

    def _version(self, root: Path, from_checkout: bool) -> dict[str, Any]:
        version = self._checkout_version(root) if from_checkout else metadata.version("trl")
        return version_facts(root, version, from_checkout)

    @staticmethod
    def _checkout_version(root: Path) -> str | None:
        """A checkout's version: its VERSION file (1.x), else ``__version__`` in trl/__init__.py."""
        vfile = root / "VERSION"
        if vfile.is_file():
            return vfile.read_text(errors="replace").strip()
        init = root / "trl" / "__init__.py"
        text = init.read_text(errors="replace") if init.is_file() else ""
        m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        return m.group(1) if m else None

    @staticmethod
    def _logps_method(cls: type):
        return getattr(cls, "_get_per_token_logps_and_entropies", None) or cls._get_per_token_logps

    @property
    def trainer_cls(self) -> type:
        return self.mods[GRPO].GRPOTrainer

    def _has(self, text: str) -> bool:
        """Whether this version's _compute_loss mentions `text` (an option or loss type it has)."""
        return text in self.source

    # --- one call of _compute_loss --------------------------------------------------------
    def _advantages(self, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """GRPO's one advantage per sequence when a row's valid tokens share one (its value; 0 for a
        row with none); else the per-token [B, T] advantages, where _compute_loss takes them."""
        m = mask.bool()
        first = torch.where(m.any(-1), m.float().argmax(-1), torch.zeros(m.shape[0], dtype=torch.long, device=m.device))
        row = adv.gather(1, first[:, None])
        uniform = bool(torch.where(m, adv == row, torch.ones_like(m)).all())
        if uniform:
            return torch.where(m.any(-1), row[:, 0], torch.zeros_like(row[:, 0]))
        if "advantages.dim() == 1" not in self.source:
            raise Unsupported("TRL's GRPO takes one advantage per sequence at this version; these advantages differ "
                              "within a sequence")
        return adv

    def _loss(self, boundary: str, inputs: dict[str, torch.Tensor], *, loss_type: str, eps_low: float,
              eps_high: float, beta: float = 0.0, advantages: torch.Tensor | None = None,
              extra: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call _compute_loss once on the canonical batch; the loss and its locals at return.
        `config`: the boundary's config, whose trainer options (TRAINER_OPTIONS) are set too."""
        extra, more = dict(extra or {}), {}
        if config is not None:
            loss_type, beta, inputs, more = self._trainer_options(config, inputs, loss_type, beta, extra)
        if f'"{loss_type}"' not in self.source:
            raise Unsupported(f"TRL's _compute_loss has no loss_type {loss_type!r} at this version")
        mask = inputs["loss_mask"]
        B, T = mask.shape
        dev = mask.device
        lp = inputs["log_probs"]
        pos = torch.arange(T, device=dev).expand(B, T)
        real = pos <= torch.where(mask.bool(), pos, torch.full_like(pos, -1)).amax(-1, keepdim=True)
        # attention over the completion: every token up to the row's last trained one; the untrained
        # tokens inside (tool output, observations) are TRL's tool_mask where it has one
        completion_mask = real.long()
        tool = None
        if bool((real & ~mask.bool()).any()):
            if self._has('"tool_mask"'):
                # TRL pads tool_mask with 1 past each completion (generation's pad(..., padding_value=1)):
                # only completion_mask masks the padding there
                tool = torch.where(real, mask.long(), torch.ones_like(completion_mask))
            else:
                completion_mask = mask.long()  # before tool_mask: the loss mask is the completion mask
        batch: dict[str, Any] = {
            "prompt_ids": torch.zeros(B, PROMPT, dtype=torch.long, device=dev),
            "prompt_mask": torch.ones(B, PROMPT, dtype=torch.long, device=dev),
            "completion_ids": torch.zeros(B, T, dtype=torch.long, device=dev),
            "completion_mask": completion_mask,
            "advantages": advantages if advantages is not None else self._advantages(inputs["advantages"], mask),
            "old_per_token_logps": inputs["old_log_probs"],
            "num_items_in_batch": mask.sum().float(),
            **more,
        }
        if boundary in _DRAWN_OLD and self._has("old_per_token_logps is None") and torch.equal(
                inputs["old_log_probs"].detach(), lp.detach()):
            # on policy (one iteration per generation) TRL's generation stores no old log-probs and
            # _compute_loss takes per_token_logps.detach() in their place
            del batch["old_per_token_logps"]
        if inputs.get("rollout_log_probs") is not None:  # vLLM's own log-probs, kept by generation beside
            batch["sampling_per_token_logps"] = inputs["rollout_log_probs"]  # the old ones (OPSM reads them)
        values: dict[str, Any] = dict(extra or {})
        if tool is not None:
            batch["tool_mask"] = tool
            values["tools"] = [_tool]  # 0.2x apply tool_mask only when the trainer has tools
        if beta:
            batch["ref_per_token_logps"] = inputs["ref_log_probs"]
            # versions that score the reference model inside the loss
            values["ref_model"] = CanonicalPolicy(representable(inputs["ref_log_probs"], mask)).eval()
        model = CanonicalPolicy(representable(lp, mask))
        model.train(bool(values.pop("model.training", True)))  # a trainer option, read as self.model.training
        sync = bool(values.pop("accelerator.sync_gradients", True))  # False: inside an accumulation window
        limit = values.pop("max_completion_length", None) or T  # generation pads to the batch's longest
        if limit < T:
            raise Unsupported(f"completions of {T} tokens exceed max_completion_length {limit}")
        if values.get("_entropy_window_stats") is not None:  # the window's earlier micro-batch: [sum, count]
            values["_entropy_window_stats"] = torch.tensor(
                [values["_entropy_window_stats"] * WINDOW_TOKENS, float(WINDOW_TOKENS)], dtype=lp.dtype, device=dev)
        trainer = bare_trainer(self.trainer_cls, self.mods[CONFIG].GRPOConfig, model, loss_type=loss_type,
                               epsilon=eps_low, epsilon_low=eps_low, epsilon_high=eps_high, beta=beta,
                               max_completion_length=limit, **values)
        trainer.accelerator.sync_gradients = sync
        trainer = recorded(trainer, instance=True)  # the options _compute_loss reads (self.*, self.args.*)
        fn = self.trainer_cls._compute_loss
        watch = Watch(getattr(trainer, "args", None) or {}, "config")
        try:
            # OPSM's sequence KL too, as get_off_policy_mask (called inside) has it at its return
            opsm = getattr(self.trainer_cls, "get_off_policy_mask", None)
            with locals_on_return(fn, OUTPUTS + ("avg_seq_kl",), *([opsm] if callable(opsm) else [])) as frames:
                loss = trainer._compute_loss(model, batch)
        except AttributeError as e:
            why = missing_attribute(e, self.facts.get("version", "?"))
            if why is None:
                raise
            raise RuntimeError(why) from None
        seen = frames[-1] if frames else {}
        full = lambda t: t.expand(B, T) if t is not None and t.dim() == 2 else t  # noqa: E731 - (B, 1) -> [B, T]
        # the loss, the metrics the call logged (trainer._metrics) and what it changed in args
        # and the adaptive entropy controller's state, which the next step reads
        state = {k: getattr(trainer, k, None) for k in ("entropy_coef", "_last_world_entropy", "_entropy_window_stats")}
        observed = extras({"value": loss, "logged": getattr(trainer, "_metrics", None), "state": state}, watch)
        kl = next((f["avg_seq_kl"] for f in frames if isinstance(f.get("avg_seq_kl"), torch.Tensor)), None)
        if kl is not None:  # [B, 1]: the KL each sequence's keep / drop decision compared with the threshold
            observed["local:avg_seq_kl"] = kl.detach()
        return {"loss": loss, **{k: full(seen.get(k)) for k in OUTPUTS}, "extras": observed}

    def _trainer_options(self, config: dict[str, Any], inputs: dict[str, torch.Tensor], loss_type: str, beta: float,
                         extra: dict[str, Any]) -> tuple[str, float, dict[str, torch.Tensor], dict[str, Any]]:
        """The drawn trainer options (`option_domains`, `trainer:<name>`) set where _compute_loss
        reads them: on the bare trainer / its args (`extra`), or as a batch entry (returned)."""
        opts = trainer_options(config)
        more: dict[str, Any] = {}
        if opts.get("loss_type") is not None:
            loss_type = self._policy_type(config.get("loss_agg", "token-mean"), opts["loss_type"])
        if opts.get("beta"):
            beta = float(opts["beta"])
            if "ref_log_probs" not in inputs:  # the behaviour policy as the KL reference
                inputs = {**inputs, "ref_log_probs": inputs["old_log_probs"].detach()}
        for name, value in opts.items():  # the others: an attribute of the trainer, or a GRPOConfig field
            if name not in ("loss_type", "beta") and value is not None:
                extra[name] = value
        if opts.get("entropy_coef") or opts.get("use_adaptive_entropy"):  # as GRPOTrainer.__init__ sets it
            extra["_entropy_bonus_enabled"] = True
        if opts.get("use_vllm") and opts.get("vllm_importance_sampling_correction"):
            if not self._has("vllm_importance_sampling_correction"):
                raise Unsupported("TRL has no vLLM importance-sampling correction at this version")
            # generation's train / rollout ratio, which _compute_loss multiplies in
            rollout = inputs.get("rollout_log_probs", inputs["old_log_probs"])
            more["importance_sampling_ratio"] = torch.exp(inputs["old_log_probs"] - rollout).detach()
        return loss_type, beta, inputs, more

    def _clip(self, config: dict[str, Any]) -> tuple[float, float]:
        return float(config["eps_clip"]), float(config["eps_clip_high"])

    def _policy_type(self, agg: str, drawn: str | None = None) -> str:
        lt = drawn or self.options.get("loss_type")
        if lt:
            if agg != "token-mean" and lt in TOKEN_MEAN_TYPES:
                raise Unsupported(f"TRL's {lt!r} loss reduces token-mean, not {agg}")
            return lt
        if agg not in LOSS_TYPES:
            raise Unsupported(f"TRL has no {agg} loss (grpo: seq-mean-token-mean, bnpo / dapo: token-mean, dr_grpo: "
                              f"sum / (B * max_completion_length))")
        return LOSS_TYPES[agg]

    # --- boundaries -----------------------------------------------------------------------
    @implements("policy_loss", calls=(f"{GRPO}:GRPOTrainer._compute_loss",))
    def b_policy_loss(self, inputs, config):
        low, high = self._clip(config)
        loss_type = self._policy_type(config["loss_agg"])
        if loss_type == "cispo":
            raise Unsupported("options.loss_type cispo: use the cispo_loss boundary")
        extra: dict[str, Any] = {}
        if config["eps_clip_c"] is not None:
            c = float(config["eps_clip_c"])
            if "self.args.delta" not in self.source:
                raise Unsupported("TRL has no two-sided clipping (args.delta) at this version")
            if c <= 1.0 + high:
                raise Unsupported(f"dual clip c={c}: TRL's args.delta caps the ratio, which equals the dual clip "
                                  f"only for c > 1 + eps_clip_high")
            extra["delta"] = c
        level = config["importance_sampling_level"]
        if level != "token":
            if not self._has("importance_sampling_level"):
                raise Unsupported("TRL has no importance_sampling_level (GSPO) at this version")
            extra["importance_sampling_level"] = level
        if config["use_decoupled_loss"] or config["rejection_sampling"] is not None:
            raise Unsupported("TRL has no decoupled PPO loss")
        out = self._loss("policy_loss", inputs, loss_type=loss_type, eps_low=low, eps_high=high, extra=extra,
                         config=config)
        outputs = {"pg_loss": out["per_token_loss"], "loss": out["loss"]}
        if out["is_region_clipped"] is not None:
            outputs["clipfrac"] = out["is_region_clipped"].float()
        return BoundaryResult(outputs, function=self._ref(self.trainer_cls._compute_loss), extras=out["extras"])

    @implements("cispo_loss", calls=(f"{GRPO}:GRPOTrainer._compute_loss",))
    def b_cispo_loss(self, inputs, config):
        """TRL's CISPO: -sg(min(ratio, epsilon_high)) * A * log pi, reduced over the batch's tokens
        (num_items_in_batch): the canonical upper clip 1 + eps_clip_high, no lower clip."""
        low, high = self._clip(config)
        if low < 1.0:
            raise Unsupported(f"TRL's CISPO caps the ratio from above only (epsilon_high); eps_clip {low} < 1 asks "
                              f"for a lower clip at {1 - low}")
        if config["loss_agg"] != "token-mean":
            raise Unsupported(f"TRL's CISPO reduces token-mean (num_items_in_batch), not {config['loss_agg']}")
        if config["use_decoupled_loss"] or config["rejection_sampling"] is not None:
            raise Unsupported("TRL has no decoupled CISPO loss")
        out = self._loss("cispo_loss", inputs, loss_type="cispo", eps_low=0.2, eps_high=1.0 + high, config=config)
        return BoundaryResult({"pg_loss": out["per_token_loss"], "loss": out["loss"]},
                              function=self._ref(self.trainer_cls._compute_loss), extras=out["extras"])

    @implements("loss_agg", calls=(f"{GRPO}:GRPOTrainer._compute_loss",))
    def b_loss_agg(self, inputs, config):
        """TRL's reductions through _compute_loss: with log pi = log pi_old (ratio 1, no clip) and
        advantages -values, the per-token loss it reduces is `values`."""
        loss_type = self._policy_type(config["mode"])
        mask = inputs["loss_mask"]
        v = inputs["values"]
        lp = torch.full(mask.shape, -1.0, dtype=v.dtype if v.is_floating_point() else torch.float32, device=mask.device)
        batch = {"log_probs": lp, "old_log_probs": lp.clone(), "loss_mask": mask, "advantages": -v}
        out = self._loss("loss_agg", batch, loss_type=loss_type, eps_low=0.2, eps_high=0.2,
                         advantages=self._advantages(-v, mask))
        return BoundaryResult({"loss": out["loss"]}, function=self._ref(self.trainer_cls._compute_loss),
                              extras=out["extras"])

    @implements("opsm_mask", calls=(f"{GRPO}:GRPOTrainer.get_off_policy_mask", f"{GRPO}:GRPOTrainer._compute_loss"))
    def b_opsm_mask(self, inputs, config):
        if not callable(getattr(self.trainer_cls, "get_off_policy_mask", None)):
            raise Unsupported("TRL has no off-policy sequence masking (get_off_policy_mask) at this version")
        if config["loss_agg"] != "token-mean":
            raise Unsupported("the opsm_mask boundary's reduced loss is token-mean")
        low, high = self._clip(config)
        out = self._loss("opsm_mask", inputs, loss_type=self.options.get("loss_type") or "bnpo", eps_low=low,
                         eps_high=high, extra={"off_policy_mask_threshold": float(config["opsm_delta"])}, config=config)
        mask = out["off_policy_mask"]
        return BoundaryResult({"opsm_mask": mask.to(out["per_token_loss"].dtype), "pg_loss": out["per_token_loss"],
                               "reduced_policy_loss": out["loss"]},
                              function=self._ref(self.trainer_cls.get_off_policy_mask), extras=out["extras"])

    @implements("kl", calls=(f"{GRPO}:GRPOTrainer._compute_loss",))
    def b_kl(self, inputs, config):
        """TRL's k3 KL, computed inside _compute_loss (beta 1, zero advantages): its
        ``per_token_kl`` tensor at return."""
        if config["kl_type"] != "k3":
            raise Unsupported(f"TRL's GRPO KL is k3 (exp(ref - lp) - (ref - lp) - 1, unclamped), not "
                              f"{config['kl_type']!r}")
        mask = inputs["loss_mask"]
        lp = inputs["log_probs"]
        batch = {**inputs, "old_log_probs": lp.detach(), "advantages": torch.zeros(mask.shape, device=mask.device)}
        out = self._loss("kl", batch, loss_type="bnpo", eps_low=0.2, eps_high=0.2, beta=1.0,
                         advantages=torch.zeros(mask.shape[0], device=mask.device))
        return BoundaryResult({"kl": out["per_token_kl"]}, function=self._ref(self.trainer_cls._compute_loss),
                              extras=out["extras"])
