"""`VerlAdapter`: verl's loss-path code at the canonical boundaries (see the package
docstring for what each boundary reaches and the conventions translated)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

import torch

from sentinel.adapters.backport import backport_type_params
from sentinel.adapters.binding import bind, parameters, signature_text
from sentinel.adapters.composing import trainer_step
from sentinel.adapters.contract import BoundaryResult, implements, refuse
from sentinel.adapters.loading import keep_host_logging, source_of, version_facts
from sentinel.adapters.observables import Watch, extras
from sentinel.adapters.options import recorded, trainer_options
from sentinel.adapters.ranks import run_ranks
from sentinel.adapters.shims import is_stub
from sentinel.adapters.spying import spy
from sentinel.adapters.trainer import TrainerAdapter, shifts_rewards
from sentinel.errors import TargetLoadError, Unsupported

from .conventions import (
    CORE, ENGINE_LOSSES_FILES, ESTIMATOR_ALIASES, GRPO_FAMILY, KL_NAMES, LIGHT, NEEDS_MORE, NO_BATCH_NORM, OPTION_DOMAINS, PINNED,
    PF_PPO_POW, PIP_HINT, ROLLOUT_CORR, TRAINER, UNREACHABLE, VECTORIZED, PlainProto, build, carried, data_proto,
    last_valid_scores, pf_ppo_resampling, rollout_rs, uid_array, without_response_mask)
from .actor import ActorSurface
from .deviations import DEVIATIONS
from .losses import PolicyLosses, global_batch_info
from .surfaces import Surfaces

_last_root: list[Path] = []  # where `verl` was imported from in this process


@trainer_step("ray_trainer.apply_kl_penalty's reward shaping (scores - beta * KL at valid tokens), run only "
              "where verl.trainer.ppo.ray_trainer does not import here (its Ray and dataset imports); the KL "
              "itself is core_algos.kl_penalty's")
def kl_in_reward(scores: torch.Tensor, kld: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    return scores - kl_coef * (kld * mask)


@contextlib.contextmanager
def _quiet_import():
    """verl's import calls logging.basicConfig and loads verl.plugins entry points: keep the
    worker's logging as it was and load no plugins (unless the user asked for them)."""
    env_key = "VERL_USE_EXTERNAL_PLUGINS"
    env_before = os.environ.get(env_key)
    if env_before is None:
        os.environ[env_key] = "none"
    try:
        with keep_host_logging():
            yield
    finally:
        if env_before is None:
            os.environ.pop(env_key, None)


class VerlAdapter(ActorSurface, PolicyLosses, Surfaces, TrainerAdapter):
    """volcengine/verl from a checkout (``--repo``) or the installed package."""

    name = "verl"
    package, marker, extra, install_hint, light = "verl", CORE, "verl", PIP_HINT, LIGHT
    modules = lookup_modules = (CORE,)
    kl_names = KL_NAMES
    description = ("volcengine/verl: trainer.ppo.core_algos (estimators, policy losses, agg_loss, kl_penalty), "
                   "ray_trainer.apply_kl_penalty / compute_advantage and rollout_corr_helper, on one process.")
    unreachable = UNREACHABLE
    loss_path_files = ("verl/trainer/ppo/core_algos.py", "verl/trainer/ppo/ray_trainer.py",
                       "verl/trainer/ppo/rollout_corr_helper.py", "verl/utils/torch_functional.py",
                       "verl/trainer/config/algorithm.py", "verl/workers/config/actor.py")
    declines = {
        "gspo_kl": "verl computes the GSPO sequence log-ratio inside compute_policy_loss_gspo (registered "
                   "policy loss 'gspo') and returns only the aggregated loss: no function exposes the "
                   "sequence KL (use options.policy_loss_mode=gspo with the policy_loss boundary)",
        "opsm_mask": "verl has no off-policy sequence masking conditioned on the advantage (its rollout "
                     "rejection sampling, rollout_corr_helper.compute_rollout_rejection_mask, ignores the "
                     "advantage)",
    }
    deviations = DEVIATIONS  # where verl departs from the reference math on purpose
    option_domains, pinned = OPTION_DOMAINS, PINNED
    unsupported = (
        refuse("advantages", "mask_no_eos_with_zero", reason="verl's advantage path has no option to zero the reward "
                                                           "of a response that hit the length limit without EOS"),
        refuse("advantages", "reward_clip", reason="verl's advantage path does not clip rewards",
               when=lambda c: c["reward_clip"] is not None),
        refuse("advantages", "reward_bias", "reward_scaling",
               reason="verl's advantage path does not shift or scale rewards",
               when=shifts_rewards),
    )

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        super().__init__(root, device, options)
        self.batch_info = "local"

    # --- loading ------------------------------------------------------------------------
    def _version(self, root: Path, from_checkout: bool) -> dict[str, Any]:
        vfile = root / "verl" / "version" / "version"
        return version_facts(root, vfile.read_text(errors="replace").strip() if vfile.is_file() else None, from_checkout)

    def _detect_batch_info(self, root: Path) -> str:
        choice = self.options.get("batch_info")
        if choice in ("engine", "local"):
            return choice
        return "engine" if self._engine_loss(root) == "engine" else "local"

    @staticmethod
    def _engine_loss(root: Path) -> str | None:
        """What the engine worker's ppo_loss hands the loss: "engine" where it fills
        global_batch_info, "engine-local" where it has none to fill (2025-08 to 11: a bool mask and
        agg_loss's local counts), None where this verl has no ppo_loss (decided by the symbol)."""
        for parts in ENGINE_LOSSES_FILES:
            try:
                src = root.joinpath(*parts).read_text(errors="replace")
            except OSError:
                continue
            if "def ppo_loss(" in src:
                return "engine" if 'global_batch_info["global_batch_size"]' in src else "engine-local"
        return None

    def _prepare(self, root: Path) -> None:
        if _last_root and _last_root[0] != root:
            raise TargetLoadError(f"verl target: this process already imported verl from {_last_root[0]}")
        backport_type_params("verl")

    def _importing(self):
        return _quiet_import()

    def _import_optional(self, root: Path) -> None:
        self._optional(ROLLOUT_CORR)
        self._optional(TRAINER, enabled=bool(self.options.get("trainer_module", True)))

    def _facts(self, root: Path) -> dict[str, Any]:
        if not _last_root:
            _last_root.append(root)
        core = self.mods[CORE]
        self.batch_info = self._detect_batch_info(root)
        return {"batch_info": self.batch_info, "advantage_path": "trainer" if TRAINER in self.mods else "registry",
                "adv_estimators": sorted(getattr(core, "ADV_ESTIMATOR_REGISTRY", {}) or []),
                "policy_losses": sorted(getattr(core, "POLICY_LOSS_REGISTRY", {}) or [])}

    # --- lookups ------------------------------------------------------------------------
    @property
    def core(self) -> types.ModuleType:
        return self.mods[CORE]

    def _verl_F(self) -> types.ModuleType:
        mod = getattr(self.core, "verl_F", None)
        return mod if isinstance(mod, types.ModuleType) else importlib.import_module("verl.utils.torch_functional")

    def _config_class(self, name: str, *modules: str) -> type | None:
        cls = getattr(self.core, name, None)
        if isinstance(cls, type) and not is_stub(cls):
            return cls
        for mod in modules:
            try:
                cls = getattr(importlib.import_module(mod), name, None)
            except Exception:  # noqa: BLE001
                cls = None
            if isinstance(cls, type) and not is_stub(cls):
                return cls
        return None

    # --- configs --------------------------------------------------------------------------
    def _algo_config(self, boundary: str, **values: Any):
        cls = self._config_class("AlgoConfig", "verl.trainer.config", "verl.trainer.config.algorithm")
        if cls is None:  # before the dataclass configs: a plain DictConfig-like mapping
            from omegaconf import OmegaConf
            return OmegaConf.create(values)
        kl_cls = self._config_class("KLControlConfig", "verl.trainer.config", "verl.trainer.config.algorithm")
        if kl_cls is not None and isinstance(values.get("kl_ctrl"), dict):
            values["kl_ctrl"] = build(kl_cls, boundary, values["kl_ctrl"])
        return build(cls, boundary, values)

    # --- boundaries ---------------------------------------------------------------------
    @implements("policy_loss", steps=(global_batch_info,), calls=(f"{CORE}:get_policy_loss_fn", f"{CORE}:compute_policy_loss_vanilla",
                                      f"{CORE}:compute_policy_loss_gspo", f"{CORE}:agg_loss",
                                      # trainer:bypass_mode (its loss_type ppo_clip or reinforce)
                                      f"{CORE}:compute_policy_loss_bypass_mode", f"{CORE}:compute_policy_loss_reinforce",
                                      # trainer:rollout_correction (decoupled, or inside bypass mode)
                                      f"{ROLLOUT_CORR}:compute_rollout_correction_and_rejection_mask",
                                      f"{ROLLOUT_CORR}:compute_rollout_correction_weights",
                                      f"{ROLLOUT_CORR}:compute_rollout_rejection_mask"))
    def b_policy_loss(self, inputs, config):
        """Registered policy loss "vanilla" (asymmetric clip, dual clip clip_ratio_c), or "gspo"
        for importance_sampling_level=sequence, with verl's ActorConfig; options.policy_loss_mode
        selects any other registered loss."""
        level = config["importance_sampling_level"]
        if level not in ("token", "sequence"):
            raise Unsupported(f"importance_sampling_level {level!r}: verl has token (vanilla) and sequence (gspo)")
        mode = self.options.get("policy_loss_mode") or ("gspo" if level == "sequence" else "vanilla")
        if mode == "gspo" and config["eps_clip_c"] is not None:
            raise Unsupported("verl's gspo policy loss has no dual clip (eps_clip_c)")
        low, high = float(config["eps_clip"]), float(config["eps_clip_high"])
        return self._policy_boundary("policy_loss", mode, inputs, config, low, high, config["eps_clip_c"])

    @implements("cispo_loss", steps=(global_batch_info,), calls=(f"{CORE}:get_policy_loss_fn", f"{CORE}:compute_policy_loss_cispo",
                                     f"{CORE}:agg_loss",
                                     f"{ROLLOUT_CORR}:compute_rollout_correction_and_rejection_mask",
                                     f"{ROLLOUT_CORR}:compute_rollout_correction_weights",
                                     f"{ROLLOUT_CORR}:compute_rollout_rejection_mask"))
    def b_cispo_loss(self, inputs, config):
        """Registered policy loss "cispo": -sg(clip(ratio, 1 - low, 1 + high)) * A * log pi."""
        registry = getattr(self.core, "POLICY_LOSS_REGISTRY", None)
        if registry is None or "cispo" not in registry:
            raise Unsupported(f"verl {self.facts.get('version')} registers no 'cispo' policy loss"
                              + (f" (has: {', '.join(sorted(registry))})" if registry else ""))
        low, high = float(config["eps_clip"]), float(config["eps_clip_high"])
        return self._policy_boundary("cispo_loss", "cispo", inputs, config, low, high, None)

    @implements("loss_agg", steps=(global_batch_info,), calls=(f"{CORE}:agg_loss",))
    def b_loss_agg(self, inputs, config):
        """agg_loss(loss_mat, loss_mask, loss_agg_mode), with the actor's global_batch_info."""
        fn = self._fn("agg_loss", boundary="loss_agg")
        mask = inputs["loss_mask"]
        drawn = trainer_options(config)
        mode = drawn.get("loss_agg_mode") or config["mode"]  # verl's own mode, where drawn, in place of the canonical
        optional: dict[str, Any] = {}
        with self.worker_impl(config):
            if self.batch_info == "engine":  # workers/utils/losses.ppo_loss: global_batch_info, loss_scale_factor
                optional = {**global_batch_info(mask), "loss_scale_factor": drawn.get("loss_scale_factor")}
            mask_t = self._actor_mask(mask)
        kw = bind(fn, "loss_agg", {"loss_mat": inputs["values"], "loss_mask": mask_t, "loss_agg_mode": mode},
                     optional)
        try:
            loss = fn(**kw)
        except ValueError as e:
            if "loss_agg_mode" in str(e) or "Invalid" in str(e):
                raise Unsupported(f"verl's agg_loss has no mode {mode!r}: {e}") from e
            raise
        return BoundaryResult({"loss": loss}, function=self._ref(fn))

    @implements("kl", calls=(f"{CORE}:kl_penalty",))
    def b_kl(self, inputs, config):
        """kl_penalty(logprob, ref_logprob, kl_penalty=<verl name>)."""
        fn = self._fn("kl_penalty", boundary="kl")
        name = self._kl_name(config["kl_type"], config["kl_type"], fn)
        if name is None:
            raise Unsupported(f"this verl's kl_penalty has no straight-through estimator {config['kl_type']!r} (its "
                              f"code tests no '+' suffix: before verl PR 2953)")
        kw = bind(fn, "kl", {"logprob": inputs["log_probs"], "ref_logprob": inputs["ref_log_probs"],
                                "kl_penalty": name})
        try:
            kl = fn(**kw)
        except NotImplementedError as e:
            if name.endswith("+"):  # its own code takes the name: failing on it is verl's error, not a missing option
                raise NotImplementedError(f"verl's kl_penalty tests for a '+' suffix but raises NotImplementedError "
                                          f"on {name!r}") from e
            raise Unsupported(f"verl's kl_penalty has no estimator {name!r}") from e
        return BoundaryResult({"kl": kl}, function=self._ref(fn))

    @implements("gae", calls=(f"{CORE}:compute_gae_advantage_return",))
    def b_gae(self, inputs, config):
        """compute_gae_advantage_return; `advantages` is the GAE before verl's built-in
        masked_whiten (see the module docstring), `returns` verl's returns."""
        fn = self._fn("compute_gae_advantage_return", boundary="gae")
        kw = bind(fn, "gae", {"token_level_rewards": inputs["token_rewards"], "values": inputs["values"],
                                 "response_mask": inputs["loss_mask"].to(torch.int64),
                                 "gamma": float(config["gamma"]), "lam": float(config["lam"])},
                     aliases={"response_mask": ("eos_mask",)})
        with spy(self._verl_F(), "masked_whiten") as whiten:
            adv, ret = fn(**kw)
        if whiten:
            adv = whiten[-1][0]["values"]
        return BoundaryResult({"advantages": adv, "returns": ret}, function=self._ref(fn))

    @implements("reward_norm", calls=(f"{CORE}:compute_grpo_outcome_advantage",
                                      f"{CORE}:compute_rloo_outcome_advantage"))
    def b_reward_norm(self, inputs, config):
        """compute_grpo_outcome_advantage on one-token responses (scores = rewards): group (or
        batch) mean, and std when std_level is set (norm_adv_by_std_in_grpo), epsilon = eps
        (None: verl's 1e-6). Row mask 0 = a fully rejected response (see _row_mask)."""
        r = inputs["rewards"]
        mean_level, std_level = config["mean_level"], config["std_level"]
        if config["std_unbiased"] is False:
            raise Unsupported("std_unbiased=False: verl's GRPO std is torch.std (unbiased)")
        if config["mean_leave1out"]:
            return self._rloo_norm(inputs, config, mean_level, std_level)
        if trainer_options(config).get("adv_estimator") == "rloo":  # verl's rloo in place of grpo: no std
            if mean_level is None:
                raise Unsupported("verl's rloo estimator always subtracts the leave-one-out mean")
            return self._rloo_norm(inputs, config, mean_level, None)
        if mean_level is None:
            raise Unsupported("verl's group normalisation always subtracts the group mean")
        if std_level not in (None, mean_level):
            raise Unsupported(f"verl divides by the std of the group it centres on (mean over {mean_level}, "
                              f"std over {std_level})")
        fn = self._fn("compute_grpo_outcome_advantage", boundary="reward_norm")
        n = int(r.shape[0])
        if mean_level == "batch":
            uids = uid_array(None, None, n)
        else:
            uids = uid_array(inputs.get("group"), config["group_size"], n)
        one = self._row_mask(inputs, n, r.device)
        optional: dict[str, Any] = {"epsilon": None if config["eps"] is None else float(config["eps"])}
        # absent before Dr. GRPO support: then only the std-normalised form exists
        if "norm_adv_by_std_in_grpo" in parameters(fn) or std_level is None:
            optional["norm_adv_by_std_in_grpo"] = std_level is not None
        kw = bind(fn, "reward_norm", {"token_level_rewards": r.reshape(n, 1).clone(), "response_mask": one,
                                         "index": uids}, optional, aliases={"response_mask": ("eos_mask",)})
        adv, _ = fn(**kw)
        return BoundaryResult({"rewards": adv[:, 0]}, function=self._ref(fn))

    @staticmethod
    def _row_mask(inputs, n: int, device) -> torch.Tensor:
        """One-token responses; a row with canonical mask 0 is a response whose response_mask is
        all zero (as rollout rejection sampling leaves a rejected response) while its reward stays
        in token_level_rewards (where the reward manager put it)."""
        if "mask" in inputs:
            return inputs["mask"].reshape(n, 1).to(torch.int64)
        return torch.ones((n, 1), dtype=torch.int64, device=device)

    def _rloo_norm(self, inputs, config, mean_level, std_level) -> BoundaryResult:
        """mean_leave1out: verl's RLOO estimator (r_i minus the mean of the others in its group)."""
        if std_level is not None:
            raise Unsupported("mean_leave1out with a std: verl's leave-one-out baseline (rloo) does not divide by a std")
        fn = self._fn("compute_rloo_outcome_advantage", boundary="reward_norm")
        r = inputs["rewards"]
        n = int(r.shape[0])
        uids = uid_array(None, None, n) if mean_level == "batch" else uid_array(inputs.get("group"), config["group_size"], n)
        one = self._row_mask(inputs, n, r.device)
        kw = bind(fn, "reward_norm", {"token_level_rewards": r.reshape(n, 1).clone(), "response_mask": one,
                                         "index": uids}, aliases={"response_mask": ("eos_mask",)})
        adv, _ = fn(**kw)
        return BoundaryResult({"rewards": adv[:, 0]}, function=self._ref(fn))

    # --- advantages -----------------------------------------------------------------------
    def _estimator(self, config: dict[str, Any]) -> tuple[str, Callable]:
        core = self.core
        name = ESTIMATOR_ALIASES.get(config["estimator"], config["estimator"])
        if self.options.get("vectorized"):
            name = VECTORIZED.get(name, name)
        if name in NEEDS_MORE:
            raise Unsupported(f"verl's {name!r} estimator needs {NEEDS_MORE[name]}, which no canonical input carries")
        getter = getattr(core, "get_adv_estimator_fn", None)
        if getter is None:  # before the registry (verl < 0.4): the trainer dispatches by name to
            # core_algos.compute_<name>_outcome_advantage (gae: compute_gae_advantage_return)
            for fname in (f"compute_{name}_outcome_advantage", f"compute_{name}_advantage_return",
                          f"compute_{name}_advantage"):
                fn = getattr(core, fname, None)
                if callable(fn):
                    return name, fn
            known = sorted(n[len("compute_"):].replace("_outcome_advantage", "").replace("_advantage_return", "")
                           for n in dir(core) if n.startswith("compute_") and "advantage" in n)
            raise Unsupported(f"verl {self.facts.get('version')} has no {name!r} estimator (core_algos has: "
                              f"{', '.join(known)})")
        try:
            return name, getter(name)
        except (ValueError, KeyError) as e:
            known = ", ".join(sorted(getattr(core, "ADV_ESTIMATOR_REGISTRY", {}) or []))
            raise Unsupported(f"verl has no advantage estimator {name!r} (registered: {known})") from e

    @implements("advantages", steps=(kl_in_reward,), calls=(f"{TRAINER}:apply_kl_penalty", f"{TRAINER}:compute_advantage",
                                     f"{TRAINER}:compute_response_mask",  # trainer:response_mask_in_batch=False
                                     f"{CORE}:get_adv_estimator_fn", f"{CORE}:kl_penalty",
                                     # estimators grpo (by name) and rloo (from the registry): compute_advantage calls
                                     # them on multi-token responses (reward_norm hands them one-token ones)
                                     f"{CORE}:compute_grpo_outcome_advantage", f"{CORE}:compute_rloo_outcome_advantage"))
    def b_advantages(self, inputs, config):
        """KL in reward (apply_kl_penalty) and the estimator (compute_advantage), as verl's
        trainer runs them; see the module docstring for the conventions."""
        name, est_fn = self._estimator(config)
        norm = config["reward_norm"]
        whiten_wanted = bool(config["normalize_advantages"])
        adv_norm = config["adv_norm"]
        if adv_norm is not None:
            spec = dict(adv_norm or {})
            if spec.get("mean_level", "batch") != "batch" or spec.get("std_level", "batch") != "batch" or \
                    spec.get("mean_leave1out") or spec.get("std_unbiased") is False:
                raise Unsupported(f"adv_norm {adv_norm}: verl's only advantage normalisation is the estimator's "
                                  f"built-in whitening over the batch's valid tokens (masked_whiten)")
            whiten_wanted = True
        norm_by_std = True
        if norm:
            level_mean, level_std = norm.get("mean_level", "batch"), norm.get("std_level", "batch")
            eps = norm.get("eps")
            if name in GRPO_FAMILY and level_mean == "group" and level_std in ("group", None) and \
                    (eps is None or abs(float(eps) - 1e-6) < 1e-12 or level_std is None):
                norm_by_std = level_std is not None  # Dr. GRPO: algorithm.norm_adv_by_std_in_grpo=False
            elif name == "reinforce_plus_plus_baseline" and level_mean == "group" and level_std is None:
                pass  # the estimator's own group-mean baseline
            else:
                raise Unsupported(f"reward_norm {norm}: verl has no configurable reward normalisation; its only "
                                  f"one is the estimator's own (grpo: group mean and std with eps 1e-6, or mean "
                                  f"only with norm_adv_by_std_in_grpo=False; reinforce_plus_plus_baseline: group "
                                  f"mean)")

        mask = inputs["loss_mask"].to(torch.int64)
        n = int(mask.shape[0])
        rewards = inputs["rewards"]
        kl_coef = float(config["kl_coef"])
        kl_name = self._kl_name(config["kl_type"], config["kl_type"])
        scores = last_valid_scores(rewards, mask, inputs.get("attention_mask"))
        uids = uid_array(inputs.get("group"), config["group_size"], n)
        tensors: dict[str, torch.Tensor] = {"response_mask": mask, "token_level_scores": scores,
                                            # verl <= 0.4 slices the response mask out of these
                                            "responses": torch.zeros_like(mask), "attention_mask": mask,
                                            "loss_mask": mask}
        if "values" in inputs:
            tensors["values"] = inputs["values"]
        elif name == "gae":
            tensors["values"] = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device)
        use_kl = kl_coef != 0.0
        if use_kl:
            if "log_probs" not in inputs or "ref_log_probs" not in inputs:
                raise ValueError("kl_coef != 0 needs log_probs and ref_log_probs (verl's old_log_probs and ref_log_prob)")
            tensors["old_log_probs"] = inputs["log_probs"]
            tensors["ref_log_prob"] = inputs["ref_log_probs"]
        data = data_proto(n, tensors, uids)
        pf_ppo = trainer_options(config).get("pf_ppo")  # PF-PPO's reweight method (None: off)
        algo = self._algo_config("advantages", gamma=float(config["gamma"]), lam=float(config["lam"]), adv_estimator=name,
                                 norm_adv_by_std_in_grpo=norm_by_std, use_kl_in_reward=use_kl, kl_penalty=kl_name,
                                 kl_ctrl={"type": "fixed", "kl_coef": kl_coef},
                                 **({"use_pf_ppo": True, "pf_ppo": {"reweight_method": pf_ppo, "weight_pow": PF_PPO_POW}}
                                    if pf_ppo else {}))
        if pf_ppo and not getattr(algo, "use_pf_ppo", False):  # `build` keeps the fields this verl's config has
            raise Unsupported("pf_ppo: this verl's algorithm config has no use_pf_ppo (PF-PPO)")
        algo = recorded(algo)  # the options the trainer and the estimator read (algorithm.*), recorded

        core, trainer = self.core, self.mods.get(TRAINER)
        outputs: dict[str, Any] = {}
        observed: dict[str, Any] = {}
        watch = Watch(algo)
        # 1. KL in reward (ray_trainer.apply_kl_penalty; the trainer skips it when use_kl_in_reward is off)
        if use_kl:
            with spy(core, "kl_penalty") as kl_calls:
                if trainer is not None and callable(getattr(trainer, "apply_kl_penalty", None)):
                    fixed = getattr(core, "FixedKLController", None)
                    kl_ctrl = fixed(kl_coef=kl_coef) if fixed is not None else core.get_kl_controller(algo.kl_ctrl)
                    data, kl_metrics = trainer.apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty=kl_name)
                    observed.update(extras({"kl_metrics": kl_metrics}))
                else:  # the same composition from core_algos (apply_kl_penalty's four lines)
                    kld = core.kl_penalty(tensors["old_log_probs"], tensors["ref_log_prob"], kl_penalty=kl_name)
                    data.batch["token_level_rewards"] = kl_in_reward(scores, kld, mask, kl_coef)
            if kl_calls:
                outputs["logged_kl"] = kl_calls[0][1]  # the KL tensor verl computed, as it is after the call
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]

        # 2. the estimator (ray_trainer.compute_advantage dispatch, else the registry)
        with spy(self._verl_F(), "masked_whiten") as whiten:
            dispatch = getattr(trainer, "compute_advantage", None) if trainer is not None else None
            if dispatch is not None and self.options.get("advantage_dispatch", "trainer") == "trainer":
                optional = {"gamma": algo.gamma, "lam": algo.lam, "num_repeat": 1, "config": algo}
                if "norm_adv_by_std_in_grpo" in parameters(dispatch) or not norm_by_std:
                    optional["norm_adv_by_std_in_grpo"] = norm_by_std
                kw = bind(dispatch, "advantages", {"data": data, "adv_estimator": name},
                             {k: v for k, v in optional.items() if k in parameters(dispatch) or k == "norm_adv_by_std_in_grpo"})
                if trainer_options(config).get("response_mask_in_batch") is False:
                    without_response_mask(dispatch, data)
                given = data
                with pf_ppo_resampling(dispatch, pf_ppo):
                    data = dispatch(**kw)
                # PF-PPO hands back the batch's rows resampled (observed with the batch, below); the drawn
                # rows' advantages, returns and rewards are in the batch it was given (written in place)
                rows = given if pf_ppo else data
                adv, ret, token_rewards = (rows.batch[k] for k in ("advantages", "returns", "token_level_rewards"))
            else:
                if pf_ppo:
                    raise Unsupported("pf_ppo: PF-PPO's resampling is in ray_trainer.compute_advantage, which this "
                                      "call does not go through")
                avail = {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": mask,
                         "index": uids, "config": algo, "gamma": algo.gamma, "lam": algo.lam,
                         "values": data.batch.get("values"), "norm_adv_by_std_in_grpo": norm_by_std}
                params = parameters(est_fn)
                req = {k: v for k, v in avail.items() if k in params and v is not None}
                if "eos_mask" in params:
                    req["eos_mask"] = mask
                adv, ret = est_fn(**bind(est_fn, "advantages", req))
                token_rewards = data.batch["token_level_rewards"]
        # the advantages are the trainer's, whitened where its estimator whitens (never undone)
        if whiten_wanted and not whiten:
            raise Unsupported(f"normalize_advantages: verl's {name!r} estimator does not whiten its advantages "
                              f"and verl has no separate advantage normalisation")
        outputs.update(advantages=adv, returns=ret, token_rewards=token_rewards)
        # the batch as the trainer left it (every tensor it added or changed) and its config changes
        observed.update(extras({"data": carried(data)}, watch))
        return BoundaryResult(outputs, function=self._ref(est_fn), extras=observed)

    # --- rollout / trainer mismatch -------------------------------------------------------
    @contextlib.contextmanager
    def _weights_seen(self):
        """Record the IS weights verl's own entries compute (a call-through spy on
        compute_rollout_correction_weights). Where tensordict is a stub, the DataProto those
        entries wrap the weights in is a plain carrier (layout only: the tensor is verl's)."""
        mod = self.mods[ROLLOUT_CORR]
        carrier = getattr(mod, "DataProto", None)
        plain = carrier is not None and is_stub(sys.modules.get("tensordict"))
        if plain:
            mod.DataProto = PlainProto
        try:
            with spy(mod, "compute_rollout_correction_weights") as calls:
                yield calls
        finally:
            if plain:
                mod.DataProto = carrier

    @implements("is_correction", steps=(global_batch_info,), calls=(f"{ROLLOUT_CORR}:compute_rollout_correction_and_rejection_mask",
                                        f"{ROLLOUT_CORR}:compute_rollout_correction_weights",
                                        f"{ROLLOUT_CORR}:compute_rollout_rejection_mask",  # trainer:rollout_rs
                                        f"{CORE}:compute_policy_loss_vanilla", f"{CORE}:compute_policy_loss_bypass_mode",
                                        f"{CORE}:compute_policy_loss_reinforce", f"{CORE}:agg_loss"))
    def b_is_correction(self, inputs, config):
        """Token-level rollout IS weights and the loss that consumes them, through verl's own
        entries, so whatever detaching happens is verl's: vanilla_tis / icepop = decoupled mode
        (compute_rollout_correction_and_rejection_mask(old, rollout) as the trainer's
        compute_rollout_correction_and_add_to_batch calls it, then the vanilla PPO loss times the
        weights); off_policy_is = the registered "bypass_mode" loss with loss_type reinforce
        (weights pi_theta / pi_rollout computed inside it, REINFORCE loss)."""
        method = config["method"]
        wfn = self._fn("compute_rollout_correction_weights", ROLLOUT_CORR, boundary="is_correction")
        mask = inputs["loss_mask"].to(torch.int64)
        low, high = float(config["eps_clip"]), float(config["eps_clip_high"])
        tis_low, tis_high = float(config["tis_clip_low"]), float(config["tis_clip"])
        if method == "vanilla_tis":
            if tis_low > 0:
                raise Unsupported(f"vanilla_tis with tis_clip_low={tis_low}: verl's token TIS truncates from above "
                                  f"only (a 'low_upper' threshold is IcePop, which zeroes instead of clipping)")
            threshold: Any = tis_high
        elif method == "icepop":
            if tis_low <= 0:
                raise Unsupported("icepop needs tis_clip_low > 0: verl's 'low_upper' threshold requires a positive "
                                  "lower bound")
            ann = str(parameters(wfn).get("rollout_is_threshold", inspect.Parameter("x", 1)).annotation)
            if "str" not in ann:
                raise Unsupported(f"icepop: {signature_text(wfn)} takes a single upper threshold at this verl version (no "
                                  f"'low_upper' IcePop threshold)")
            threshold = f"{tis_low}_{tis_high}"
        elif method == "off_policy_is":
            if 1.0 - low > 0:
                raise Unsupported(f"off_policy_is clips the weight to [1 - {low}, 1 + {high}]: verl's bypass-mode "
                                  f"IS weight min(pi_theta / pi_rollout, threshold) has no lower clip")
            threshold = 1.0 + high
        else:
            raise ValueError(f"unknown is_correction method {method!r}")
        opts = trainer_options(config)  # algorithm.rollout_correction's other keys (OPTION_DOMAINS)
        self._check_rollout_rs(opts.get("rollout_rs"))
        corr = {"rollout_is": opts.get("rollout_is") or "token", "rollout_is_threshold": threshold,
                "rollout_is_batch_normalize": bool(opts.get("rollout_is_batch_normalize")),
                **rollout_rs(opts.get("rollout_rs"))}
        if opts.get("torch_distributed"):  # one rank of an initialised process group, as torchrun on one GPU
            if "is_initialized" not in source_of(wfn):
                raise Unsupported("torch_distributed: this verl's rollout IS weights never ask torch.distributed")
            return run_ranks(1, lambda _: self._is_correction(method, wfn, inputs, mask, config, corr))[0]
        return self._is_correction(method, wfn, inputs, mask, config, corr)

    def _is_correction(self, method: str, wfn: Callable, inputs, mask, config, corr: dict) -> BoundaryResult:
        """b_is_correction's calls into verl, given the rollout_correction keys `corr`."""
        lp, old, roll, adv = (inputs[k] for k in ("log_probs", "old_log_probs", "rollout_log_probs", "advantages"))
        low, high = float(config["eps_clip"]), float(config["eps_clip_high"])
        loss_agg = config["loss_agg"]
        if method == "off_policy_is":
            if "bypass_mode" not in (getattr(self.core, "POLICY_LOSS_REGISTRY", None) or {}):
                raise Unsupported(f"verl {self.facts.get('version')} registers no 'bypass_mode' policy loss "
                                  f"(off-policy REINFORCE with IS weights pi_theta / pi_rollout)")
            with self._weights_seen() as seen:
                token, loss, fn, observed = self._policy("is_correction", "bypass_mode", lp, roll, adv, inputs["loss_mask"],
                                               clip_low=low, clip_high=high, clip_c=None, loss_agg=loss_agg,
                                               rollout_correction={**corr, "loss_type": "reinforce",
                                                                   "bypass_mode": True})
        else:
            entry = getattr(self.mods[ROLLOUT_CORR], "compute_rollout_correction_and_rejection_mask", None)
            with self._weights_seen() as seen:
                if entry is not None:
                    got = entry(**bind(entry, "is_correction", {"old_log_prob": old, "rollout_log_prob": roll,
                                                                "response_mask": mask}, corr, absent=NO_BATCH_NORM))
                    mask = got[1]  # rejection sampling's mask: the actor's response_mask from here on
                elif corr.get("rollout_rs") is not None:
                    raise Unsupported(f"verl {self.facts.get('version')} has no rollout rejection sampling beside its "
                                      f"IS weights (no compute_rollout_correction_and_rejection_mask)")
                else:  # before the unified entry: the weight function on the trainer's log-ratio
                    got = wfn(**bind(wfn, "is_correction", {"log_ratio": old - roll, "response_mask": mask}, corr,
                                    absent=NO_BATCH_NORM))
            correction = extras({"correction": carried(got)})  # its mask and metrics beside the weights
            if seen:
                token, loss, fn, observed = self._policy("is_correction", "vanilla", lp, old, adv, mask,
                                               clip_low=low, clip_high=high, clip_c=None, loss_agg=loss_agg,
                                               rollout_is_weights=seen[-1][1][0])
        if not seen:
            raise RuntimeError("verl computed no rollout IS weights (compute_rollout_correction_weights was not called)")
        outputs: dict[str, Any] = {"weights": seen[-1][1][0], "loss": loss}
        if token is not None:
            outputs["pg_loss"] = token
        if method != "off_policy_is":
            observed = {**correction, **observed}
        return BoundaryResult(outputs, function=self._ref(wfn).with_also(self._ref(fn)), extras=observed)

