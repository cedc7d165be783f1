"""verl's policy losses on one micro-batch, as its actor calls them.

`PolicyLosses` is mixed into `VerlAdapter` (it uses the adapter's `core`, `_fn`, `_ref`,
`_config_class` and `batch_info`): verl's ``ActorConfig`` for one rank, one registered policy
loss with the token loss it hands ``agg_loss`` (`_policy`), and verl's decoupled rollout
correction (`_decoupled`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
from pathlib import Path
from typing import Any, Callable

import torch

from sentinel.adapters.binding import bind, parameters, signature_text
from sentinel.adapters.composing import trainer_step
from sentinel.adapters.contract import BoundaryResult
from sentinel.adapters.loading import source_of
from sentinel.adapters.observables import Watch, extras
from sentinel.adapters.options import recorded, trainer_options
from sentinel.adapters.spying import spy
from sentinel.errors import Unsupported

from .conventions import BYPASS_PPO_CLIP, NO_BATCH_NORM, ROLLOUT_CORR, ROLLOUT_CORRECTIONS, TIS_OFF, build


@trainer_step("verl's engine (workers/engine/*/transformer_impl.py) sums the loss mask and all-reduces it over "
              "the data-parallel group into global_batch_info before the loss runs: no verl function does it on "
              "one process, so the adapter gives one rank's batch (dp_size 1)")
def global_batch_info(mask: torch.Tensor) -> dict[str, int]:
    """verl's global_batch_info for one micro-batch on one rank."""
    return {"dp_size": 1, "batch_num_tokens": int(mask.sum().item()), "global_batch_size": int(mask.shape[0])}


class PolicyLosses:
    """verl's policy-loss path, for the loss boundaries of `VerlAdapter`."""

    def _actor_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The response mask as the actor hands it: the engine's ppo_loss a bool one, dp_actor its int one."""
        return mask.bool() if self.batch_info in ("engine", "engine-local") else mask.to(torch.int64)

    def _actor_config(self, boundary: str, *, clip_low: float, clip_high: float, clip_c: float, loss_agg: str,
                      loss_mode: str, mask: torch.Tensor, rollout_correction: dict[str, Any] | None = None,
                      tis_cap: float | None = None):
        """verl's ActorConfig (with its PolicyLossConfig, and that one's RolloutCorrectionConfig
        where given) for one micro-batch on one rank."""
        cls = self._config_class("ActorConfig", "verl.workers.config", "verl.workers.config.actor")
        if cls is None:
            raise Unsupported(f"verl has no ActorConfig at this version (boundary {boundary!r})")
        extra: dict[str, Any] = {}
        if tis_cap is not None:
            if "tis_imp_ratio_cap" not in {f.name for f in dataclasses.fields(cls)}:
                raise Unsupported(f"option missing: verl's ActorConfig has no tis_imp_ratio_cap at this version (its "
                                  f"truncated IS of 2025-08 to 10), so trainer:tis_imp_ratio_cap={tis_cap} cannot be "
                                  f"applied (boundary {boundary!r})")
            extra["tis_imp_ratio_cap"] = float(tis_cap)
        values: dict[str, Any] = dict(**extra,
            strategy="fsdp", rollout_n=1, ppo_mini_batch_size=int(mask.shape[0]), ppo_micro_batch_size_per_gpu=int(mask.shape[0]),
            use_dynamic_bsz=False, clip_ratio=clip_low, clip_ratio_low=clip_low, clip_ratio_high=clip_high,
            clip_ratio_c=clip_c, loss_agg_mode=loss_agg, use_torch_compile=False,
        )
        pl_cls = self._config_class("PolicyLossConfig", "verl.workers.config", "verl.workers.config.actor")
        if pl_cls is not None:
            pl: dict[str, Any] = {"loss_mode": loss_mode}
            rc = None
            if rollout_correction is not None:
                rc_cls = self._config_class("RolloutCorrectionConfig", "verl.trainer.config",
                                            "verl.trainer.config.algorithm")
                if rc_cls is None:
                    raise Unsupported(f"verl has no RolloutCorrectionConfig at this version (boundary {boundary!r})")
                rc = build(rc_cls, boundary, rollout_correction)
            if rc is not None and "rollout_correction" in {f.name for f in dataclasses.fields(pl_cls)}:
                pl["rollout_correction"] = rc
                values["policy_loss"] = build(pl_cls, boundary, pl)
            elif rc is not None:  # no such field: the trainer's apply_bypass_mode writes it into the config
                values["policy_loss"] = self._bypass_policy_loss(boundary, build(pl_cls, boundary, pl), rc, mask)
            else:
                values["policy_loss"] = build(pl_cls, boundary, pl)
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in values and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
        if missing:
            raise Unsupported(f"signature drift: verl's ActorConfig requires {missing}, which the adapter does not "
                              f"set (boundary {boundary!r})")
        optim = _optimizer_without_default_lr(cls, boundary)
        if optim is not None:
            values["optim"] = optim
        try:
            cfg = build(cls, boundary, values)
        except (ValueError, AssertionError, TypeError) as e:
            raise Unsupported(f"verl's ActorConfig rejects this configuration: {type(e).__name__}: {e} "
                              f"(boundary {boundary!r})") from e
        info = getattr(cfg, "global_batch_info", None)
        if isinstance(info, dict):
            info.clear()
            if self.batch_info == "engine":  # workers/utils/losses.ppo_loss
                info.update(global_batch_info(mask))
                if hasattr(cfg, "loss_scale_factor"):  # ppo_loss hands it on since it exists (2025-12, 6e6ae96c)
                    info["loss_scale_factor"] = cfg.loss_scale_factor
        return recorded(cfg)  # the options the loss reads (config.*, config.policy_loss.*), recorded

    def _bypass_policy_loss(self, boundary: str, policy_loss: Any, rc: Any, mask: torch.Tensor) -> Any:
        """The actor's policy_loss config in bypass mode where PolicyLossConfig has no
        rollout_correction field: ray_trainer hands the actor's policy_loss (an OmegaConf config) to
        rollout_corr_helper.apply_bypass_mode, which adds rollout_correction and sets loss_mode
        bypass_mode; that function runs here on the same kind of config (its batch: the old
        log-probs the loss receives stand for the rollout's, as bypass mode makes them)."""
        apply = getattr(self.mods.get(ROLLOUT_CORR), "apply_bypass_mode", None)
        if not callable(apply):
            raise Unsupported(f"verl's PolicyLossConfig has no rollout_correction and rollout_corr_helper has no "
                              f"apply_bypass_mode at this version: its bypass-mode loss cannot be configured "
                              f"(boundary {boundary!r})")
        from omegaconf import OmegaConf
        cfg = OmegaConf.structured(policy_loss)
        batch = types.SimpleNamespace(batch={"rollout_log_probs": torch.zeros(mask.shape)})
        apply(**bind(apply, boundary, {"batch": batch, "rollout_corr_config": rc, "policy_loss_config": cfg}))
        return cfg

    def _policy(self, boundary: str, loss_mode: str, lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor,
                mask: torch.Tensor, *, clip_low: float, clip_high: float, clip_c: float | None, loss_agg: str,
                rollout_is_weights: torch.Tensor | None = None, fn: Callable | None = None,
                extra: dict[str, Any] | None = None, rollout_correction: dict[str, Any] | None = None,
                rollout: torch.Tensor | None = None, tis_cap: float | None = None):
        """One registered policy loss on one micro-batch; returns (token loss, scalar loss, fn,
        extras: what it returned beside the loss (clip fractions, ppo_kl, a metrics dict) and what it
        changed in its ActorConfig). `rollout`: the rollout engine's log-probs, handed to a loss
        whose signature names them itself (`rollout_log_probs`, verl's TIS of 2025-08 to 10);
        `tis_cap`: that TIS's ``tis_imp_ratio_cap`` (None: verl's default, off)."""
        core = self.core
        c = math.inf if clip_c is None else float(clip_c)
        registry = getattr(core, "get_policy_loss_fn", None)
        mask_t = self._actor_mask(mask)
        if fn is None and registry is not None and not (
                loss_mode == "vanilla" and "vanilla" not in (getattr(core, "POLICY_LOSS_REGISTRY", None) or {"vanilla"})
                and callable(getattr(core, "compute_policy_loss", None))):
            # (verl 0.4 / 0.5 dispatch "vanilla" to compute_policy_loss outside the registry)
            try:
                fn = registry(loss_mode)
            except (ValueError, KeyError) as e:
                raise Unsupported(f"verl has no registered policy loss {loss_mode!r} at "
                                  f"{self.facts.get('version')}: {e}") from e
        cfg = None
        if fn is not None:
            cfg = self._actor_config(boundary, clip_low=clip_low, clip_high=clip_high, clip_c=c, loss_agg=loss_agg,
                                     loss_mode=loss_mode, mask=mask, rollout_correction=rollout_correction,
                                     tis_cap=tis_cap)
            kw = bind(fn, boundary, {"old_log_prob": old, "log_prob": lp, "advantages": adv,
                                        "response_mask": mask_t},
                         {"loss_agg_mode": loss_agg, "config": cfg, "rollout_is_weights": rollout_is_weights,
                          **(extra or {})},
                         aliases={"old_log_prob": ("rollout_log_prob",), "response_mask": ("eos_mask",)})
            if rollout is not None and "rollout_log_probs" in parameters(fn):  # by the signature's own name,
                kw["rollout_log_probs"] = rollout  # as the actor passed it (absent: the loss's default path)
        else:  # before the policy-loss registry (verl < 0.4): compute_policy_loss(cliprange=...)
            if loss_mode != "vanilla":
                raise Unsupported(f"verl {self.facts.get('version')} has no policy-loss registry (only vanilla PPO)")
            if rollout_is_weights is not None:
                raise Unsupported(f"verl {self.facts.get('version')} takes no rollout IS weights in its policy loss")
            fn = self._fn("compute_policy_loss", boundary=boundary)
            params = parameters(fn)
            if clip_c is not None and "clip_ratio_c" not in params:
                raise Unsupported(f"{signature_text(fn)} has no dual clip (eps_clip_c={clip_c})")
            if clip_high != clip_low and "cliprange_high" not in params:
                raise Unsupported(f"{signature_text(fn)} has a symmetric clip only (eps_clip_high={clip_high})")
            kw = bind(fn, boundary, {"old_log_prob": old, "log_prob": lp, "advantages": adv,
                                        "response_mask": mask_t, "cliprange": clip_low},
                         {"cliprange_low": clip_low if "cliprange_low" in params else None,
                          "cliprange_high": clip_high if "cliprange_high" in params else None,
                          "clip_ratio_c": c if "clip_ratio_c" in params else None,
                          "loss_agg_mode": loss_agg if "loss_agg_mode" in params else None},
                         aliases={"response_mask": ("eos_mask",)})
            if loss_agg != "token-mean" and "loss_agg_mode" not in params:
                raise Unsupported(f"{signature_text(fn)} aggregates by token-mean only (loss_agg={loss_agg})")
        watch = [Watch(cfg)] if cfg is not None else []
        # the token loss verl hands its aggregation: agg_loss, or (before agg_loss, early 2025)
        # the masked_mean whose result is the loss
        with spy(core, "agg_loss") as agg_calls, spy(self._verl_F(), "masked_mean") as mean_calls:
            out = fn(**kw)
        observed = extras(out, *watch)
        loss = out[0] if isinstance(out, tuple) else out
        token = next((a.get("loss_mat") for a, r in agg_calls if r is loss), None)
        if token is None and len(agg_calls) == 1:
            token = agg_calls[0][0].get("loss_mat")
        if token is None and not agg_calls:
            token = next((a.get("values") for a, r in mean_calls if r is loss), None)
        return token, loss, fn, observed

    _RS_KEYS = ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs",
                "rollout_rs_threshold")

    def _check_rollout_rs(self, rollout_rs: str | None) -> None:
        """Unsupported unless this verl has every criterion of `rollout_rs` (chained "a,b" only where
        compute_rollout_rejection_mask splits the name): the k1 / k2 / k3 criteria are its
        SUPPORTED_ROLLOUT_RS_OPTIONS (since 97eac904); before them rollout_rs named a level (token,
        sequence, geometric), so a criterion's name is an option that version lacks, not an error."""
        names = [n.strip() for n in (rollout_rs or "").split(",") if n.strip()]
        mod = self.mods.get(ROLLOUT_CORR)
        known = getattr(mod, "SUPPORTED_ROLLOUT_RS_OPTIONS", None)
        missing = [n for n in names if (n not in known if known is not None else n.endswith(("_k1", "_k2", "_k3")))]
        if missing:
            raise Unsupported(f"rollout_rs={rollout_rs!r}: this verl's rejection sampling has no "
                              f"{'criteria' if len(missing) > 1 else 'criterion'} {', '.join(missing)} (it has: "
                              f"{', '.join(sorted(known)) if known else 'levels only: token, sequence, geometric'})")
        rs_fn = getattr(mod, "compute_rollout_rejection_mask", None)
        if len(names) > 1 and (rs_fn is None or 'split(",")' not in source_of(rs_fn)):
            raise Unsupported(f"rollout_rs={rollout_rs!r}: this verl's rejection sampling takes one criterion "
                              f"(no comma-chained criteria)")

    def _decoupled(self, boundary: str, inputs, config) -> tuple[torch.Tensor | None, torch.Tensor]:
        """use_decoupled_loss: verl's decoupled rollout correction (old_log_probs = the recomputed
        pi_old, rollout_log_probs = the rollout engine's): IS weights pi_old / pi_rollout from
        compute_rollout_correction_weights and, with rollout_rs, the rejection mask from
        compute_rollout_rejection_mask, through compute_rollout_correction_and_rejection_mask as
        the trainer's compute_rollout_correction_and_add_to_batch calls it (no detach or no_grad
        of ours). `rejection_sampling` is verl's own rollout_correction keys; the drawn trainer option
        rollout_correction (a preset of those keys) applies them as the trainer does wherever the
        batch holds rollout_log_probs (ray_trainer: decoupled mode, whatever the loss), and stands for
        them where use_decoupled_loss leaves rejection_sampling unset."""
        mask = inputs["loss_mask"]
        drawn = trainer_options(config)
        preset = ROLLOUT_CORRECTIONS.get(drawn.get("rollout_correction"))
        if drawn.get("bypass_mode"):  # bypass mode: the trainer skips the decoupled correction
            preset = None
        spec = config["rejection_sampling"] or preset
        if not config["use_decoupled_loss"]:
            if preset is None or "rollout_log_probs" not in inputs:  # the trainer applies none without them
                return None, mask
        elif not spec:
            raise Unsupported("use_decoupled_loss: verl's decoupled mode is configured by algorithm.rollout_correction;"
                              " pass rejection_sampling with its keys (" + ", ".join(self._RS_KEYS) + ")")
        unknown = sorted(set(spec) - set(self._RS_KEYS))
        if unknown:
            raise Unsupported(f"rejection_sampling keys {unknown} are not verl rollout_correction keys "
                              f"({', '.join(self._RS_KEYS)})")
        if "rollout_log_probs" not in inputs:
            raise ValueError("use_decoupled_loss needs input rollout_log_probs (the rollout engine's log-probs)")
        self._check_rollout_rs(spec.get("rollout_rs"))
        old, roll, imask = inputs["old_log_probs"], inputs["rollout_log_probs"], mask.to(torch.int64)
        entry = getattr(self.mods.get(ROLLOUT_CORR), "compute_rollout_correction_and_rejection_mask", None)
        if entry is not None:  # the trainer's entry (compute_rollout_correction_and_add_to_batch calls it)
            with self._weights_seen() as seen:
                _, imask, _ = entry(**bind(entry, boundary, {"old_log_prob": old, "rollout_log_prob": roll,
                                                             "response_mask": imask}, dict(spec), absent=NO_BATCH_NORM))
            return (seen[-1][1][0] if seen else None), imask
        # before the unified entry: its two steps on the log-ratio the trainer formed
        log_ratio = old - roll
        weights = None
        if spec.get("rollout_is") is not None:
            wfn = self._fn("compute_rollout_correction_weights", ROLLOUT_CORR, boundary=boundary)
            weights, _ = wfn(**bind(wfn, boundary, {"log_ratio": log_ratio, "response_mask": imask},
                                    {k: spec[k] for k in ("rollout_is", "rollout_is_threshold",
                                                          "rollout_is_batch_normalize") if k in spec},
                                    absent=NO_BATCH_NORM))
        if spec.get("rollout_rs") is not None:
            rfn = self._fn("compute_rollout_rejection_mask", ROLLOUT_CORR, boundary=boundary)
            imask, _ = rfn(**bind(rfn, boundary, {"log_ratio": log_ratio, "response_mask": imask},
                                  {k: spec[k] for k in ("rollout_rs", "rollout_rs_threshold") if k in spec}))
        return weights, imask

    @contextlib.contextmanager
    def worker_impl(self, config):
        """The drawn trainer option use_legacy_worker_impl, for one call: "enable" is the legacy
        DataParallelPPOActor (workers/actor/dp_actor.py), which hands the loss an ActorConfig whose
        global_batch_info is empty (agg_loss's local token and sequence counts); "disable" the
        engine worker's ppo_loss (workers/utils/losses.py, before 2025-11-29 workers/roles/utils), which
        fills it since 2025-11-24 and before that hands a bool mask with it empty ("engine-local");
        None: the one this checkout's layout says (`batch_info`)."""
        choice = trainer_options(config).get("use_legacy_worker_impl")
        before = self.batch_info
        if choice == "enable":
            self.batch_info = "local"
        elif choice == "disable":
            root = Path(self.core.__file__).parents[3]  # the folder holding verl/ (checkout or site-packages)
            kind = self._engine_loss(root)
            if kind is None:  # before 2025-07-17 no such option; to 2025-08-28 the engine actor's update raised
                raise Unsupported("use_legacy_worker_impl=disable: this verl's engine worker has no ppo_loss "
                                  "(workers/utils/losses.py, workers/roles/utils/losses.py): no engine loss to run")
            self.batch_info = kind
        try:
            yield
        finally:
            self.batch_info = before

    def _policy_boundary(self, boundary: str, mode: str, inputs, config, low: float, high: float,
                         clip_c: float | None) -> BoundaryResult:
        weights, mask = self._decoupled(boundary, inputs, config)
        drawn = trainer_options(config)
        cap = drawn.get("tis_imp_ratio_cap")
        bypass = None
        if drawn.get("bypass_mode"):  # the trainer's bypass mode: old log-probs are the rollout's; its loss_type
            # and the drawn rollout_correction's IS / rejection keys go into the actor's policy_loss config
            if mode != "vanilla" or weights is not None:
                raise Unsupported(f"bypass_mode: verl's bypass-mode loss is the vanilla PPO (or REINFORCE) loss on "
                                  f"the rollout's log-probs, with no decoupled weights (loss {mode!r})")
            mode = "bypass_mode"
            bypass = {**BYPASS_PPO_CLIP, **ROLLOUT_CORRECTIONS.get(drawn.get("rollout_correction"), {}),
                      "loss_type": drawn.get("loss_type") or BYPASS_PPO_CLIP["loss_type"]}
            self._check_rollout_rs(bypass.get("rollout_rs"))
        with self.worker_impl(config), (self._weights_seen() if bypass else contextlib.nullcontext()):
            token, loss, fn, observed = self._policy(
                boundary, mode, inputs["log_probs"], inputs["old_log_probs"], inputs["advantages"], mask,
                clip_low=low, clip_high=high, clip_c=clip_c, loss_agg=config["loss_agg"],
                rollout_is_weights=weights, rollout=None if bypass else inputs.get("rollout_log_probs"),
                tis_cap=None if cap is None or cap == TIS_OFF else cap, rollout_correction=bypass)
        outputs: dict[str, Any] = {"loss": loss}
        if token is not None:
            outputs["pg_loss"] = token
        if weights is not None:
            outputs["weights"] = weights
        return BoundaryResult(outputs, function=self._ref(fn), extras=observed)


def _optimizer_without_default_lr(cls: type, boundary: str) -> Any:
    """An OptimizerConfig with a learning rate, where this verl's default one has none.

    In mid-2025 verl's OptimizerConfig declared ``lr = MISSING`` and asserted it in
    ``__post_init__``, so ActorConfig's default ``optim`` could not be built. The loss path never
    reads the optimizer; any learning rate makes the config constructible."""
    field = next((f for f in dataclasses.fields(cls) if f.name == "optim"), None)
    factory = getattr(field, "default_factory", None)
    if not (isinstance(factory, type) and dataclasses.is_dataclass(factory)):
        return None
    lr = next((f for f in dataclasses.fields(factory) if f.name == "lr"), None)
    if lr is None or lr.default != "???":  # omegaconf.MISSING
        return None
    return build(factory, boundary, {"lr": 1e-6})
