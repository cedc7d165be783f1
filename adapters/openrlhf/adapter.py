"""`OpenRLHFAdapter`: OpenRLHF's loss-path code at the canonical boundaries (see the package
docstring for what each boundary reaches and the conventions translated)."""

from __future__ import annotations

import inspect
import types
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import torch

from sentinel.adapters.binding import bind, parameters, signature_text
from sentinel.adapters.contract import BoundaryResult, implements, refuse
from sentinel.adapters.frames import locals_on_return
from sentinel.adapters.layout import group_ids, group_layout, unpermute
from sentinel.adapters.loading import source_of, version_facts
from sentinel.adapters.observables import Watch, extras
from sentinel.adapters.options import recorded, trainer_options
from sentinel.adapters.shims import block, is_stub
from sentinel.adapters.spying import spy
from sentinel.adapters.trainer import TrainerAdapter, floating, shifts_rewards
from sentinel.errors import Unsupported

from .conventions import (
    BLOCKED,
    DYNAMIC_STEP,
    MICRO_ROLLOUT_BATCH,
    SEQLEN,
    ESTIMATORS,
    EXPERIENCE,
    GROUP_NORM_EPS,
    HEAVY_DEPS,
    KL_CONTROLLER,
    LOSS,
    LOSS_PATH_FILES,
    LOSS_UTILS,
    MAKER,
    OPTION_DOMAINS,
    PINNED,
    PIP_HINT,
    UNREACHABLE,
    VLLM_IS_THRESHOLD,
    UTILS,
    experience,
    placed,
    replay_buffer,
    trainer_args,
    whitened,
)


class OpenRLHFAdapter(TrainerAdapter):
    """OpenRLHF from a checkout (``--repo``) or the installed package."""

    name = "openrlhf"
    package, marker, extra, install_hint, heavy = "openrlhf", LOSS, "openrlhf", PIP_HINT, HEAVY_DEPS
    modules = (LOSS, UTILS)
    optional_modules = (MAKER, EXPERIENCE, KL_CONTROLLER, LOSS_UTILS, SEQLEN)
    lookup_modules = (UTILS,)
    loss_path_files = LOSS_PATH_FILES
    description = ("OpenRLHF/OpenRLHF: models.loss (PolicyLoss, aggregate_loss), models.utils (compute_approx_kl, "
                   "compute_reward) and the experience maker's advantage estimators, on one process.")
    declines = {
        "opsm_mask": "OpenRLHF has no off-policy sequence masking",
        "cispo_loss": "OpenRLHF's PolicyLoss has policy_loss_type ppo and gspo only, no CISPO",
        "gspo_kl": "OpenRLHF computes the GSPO sequence log-ratio inside PolicyLoss.forward and returns only the "
                   "aggregated loss (use the policy_loss boundary with importance_sampling_level sequence)",
    }
    option_domains, pinned, unreachable = OPTION_DOMAINS, PINNED, UNREACHABLE
    unsupported = (
        refuse("advantages", "reward_bias", "reward_scaling", "adv_norm", reason="OpenRLHF has no such option",
               when=lambda c: shifts_rewards(c) or bool(c["adv_norm"])),
    )

    # --- loading ------------------------------------------------------------------------
    def _prepare(self, root: Path) -> None:
        block(list(BLOCKED))

    def _import_optional(self, root: Path) -> None:
        for name in self.optional_modules:  # one that fails: the boundaries that need it say unsupported
            self._optional(name, strict=False)

    def _version(self, root: Path, from_checkout: bool) -> dict[str, Any]:
        vfile = root / "version.txt"
        version = vfile.read_text(errors="replace").strip() if vfile.is_file() else None
        if not from_checkout:
            try:
                version = metadata.version("openrlhf")
            except metadata.PackageNotFoundError:
                pass
        return version_facts(root, version, from_checkout)

    # --- lookups ------------------------------------------------------------------------
    def _maker_class(self, method: str, boundary: str) -> type:
        """The experience-maker class of this version that defines `method` (RemoteExperienceMaker,
        NaiveExperienceMaker or BaseExperienceMaker)."""
        mod = self.mods.get(MAKER)
        if mod is None:
            raise Unsupported(f"openrlhf's experience maker did not import: {self.errors.get(MAKER)} "
                              f"(boundary {boundary!r})")
        for name in ("RemoteExperienceMaker", "NaiveExperienceMaker", "BaseExperienceMaker"):
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and not is_stub(cls) and callable(getattr(cls, method, None)):
                return cls
        raise Unsupported(f"openrlhf {self.facts.get('version')} has no experience maker with {method} "
                          f"(boundary {boundary!r})")

    def _experience_class(self) -> type:
        for name in (EXPERIENCE, MAKER):
            cls = getattr(self.mods.get(name), "Experience", None)
            if isinstance(cls, type) and not is_stub(cls):
                return cls
        raise Unsupported("openrlhf's Experience dataclass did not import")

    # --- KL -----------------------------------------------------------------------------
    def _approx_kl(self, boundary: str, lp: torch.Tensor, ref: torch.Tensor, kl_type: str,
                   mask: torch.Tensor) -> torch.Tensor:
        """compute_approx_kl bound by name at this version: ``kl_estimator`` (k1/k2/k3), or
        ``use_kl_estimator_k3`` (k1/k3) before it, or neither (k1 only, the earliest, which
        multiplies by its ``action_mask``: the mask is passed wherever the function takes it)."""
        fn = self._fn("compute_approx_kl", boundary=boundary)
        name = self._kl_name(kl_type)
        if name is None:
            raise Unsupported(f"OpenRLHF's compute_approx_kl has no {kl_type!r} (k1, k2, k3)")
        params = parameters(fn)
        if "kl_estimator" in params:
            choice = {"kl_estimator": name}
        elif "use_kl_estimator_k3" in params and name != "k2":
            choice = {"use_kl_estimator_k3": name == "k3"}
        elif name == "k1":
            choice = {}
        else:
            raise Unsupported(f"{signature_text(fn)} has no {kl_type!r} estimator at this OpenRLHF version")
        names = list(params)  # the two log-prob tensors are its first two parameters at every version
        kw = {names[0]: lp, names[1]: ref, **choice}
        if "action_mask" in params:
            kw["action_mask"] = mask.to(lp.dtype)
        return fn(**kw)

    @implements("kl", calls=(f"{UTILS}:compute_approx_kl",))
    def b_kl(self, inputs, config):
        lp, ref = floating(inputs["log_probs"]), floating(inputs["ref_log_probs"])
        kl = self._approx_kl("kl", lp, ref, config["kl_type"], inputs["loss_mask"])
        return BoundaryResult({"kl": kl}, function=self._ref(self._fn("compute_approx_kl", boundary="kl")))

    # --- policy losses --------------------------------------------------------------------
    def _policy(self, boundary: str, inputs: dict[str, torch.Tensor], config: dict[str, Any],
                correction: dict[str, Any] | None = None) -> tuple[dict[str, Any], Callable]:
        """PolicyLoss built from the canonical config and called on one micro-batch; returns
        (outputs, the forward, its extras)."""
        cls = self._fn("PolicyLoss", LOSS, boundary=boundary)
        params = parameters(cls.__init__)
        low, high = float(config["eps_clip"]), float(config["eps_clip_high"])
        kw: dict[str, Any] = {}
        if "clip_eps_low" in params:
            kw.update(clip_eps_low=low, clip_eps_high=high)
        elif low != high:
            raise Unsupported(f"PolicyLoss has one symmetric clip_eps at this OpenRLHF version (eps_clip {low} != "
                              f"eps_clip_high {high})")
        else:
            kw["clip_eps"] = low
        if config.get("eps_clip_c") is not None:
            if "dual_clip" not in params:
                raise Unsupported("PolicyLoss has no dual_clip at this OpenRLHF version")
            kw["dual_clip"] = float(config["eps_clip_c"])
        agg = config["loss_agg"]
        if agg == "seq-mean-token-sum":
            raise Unsupported("OpenRLHF aggregates token-mean (token_level_loss) or seq-mean-token-mean, not "
                              "seq-mean-token-sum")
        level = config.get("importance_sampling_level") or "token"
        # the trainer option token_level_loss: the flag as the trainer's command line sets it,
        # whatever loss_agg says (GSPO is to force the sequence-level loss itself)
        drawn_tll = trainer_options(config).get("token_level_loss")
        if level == "sequence":
            if "policy_loss_type" not in params:
                raise Unsupported("PolicyLoss has no policy_loss_type (GSPO) at this OpenRLHF version")
            if agg != "seq-mean-token-mean" and drawn_tll is None:
                raise Unsupported("OpenRLHF's GSPO always aggregates seq-mean-token-mean (it forces "
                                  "token_level_loss off)")
            kw["policy_loss_type"] = "gspo"
        if "token_level_loss" in params:
            if drawn_tll is not None:
                kw["token_level_loss"] = bool(drawn_tll)
            elif level != "sequence":  # GSPO: PolicyLoss's own rule decides (its default flag, forced off)
                kw["token_level_loss"] = agg == "token-mean"
        elif agg != "seq-mean-token-mean":
            raise Unsupported("PolicyLoss reduces seq-mean-token-mean only at this OpenRLHF version (no "
                              "token_level_loss)")
        if config.get("use_decoupled_loss") or config.get("rejection_sampling") is not None:
            raise Unsupported("OpenRLHF has no decoupled PPO loss (its rollout correction is the is_correction "
                              "boundary)")
        correction = self._drawn_correction(config, params, correction)
        loss_fn = cls(**bind(cls, boundary, {}, {**kw, **(correction or {})}))
        loss_fn = recorded(loss_fn, instance=True)  # the options forward reads on self
        mask = inputs["loss_mask"].bool()
        call: dict[str, Any] = {"log_probs": floating(inputs["log_probs"]),
                                "old_log_probs": floating(inputs["old_log_probs"]),
                                "advantages": floating(inputs["advantages"]), "action_mask": mask}
        if correction:
            call["rollout_log_probs"] = floating(inputs.get("rollout_log_probs", inputs["old_log_probs"]))
        norms = getattr(self.mods.get(LOSS_UTILS), "get_loss_batch_info", None)
        fwd = parameters(loss_fn.forward)
        if callable(norms) and "batch_num_tokens" in fwd:
            call.update(self._batch_info(norms, boundary, mask, config))
        forward = type(loss_fn).forward
        reducer = "aggregate_loss" if callable(getattr(self.mods[LOSS], "aggregate_loss", None)) else "masked_mean"
        watch = Watch(loss_fn, "loss_fn")  # the PolicyLoss module: a forward that changes its own state
        with spy(self.mods[LOSS], reducer) as reduced, locals_on_return(forward, ("vllm_is", "coef")) as frames:
            out = loss_fn(**bind(loss_fn.forward, boundary, call))
        observed = extras(out, watch)  # the loss and the metrics forward returns beside it (clip ratio, ppo_kl, ...)
        loss = out[0] if isinstance(out, tuple) else out
        if not reduced:
            if reducer == "aggregate_loss":  # the version has it: a forward that skips it is changed code, not absent
                raise RuntimeError("PolicyLoss.forward did not call aggregate_loss (its loss is unreduced)")
            raise Unsupported(f"PolicyLoss.forward did not call {reducer} at this OpenRLHF version")
        args = reduced[0][0]
        token = args.get("loss", args.get("tensor"))
        outputs: dict[str, Any] = {"pg_loss": token, "loss": loss}
        if correction and frames:  # the IS weight: `coef` since 0.11.1, `vllm_is` before
            weight = frames[-1].get("coef", frames[-1].get("vllm_is"))
            if weight is not None:
                outputs["weights"] = weight
        return outputs, forward, observed

    @staticmethod
    def _batch_info(norms: Callable, boundary: str, mask: torch.Tensor, config: dict[str, Any]) -> dict[str, Any]:
        """The actor's normalisers for one micro-batch on one rank, asked for as
        ppo_actor.training_step asks: with its replay buffer and step, dynamic batching as drawn
        (on: the buffer holds the counts of a step of DYNAMIC_STEP micro-batches)."""
        dynamic = bool(trainer_options(config).get("dynamic_batch_enable"))
        if "dynamic_batch" not in parameters(norms):
            if dynamic:
                raise Unsupported(f"{signature_text(norms)} has no dynamic_batch at this OpenRLHF version")
            return norms(None, mask)
        buffer = replay_buffer(mask, DYNAMIC_STEP if dynamic else None)
        return norms(**bind(norms, boundary, {"strategy": None, "loss_mask": mask, "replay_buffer": buffer,
                                              "step": 0, "dynamic_batch": dynamic}))

    @staticmethod
    def _drawn_correction(config: dict[str, Any], params: Any,
                          correction: dict[str, Any] | None) -> dict[str, Any] | None:
        """The trainer options (OPTION_DOMAINS) on PolicyLoss's vLLM IS correction: switched on
        in the policy loss, or its type replaced (seq-mask-tis) on is_correction."""
        drawn = trainer_options(config)
        on, kind = drawn.get("enable_vllm_is_correction"), drawn.get("vllm_is_correction_type")
        if not on and not (correction and kind):
            return correction
        if "vllm_is_correction_type" not in params:
            raise Unsupported("PolicyLoss has no vllm_is_correction_type at this OpenRLHF version")
        out = dict(correction or {"enable_vllm_is_correction": True, "vllm_is_truncated_threshold": VLLM_IS_THRESHOLD})
        if kind:
            out["vllm_is_correction_type"] = kind
        return out

    @implements("policy_loss", calls=(f"{LOSS}:PolicyLoss.forward", f"{LOSS}:aggregate_loss",
                                      f"{LOSS_UTILS}:get_loss_batch_info"))
    def b_policy_loss(self, inputs, config):
        outputs, fn, observed = self._policy("policy_loss", inputs, config)
        outputs.pop("weights", None)
        return BoundaryResult(outputs, function=self._ref(fn), extras=observed)

    @implements("is_correction", calls=(f"{LOSS}:PolicyLoss.forward", f"{LOSS}:aggregate_loss"))
    def b_is_correction(self, inputs, config):
        """OpenRLHF's train / rollout IS correction (``is_correction_level="token"`` with mode clip or
        mask since 0.11.1; ``enable_vllm_is_correction`` tis / icepop before): weight pi_old /
        pi_rollout clamped (vanilla_tis) or zeroed outside the band (icepop), times the PPO token loss."""
        cls = self._fn("PolicyLoss", LOSS, boundary="is_correction")
        params = parameters(cls.__init__)
        method, low, high = config["method"], float(config["tis_clip_low"]), float(config["tis_clip"])
        if method == "off_policy_is":
            raise Unsupported("OpenRLHF's rollout correction weighs by pi_old / pi_rollout (tis, icepop); it has no "
                              "pi_theta / pi_rollout off-policy IS")
        if "is_correction_level" in params:  # 0.11.1: level / mode / gating / threshold
            corr = {"is_correction_level": "token", "is_correction_mode": "clip" if method == "vanilla_tis" else "mask",
                    "is_correction_gating": "ratio", "is_correction_threshold": (low, high)}
        elif "vllm_is_correction_type" in params:
            corr = {"enable_vllm_is_correction": True, "vllm_is_truncated_threshold": [low, high],
                    "vllm_is_correction_type": "tis" if method == "vanilla_tis" else "icepop"}
        elif "use_icepop" in params:
            corr = {"enable_vllm_is_correction": True, "vllm_is_truncated_threshold": [low, high],
                    "use_icepop": method == "icepop"}
        elif "vllm_is_truncated_threshold" in params:
            if method != "vanilla_tis" or low > 0:
                raise Unsupported("this OpenRLHF version's correction is TIS truncated from above only "
                                  "(vllm_is_truncated_threshold: one float)")
            corr = {"vllm_is_truncated_threshold": high}
        else:
            raise Unsupported("PolicyLoss has no vLLM IS correction at this OpenRLHF version")
        cfg = {**config, "eps_clip_c": None, "importance_sampling_level": "token", "use_decoupled_loss": False,
               "rejection_sampling": None}
        outputs, fn, observed = self._policy("is_correction", inputs, cfg, corr)
        if "weights" not in outputs:
            raise Unsupported("PolicyLoss.forward keeps no IS weight (coef / vllm_is) at this OpenRLHF version")
        return BoundaryResult(outputs, function=self._ref(fn), extras=observed)

    @implements("loss_agg", calls=(f"{LOSS}:aggregate_loss",))
    def b_loss_agg(self, inputs, config):
        fn = getattr(self.mods[LOSS], "aggregate_loss", None)
        if not callable(fn):
            raise Unsupported("OpenRLHF reduces its losses inline (PolicyLoss.forward) before aggregate_loss (0.11)")
        mode = config["mode"]
        if mode == "seq-mean-token-sum":
            raise Unsupported("aggregate_loss has token-mean (token_level_loss) and seq-mean-token-mean only")
        mask = inputs["loss_mask"].bool()
        loss = fn(**bind(fn, "loss_agg", {"loss": inputs["values"], "loss_mask": mask,
                                          "token_level_loss": mode == "token-mean"}))
        return BoundaryResult({"loss": loss}, function=self._ref(fn))

    # --- advantages -----------------------------------------------------------------------
    def _bare_maker(self, cls: type, args: Any, kl_coef: float) -> Any:
        """The experience maker without its __init__ (no actor, critic, vLLM or Ray groups): the
        attributes compute_advantages_and_returns reads."""
        maker = object.__new__(cls)
        ctl = getattr(self.mods.get(KL_CONTROLLER), "FixedKLController", None)
        if not isinstance(ctl, type) or is_stub(ctl):
            raise Unsupported("openrlhf's FixedKLController did not import")
        maker.strategy = types.SimpleNamespace(args=args)
        maker.args = args
        maker.advantage_estimator = args.advantage_estimator
        maker.kl_ctl = ctl(kl_coef)
        return maker

    def _estimates(self, boundary: str, *, rewards: torch.Tensor, mask: torch.Tensor, estimator: str,
                   group: torch.Tensor | None, group_size: int | None, values: torch.Tensor | None = None,
                   kl: torch.Tensor | None = None, kl_coef: float = 0.0, gamma: float = 1.0, lam: float = 1.0,
                   clip: float | None = None, truncated: torch.Tensor | None = None,
                   drawn: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call of compute_advantages_and_returns on one Experience holding the batch, laid
        out group by group; results put back in canonical row order."""
        cls = self._maker_class("compute_advantages_and_returns", boundary)
        method = cls.compute_advantages_and_returns
        if self.device.type != "cuda" and '"cuda"' in source_of(method):
            raise Unsupported("compute_advantages_and_returns moves the experiences to CUDA at this OpenRLHF version "
                              "(run with --device cuda)")
        n_rows = int(mask.shape[0])
        ids = group_ids(group, group_size, n_rows)
        order, sizes = group_layout(ids)
        if len(set(sizes)) != 1:
            raise Unsupported(f"OpenRLHF reshapes the rewards to (-1, n_samples_per_prompt): groups of sizes "
                              f"{sizes} cannot be laid out")
        idx = torch.tensor(order, device=mask.device)
        stop = None
        if truncated is not None:
            if "truncated" not in {f for f in getattr(self._experience_class(), "__dataclass_fields__", {})}:
                raise Unsupported("mask_no_eos_with_zero: this OpenRLHF version has no truncated flag "
                                  "(ProRL's stop_properly_penalty_coef)")
            stop = 0.0
        args = trainer_args(estimator=estimator, n=sizes[0], gamma=gamma, lambd=lam,
                            clip_range=None if clip is None else (-float(clip), float(clip)), stop_coef=stop,
                            drawn=drawn, width=int(mask.shape[-1]))
        maker = self._bare_maker(cls, recorded(args), kl_coef)  # the options the maker reads, recorded
        m = mask.bool()[idx]
        r = floating(rewards).detach().reshape(n_rows)[idx].clone()
        kl_t = torch.zeros(m.shape, dtype=r.dtype, device=m.device) if kl is None else kl[idx]
        v = None if values is None else floating(values).detach()[idx]
        t = None if truncated is None else truncated.bool()[idx]
        # the experiences the trainer's split_rollout_samples hands it: rows in prompt order
        # (positions 0..n-1), cut into micro-batches; each experience's index names its positions
        parts = self._micro_batches(method, m.sum(-1).tolist(), drawn or {})
        exps = [experience(self._experience_class(), action_mask=m[p], rewards=r[p].clone(),
                           values=None if v is None else v[p], kl=kl_t[p], info={"reward": r[p].clone()},
                           index=list(p), truncated=None if t is None else t[p],
                           response_length=m[p].sum(-1).float(), total_length=m[p].sum(-1).float())
                for p in parts]
        mod = self.mods[MAKER]
        watch = Watch(args)
        # the estimator's own advantages, before any whitening or shaping of the maker's
        with spy(maker, "get_advantages_and_returns") as gae_like, spy(maker, "get_cumulative_returns") as cumulative, \
                spy(mod, "compute_reward") as shaped:
            try:
                call = maker.compute_advantages_and_returns
                takes_kw = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(call).parameters.values())
                # before 0.8 gamma and lambd came as keyword arguments, not from args
                result = call(**bind(call, boundary, {"experiences": exps},
                                     {"gamma": gamma, "lambd": lam} if takes_kw else {}))
                estimated = [out[0] for _, out in gae_like] + [out for _, out in cumulative]
            except AttributeError as e:
                if "OpenRLHF reads args." in str(e):
                    raise Unsupported(f"signature drift: {e} (boundary {boundary!r})") from e
                raise
        out_exps = result if isinstance(result, list) and result else exps
        if isinstance(result, tuple) and result:  # (experiences, rewards) returns of some versions
            out_exps = list(result[0]) if isinstance(result[0], (list, tuple)) else [result[0]]
        def back(ts: list[torch.Tensor]) -> torch.Tensor:  # one batch, canonical row order
            x = placed(parts, ts)
            return unpermute(x, order) if x.dim() and x.shape[0] == n_rows else x

        outputs = {"advantages": back([e.advantages for e in out_exps]), "returns": back([e.returns for e in out_exps]),
                   "estimated": back(estimated) if estimated else None, "whitened": whitened(args)}
        if shaped:
            outputs["token_rewards"] = back([out for _, out in shaped])
        outputs["function"] = method
        # the experiences as the call left them (their info dicts included), one batch in canonical
        # row order, and what the call set in args
        seen = [extras({"experience": e}) for e in out_exps]
        merged = {k: back([x[k] for x in seen]) for k in seen[0] if all(k in x for x in seen)}
        merged.update({k: x[k] for x in seen for k in x if k not in merged})  # one experience's alone: as is
        outputs["extras"] = {**merged, **extras(None, watch)}
        return outputs

    def _micro_batches(self, method: Callable, lengths: list[int], drawn: dict[str, Any]) -> list[list[int]]:
        """The positions of each micro-batch split_rollout_samples makes of the rollout (rows in
        prompt order): with dynamic batching, OpenRLHF's own seqlen-balanced partition into
        DYNAMIC_STEP micro-batches (its partitions interleave prompts); else consecutive chunks of
        micro_rollout_batch_size."""
        n = len(lengths)
        dynamic, size = bool(drawn.get("dynamic_batch_enable")), drawn.get("micro_rollout_batch_size")
        size = MICRO_ROLLOUT_BATCH if size is None else int(size)
        if "experience.index" not in source_of(method):  # before the index: one prompt-ordered batch
            if dynamic or size != MICRO_ROLLOUT_BATCH:
                raise Unsupported("compute_advantages_and_returns reads no experience.index at this OpenRLHF "
                                  "version: the adapter hands it the rollout as one experience only")
            return [list(range(n))]
        if dynamic:
            balance = getattr(self.mods.get(SEQLEN), "get_seqlen_balanced_partitions", None)
            if not callable(balance):
                raise Unsupported("openrlhf.utils.seqlen_balancing has no get_seqlen_balanced_partitions at this version")
            return [list(p) for p in balance([int(x) for x in lengths], min(DYNAMIC_STEP, n), False)]
        return [list(range(i, min(i + size, n))) for i in range(0, n, size)]

    @implements("advantages", calls=(f"{MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",
                                     f"{UTILS}:compute_reward", f"{UTILS}:compute_approx_kl",
                                     f"{KL_CONTROLLER}:FixedKLController"))
    def b_advantages(self, inputs, config):
        est = ESTIMATORS.get(config["estimator"])
        if est is None:
            raise Unsupported(f"OpenRLHF has no {config['estimator']!r} estimator (gae, reinforce, reinforce_baseline, "
                              f"rloo, group_norm, dr_grpo)")
        norm = config["reward_norm"]
        if norm:
            mean, std = norm.get("mean_level", "batch"), norm.get("std_level", "batch")
            eps = norm.get("eps")
            if est == "group_norm" and mean == "group" and std is None:
                est = "dr_grpo"
            elif not ((est == "group_norm" and mean == "group" and std == "group" and eps in (None, GROUP_NORM_EPS))
                      or (est == "reinforce_baseline" and mean == "group" and std is None)):
                raise Unsupported(f"reward_norm {norm}: OpenRLHF's only reward normalisation is its estimator's own "
                                  f"(group_norm: group mean and std + 1e-9; dr_grpo / reinforce_baseline: group mean)")
        mask = inputs["loss_mask"]
        kl_coef = float(config["kl_coef"])
        kl = None
        if "log_probs" in inputs and "ref_log_probs" in inputs:
            kl = self._approx_kl("advantages", floating(inputs["log_probs"]).detach(),
                                 floating(inputs["ref_log_probs"]).detach(), config["kl_type"], mask)
        elif kl_coef != 0.0:
            raise ValueError("kl_coef != 0 needs log_probs and ref_log_probs")
        truncated = None
        if config["mask_no_eos_with_zero"]:
            attn = inputs.get("attention_mask")
            truncated = (attn.bool().all(-1) if attn is not None
                         else torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device))
        values = inputs.get("values")
        if est == "gae" and values is None:
            values = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
        res = self._estimates("advantages", rewards=inputs["rewards"], mask=mask, estimator=est,
                              group=inputs.get("group"), group_size=config["group_size"], values=values, kl=kl,
                              kl_coef=kl_coef, gamma=float(config["gamma"]), lam=float(config["lam"]),
                              clip=config["reward_clip"], truncated=truncated, drawn=trainer_options(config))
        adv = res["advantages"]
        if config["normalize_advantages"]:
            if not res["whitened"]:
                raise Unsupported(f"normalize_advantages: OpenRLHF does not normalise {est!r} advantages")
        elif res["whitened"]:
            adv = res["estimated"]  # the estimator's own advantages, before OpenRLHF's whitening
        outputs = {"advantages": adv, "returns": res["returns"]}
        if "token_rewards" in res:
            outputs["token_rewards"] = res["token_rewards"]
        if kl is not None:
            outputs["logged_kl"] = kl  # the KL make_experience keeps, as it is after the call
        return BoundaryResult(outputs, function=self._ref(res["function"]), extras=res["extras"])

    @implements("reward_norm", calls=(f"{MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",))
    def b_reward_norm(self, inputs, config):
        """Group statistics of the experience maker on one-token responses."""
        mean, std = config["mean_level"], config["std_level"]
        if config["std_unbiased"] is False:
            raise Unsupported("OpenRLHF's group std is torch.std (unbiased)")
        if "mask" in inputs and not bool(inputs["mask"].bool().all()):
            raise Unsupported("OpenRLHF's reward shaping has no row mask: every sample of a prompt enters its "
                              "group's statistics")
        drawn = trainer_options(config).get("advantage_estimator")
        if drawn is not None:  # the trainer's estimator in place of the one the levels name (no std)
            if mean is None:
                raise Unsupported(f"OpenRLHF's {drawn} always subtracts a group mean")
            est = drawn
        elif config["mean_leave1out"]:
            if std is not None or mean is None:
                raise Unsupported("mean_leave1out: OpenRLHF's rloo subtracts the leave-one-out mean, no std")
            est = "rloo"
        elif mean is not None and std is None:
            est = "dr_grpo"
        elif mean is not None and std == mean and config["eps"] in (None, GROUP_NORM_EPS):
            est = "group_norm"
        else:
            raise Unsupported(f"mean_level {mean} / std_level {std} / eps {config['eps']}: OpenRLHF normalises by "
                              f"the group mean (dr_grpo, rloo) or the group mean and std + 1e-9 (group_norm)")
        r = inputs["rewards"]
        n = int(r.shape[0])
        whole = mean == "batch"
        one = torch.ones((n, 1), dtype=torch.bool, device=r.device)
        res = self._estimates("reward_norm", rewards=r, mask=one, estimator=est,
                              group=None if whole else inputs.get("group"),
                              group_size=None if whole else config["group_size"])
        adv = res["estimated"] if res["whitened"] else res["advantages"]
        return BoundaryResult({"rewards": adv[:, 0]}, function=self._ref(res["function"]), extras=res["extras"])

    @implements("gae", calls=(f"{MAKER}:RemoteExperienceMaker.get_advantages_and_returns",))
    def b_gae(self, inputs, config):
        cls = self._maker_class("get_advantages_and_returns", "gae")
        maker = object.__new__(cls)
        fn = cls.get_advantages_and_returns
        adv, ret = maker.get_advantages_and_returns(
            **bind(maker.get_advantages_and_returns, "gae",
                   {"values": floating(inputs["values"]), "rewards": floating(inputs["token_rewards"]),
                    "action_mask": inputs["loss_mask"].bool(), "gamma": float(config["gamma"]),
                    "lambd": float(config["lam"])}))
        return BoundaryResult({"advantages": adv, "returns": ret}, function=self._ref(fn))
