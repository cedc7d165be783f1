"""verl adapter: calls volcengine/verl's real loss-path code at the canonical boundaries.

Target: https://github.com/volcengine/verl (``verl`` on PyPI), either the installed package
(``root=None``) or a checkout (``root`` = the folder that holds ``verl/``).

What each boundary reaches (module ``verl.trainer.ppo.core_algos`` unless named):

==============  ============================================================================
advantages      ``ray_trainer.apply_kl_penalty`` (KL in reward, when kl_coef != 0) then
                ``ray_trainer.compute_advantage`` (the trainer's estimator dispatch), which
                calls the registered estimator (``get_adv_estimator_fn``: gae, grpo,
                grpo_vectorized, rloo, rloo_vectorized, reinforce_plus_plus,
                reinforce_plus_plus_baseline, opo, gpg, grpo_passk, ...). Without the
                trainer module (options.trainer_module=False, or its import failed) the
                estimator is called from the registry and the KL shaping is composed from
                ``kl_penalty`` as apply_kl_penalty does (facts say which path ran).
gae             ``compute_gae_advantage_return``
reward_norm     ``compute_grpo_outcome_advantage`` on one-token responses (verl's only
                reward normalisation is the GRPO estimator's group normalisation);
                mean_leave1out: ``compute_rloo_outcome_advantage``. A row with mask 0 is
                a response whose ``response_mask`` is all zero (what rollout rejection
                sampling leaves) with its reward still in ``token_level_rewards``
policy_loss     ``get_policy_loss_fn("vanilla")``, ``"gspo"`` for
                importance_sampling_level=sequence (options.policy_loss_mode picks any
                registered loss); before "vanilla" was registered: ``compute_policy_loss``. use_decoupled_loss:
                verl's decoupled rollout correction (``rejection_sampling`` holds verl's
                own rollout_correction keys: rollout_is, rollout_is_threshold, rollout_rs,
                ...): weights pi_old / pi_rollout from ``compute_rollout_correction_weights``,
                rejection mask from ``compute_rollout_rejection_mask``
cispo_loss      ``get_policy_loss_fn("cispo")``
is_correction   ``rollout_corr_helper.compute_rollout_correction_weights`` (token TIS;
                IcePop via a ``"low_upper"`` threshold) and the vanilla policy loss with
                ``rollout_is_weights`` (decoupled mode); off_policy_is =
                bypass mode's REINFORCE loss ``compute_policy_loss_reinforce``
loss_agg        ``agg_loss``
kl              ``kl_penalty``
==============  ============================================================================

Not in verl (unsupported): ``opsm_mask``; ``gspo_kl`` (verl computes the GSPO sequence
log-ratio inside ``compute_policy_loss_gspo`` and exposes only the aggregated loss).

Conventions translated here
---------------------------
- verl's response tensors are ``[B, T]`` padded like the canonical ones; the canonical
  ``loss_mask`` is verl's ``response_mask`` (int64 for advantages, as the trainer slices it
  from ``attention_mask``; bool for the policy losses, as ``workers/utils/losses.ppo_loss``
  casts it). ``attention_mask`` is not used.
- The scalar reward is placed at the last ``loss_mask`` token of its row, which is where
  verl's reward managers put it (``reward_tensor[i, valid_response_length - 1]``); the
  reward managers themselves need a tokenizer and are not called.
- Estimator names: verl's registry names (``grpo_vectorized``, ``rloo``, ...) are accepted
  as canonical estimator values; options.vectorized maps grpo / rloo to their vectorised
  forms. Estimators that need inputs no boundary carries (remax, optimal_token_baseline,
  gdpo) are unsupported.
- Groups: the canonical ``group`` ids become verl's ``uid`` array (deterministic UUID
  strings, dtype object, as the trainer builds it); without ``group``, ``config.group_size``
  cuts consecutive groups, else the batch is one group.
- KL estimator names: canonical k1 -> verl "kl" (log p - log p_ref), k2 -> "mse"
  (0.5 * diff^2), k3 and low_var_kl -> "low_var_kl" (exp(ref - logp) - (ref - logp) - 1,
  clamped to [-10, 10]); verl names ("abs", "k3+", ...) pass through.
- Clipping: eps_clip -> ``clip_ratio`` and ``clip_ratio_low``, eps_clip_high ->
  ``clip_ratio_high``, eps_clip_c -> ``clip_ratio_c``. verl always applies the dual clip
  (default c = 3); canonical ``eps_clip_c: null`` (no dual clip) is passed as
  ``clip_ratio_c = inf``, under which verl's dual-clip branch is the identity.
- Policy configs are built through verl's own ``ActorConfig`` / ``PolicyLossConfig`` /
  ``AlgoConfig`` dataclasses, with only the fields that exist at that version.
- Loss normalisation: one micro-batch on one rank. Where verl's actor fills
  ``config.global_batch_info`` (``workers/utils/losses.ppo_loss``, 0.9 and later) the
  adapter fills it the same way: dp_size 1, batch_num_tokens = valid tokens,
  global_batch_size = B (the mini-batch's row count, fully masked rows included); older
  actors leave it empty and ``agg_loss`` uses its local defaults. options.batch_info
  ("engine" | "local") overrides; facts["batch_info"] says which.
- verl's outputs carry no per-token ``pg_loss`` or ``clipfrac``: the token loss is the
  ``loss_mat`` the policy loss hands to ``agg_loss`` (recorded by a call-through spy);
  ``clipfrac`` (verl logs only its masked mean) is not reported.
- Whitening: verl's gae, reinforce_plus_plus, reinforce_plus_plus_baseline (and gdpo)
  estimators always whiten the advantages over the batch (``verl_F.masked_whiten``).
  With canonical ``normalize_advantages: false`` the reported ``advantages`` are the
  estimator's tensor as it entered that whitening call (recorded by a call-through spy;
  the call still runs, so its errors still surface); with ``true`` they are verl's final
  output. Estimators that never whiten (grpo, rloo, ...) cannot honour ``true``.

Import shims
------------
``import verl`` pulls in ray, tensordict, transformers, ... through ``verl/__init__``
(``verl.protocol``) and ``verl.workers.config``; the trainer module adds torchdata,
datasets, pandas, peft, fastapi and more. No boundary calls them: each is stubbed
(``shims.install_stubs``) only when it is not installed. requirements/verl.txt lists the
light packages imported for real. ``import verl`` also calls ``logging.basicConfig`` and
loads ``verl.plugins`` entry points; the adapter restores the root logger afterwards and
sets VERL_USE_EXTERNAL_PLUGINS=none during the import (unless already set).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import logging
import math
import os
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..base import (Adapter, BoundaryResult, FunctionRef, TargetLoadError, Unsupported, parameters,
                   signature_text, version_facts)
from ..shims import import_with_stubs, is_stub

CORE = "verl.trainer.ppo.core_algos"
TRAINER = "verl.trainer.ppo.ray_trainer"
ROLLOUT_CORR = "verl.trainer.ppo.rollout_corr_helper"
ACTOR_LOSSES_FILE = ("verl", "workers", "utils", "losses.py")

_PIP_HINT = "pip install --no-deps verl==0.9.1 && pip install -r requirements/verl.txt"

# Third-party modules verl's import chain (verl/__init__ -> verl.protocol, verl.workers.config,
# verl.trainer.ppo.ray_trainer) reaches at module level but no boundary calls. Found by
# importing verl 0.9.1 and 0.8.0.dev in an environment with torch, RL-Sentinel's
# dependencies and requirements/verl.txt only; stubbed only when not installed.
HEAVY_DEPS = frozenset({
    "ray", "tensordict", "transformers", "codetiming", "torchdata", "tqdm", "datasets", "PIL",
    "pandas", "peft", "cachetools", "uvicorn", "fastapi", "wandb", "swanlab", "mlflow", "tensorboard",
    "tensorboardX", "vllm", "sglang", "accelerate", "pyarrow", "dill", "pylatexenc", "pybind11",
    "torchcodec", "qwen_vl_utils", "mathruler", "math_verify", "msgspec", "zmq", "transfer_queue",
    "liger_kernel", "flash_attn", "megatron", "mbridge", "torch_npu", "hydra", "safetensors",
    "huggingface_hub", "starlette", "pydantic_settings", "aiohttp", "httpx", "requests", "psutil",
    "nvtx", "torchvision", "torchaudio", "modelscope", "trl", "cupy", "filelock", "jinja2",
    "orjson",  # verl.utils.tracking (a logging client)
    "pkg_resources",  # verl <= 0.4 imports it at top level (used only on Ascend NPUs)
})

# Canonical KL estimator -> verl kl_penalty name (verl 0.9 also accepts k1/k2/k3; "kl", "mse"
# and "low_var_kl" exist at every version).
KL_NAMES = {"k1": "kl", "kl": "kl", "k2": "mse", "mse": "mse", "k3": "low_var_kl", "low_var_kl": "low_var_kl"}

# Canonical estimator aliases (anything else is looked up in verl's registry as given).
ESTIMATOR_ALIASES = {"ppo": "gae"}
VECTORIZED = {"grpo": "grpo_vectorized", "rloo": "rloo_vectorized"}
# Estimators whose group normalisation is GRPO's (norm_adv_by_std_in_grpo applies).
GRPO_FAMILY = ("grpo", "grpo_vectorized", "grpo_passk")
# Registered estimators that need inputs no canonical boundary carries.
NEEDS_MORE = {
    "remax": "reward_baselines (the greedy-decoding reward of each prompt)",
    "optimal_token_baseline": "sum_pi_squared (sum over the vocabulary of pi^2, from the actor)",
    "tir_optimal_token_baseline": "sum_pi_squared (sum over the vocabulary of pi^2, from the actor)",
    "gdpo": "per-component rewards named by algorithm.gdpo_reward_keys",
}

_last_root: list[Path] = []  # where `verl` was imported from in this process


# --- small helpers -------------------------------------------------------------------------

def _kwargs(fn: Callable, boundary: str, required: dict[str, Any], optional: dict[str, Any] | None = None,
            aliases: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Bind by keyword against the target's signature; a required name it lacks is drift, an
    optional one it lacks is drift only when its value is not None (None: not passed)."""
    params = parameters(fn)
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    out: dict[str, Any] = {}
    for key, value in required.items():
        names = (key, *((aliases or {}).get(key, ())))
        hit = next((n for n in names if n in params), None)
        if hit is None:
            raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r} (boundary {boundary!r})")
        out[hit] = value
    for key, value in (optional or {}).items():  # None: leave the target's default
        if value is None:
            continue
        if key in params:
            out[key] = value
        elif not has_var_kw:
            raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r}, so {key}={value!r} "
                              f"cannot be applied (boundary {boundary!r})")
    for name, p in params.items():
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in out:
            raise Unsupported(f"{signature_text(fn)} requires {name!r}, which boundary {boundary!r} cannot supply")
    return out


@contextlib.contextmanager
def _spy(module: types.ModuleType, name: str):
    """Replace ``module.name`` by a call-through wrapper for the duration; yields the list of
    (bound arguments, result) of every call. Target code that looks the name up in the
    module at call time (``agg_loss(...)``, ``verl_F.masked_whiten(...)``) reaches it."""
    real = getattr(module, name)
    sig = inspect.signature(real)
    calls: list[tuple[dict[str, Any], Any]] = []

    @functools.wraps(real)
    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        try:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            calls.append((dict(bound.arguments), out))
        except TypeError:
            calls.append(({}, out))
        return out

    setattr(module, name, spy)
    try:
        yield calls
    finally:
        setattr(module, name, real)


@contextlib.contextmanager
def _quiet_import():
    """verl's import calls logging.basicConfig and loads verl.plugins entry points: keep the
    worker's root logger as it was and load no plugins (unless the user asked for them)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    env_key = "VERL_USE_EXTERNAL_PLUGINS"
    env_before = os.environ.get(env_key)
    if env_before is None:
        os.environ[env_key] = "none"
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        if env_before is None:
            os.environ.pop(env_key, None)


def _uids(group: torch.Tensor | None, group_size: int | None, n: int) -> np.ndarray:
    """Canonical groups -> verl's ``uid`` array (one UUID string per prompt, dtype object)."""
    if group is not None:
        ids = [int(g) for g in group.reshape(-1).tolist()]
    elif group_size:
        ids = [i // int(group_size) for i in range(n)]
    else:
        ids = [0] * n
    return np.array([str(uuid.uuid5(uuid.NAMESPACE_OID, f"sentinel-group-{g}")) for g in ids], dtype=object)


def _last_valid_scores(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's token_level_scores: each row's scalar reward at its last response token."""
    scores = torch.zeros(mask.shape, dtype=rewards.dtype if rewards.is_floating_point() else torch.float32,
                         device=mask.device)
    for b in range(mask.shape[0]):
        idx = mask[b].nonzero(as_tuple=True)[0]
        if len(idx):
            scores[b, int(idx[-1])] = rewards[b]
    return scores


class _Batch(dict):
    """Stands in for DataProto.batch (a TensorDict): key access plus ``batch_size``."""

    def __init__(self, n: int, tensors: dict[str, torch.Tensor]):
        super().__init__(tensors)
        self.batch_size = torch.Size([n])


def _data(n: int, tensors: dict[str, torch.Tensor], uids: np.ndarray) -> types.SimpleNamespace:
    """A DataProto-shaped object for apply_kl_penalty / compute_advantage, which read only
    ``data.batch[...]``, ``data.batch.batch_size`` and ``data.non_tensor_batch["uid"]``
    (real DataProto needs tensordict, a heavy dependency)."""
    return types.SimpleNamespace(batch=_Batch(n, tensors), non_tensor_batch={"uid": uids}, meta_info={})


def _build(cls: type, boundary: str, values: dict[str, Any]) -> Any:
    """Instantiate a verl config dataclass with the fields this version has."""
    if not dataclasses.is_dataclass(cls):
        raise Unsupported(f"{cls!r} is not a dataclass at this verl version (boundary {boundary!r})")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


class VerlAdapter(Adapter):
    """volcengine/verl from a checkout (``--repo``) or the installed package."""

    name = "verl"
    description = ("volcengine/verl: trainer.ppo.core_algos (estimators, policy losses, agg_loss, kl_penalty), "
                   "ray_trainer.apply_kl_penalty / compute_advantage and rollout_corr_helper, on one process.")

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        super().__init__(root, device, options)
        self.mods: dict[str, types.ModuleType] = {}
        self.errors: dict[str, str] = {}
        self.facts: dict[str, Any] = {}
        self.batch_info = "local"

    # --- loading ------------------------------------------------------------------------
    def _locate(self) -> Path:
        if self.root is None:
            try:
                spec = importlib.util.find_spec("verl")
            except (ImportError, ValueError):
                spec = None
            if spec is None or not spec.submodule_search_locations:
                raise TargetLoadError(f"verl target: no --repo given and no installed `verl` package found "
                                      f"(install it: {_PIP_HINT})")
            root = Path(list(spec.submodule_search_locations)[0]).resolve().parent
        else:
            root = Path(self.root).expanduser().resolve()
        if not (root / "verl" / "trainer" / "ppo" / "core_algos.py").is_file():
            raise TargetLoadError(
                f"verl target: {root} is not a verl checkout (module verl.trainer.ppo.core_algos, "
                f"file verl/trainer/ppo/core_algos.py, is missing)")
        loaded = sys.modules.get("verl")
        if loaded is not None and not is_stub(loaded):
            where = Path(list(getattr(loaded, "__path__", [""]))[0] or ".").resolve()
            if where != root / "verl":
                raise TargetLoadError(f"verl target: another verl is already imported from {where}; "
                                      f"one interpreter can hold one verl version")
        return root

    def _version(self, root: Path, from_checkout: bool) -> dict[str, Any]:
        vfile = root / "verl" / "version" / "version"
        return version_facts(root, vfile.read_text(errors="replace").strip() if vfile.is_file() else None, from_checkout)

    def _import(self, name: str) -> types.ModuleType:
        return import_with_stubs(name, target="verl", own="verl", stubs=self.stubs,
                                 allowed=HEAVY_DEPS | set(self.options.get("extra_stubs") or ()),
                                 hint="pip install -r requirements/verl.txt, or options.extra_stubs")

    def _optional(self, name: str, enabled: bool = True) -> None:
        if not enabled:
            self.errors[name] = "disabled by options"
            return
        try:
            self.mods[name] = self._import(name)
        except Exception as e:  # noqa: BLE001 - optional: the boundaries fall back or say unsupported
            self.errors[name] = f"{type(e).__name__}: {e}"

    def _detect_batch_info(self, root: Path) -> str:
        choice = self.options.get("batch_info")
        if choice in ("engine", "local"):
            return choice
        losses = root.joinpath(*ACTOR_LOSSES_FILE)
        try:
            src = losses.read_text(errors="replace")
        except OSError:
            return "local"
        return "engine" if 'global_batch_info["global_batch_size"]' in src else "local"

    def load(self) -> dict[str, Any]:
        root = self._locate()
        from_checkout = self.root is not None
        t0 = time.perf_counter()
        if str(root) in sys.path:
            sys.path.remove(str(root))
        sys.path.insert(0, str(root))
        self.root = root
        if _last_root and _last_root[0] != root:
            raise TargetLoadError(f"verl target: this process already imported verl from {_last_root[0]}")
        with _quiet_import():
            self.mods[CORE] = self._import(CORE)
            boundary_s = time.perf_counter() - t0
            self._optional(ROLLOUT_CORR)
            self._optional(TRAINER, bool(self.options.get("trainer_module", True)))
        if not _last_root:
            _last_root.append(root)
        core = self.mods[CORE]
        self.batch_info = self._detect_batch_info(root)
        files = []
        for m in self.mods.values():
            try:
                files.append(str(Path(m.__file__).resolve().relative_to(root)))
            except (TypeError, ValueError):
                files.append(str(m.__file__))
        self.facts = {
            **self._version(root, from_checkout),
            "module_files": files,
            "stubs": list(self.stubs),
            "boundary_import_s": round(boundary_s, 4),
            "batch_info": self.batch_info,
            "advantage_path": "trainer" if TRAINER in self.mods else "registry",
            "adv_estimators": sorted(getattr(core, "ADV_ESTIMATOR_REGISTRY", {}) or []),
            "policy_losses": sorted(getattr(core, "POLICY_LOSS_REGISTRY", {}) or []),
        }
        if self.errors:
            self.facts["optional_module_errors"] = dict(self.errors)
        return dict(self.facts)

    # --- lookups ------------------------------------------------------------------------
    @property
    def core(self) -> types.ModuleType:
        return self.mods[CORE]

    def _fn(self, name: str, boundary: str, module: str = CORE) -> Callable:
        fn = getattr(self.mods.get(module), name, None)
        if callable(fn):
            return fn
        why = f" ({self.errors[module]})" if module in self.errors else ""
        raise Unsupported(f"verl has no {name} in {module.replace('.', '/')}.py at "
                          f"{self.facts.get('version', 'this version')}{why} (needed by boundary {boundary!r})")

    def _ref(self, fn: Callable) -> FunctionRef:
        return FunctionRef.of(fn, self.root)

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
    def _actor_config(self, boundary: str, *, clip_low: float, clip_high: float, clip_c: float, loss_agg: str,
                      loss_mode: str, mask: torch.Tensor):
        """verl's ActorConfig (with its PolicyLossConfig) for one micro-batch on one rank."""
        cls = self._config_class("ActorConfig", "verl.workers.config", "verl.workers.config.actor")
        if cls is None:
            raise Unsupported(f"verl has no ActorConfig at this version (boundary {boundary!r})")
        values: dict[str, Any] = dict(
            strategy="fsdp", rollout_n=1, ppo_mini_batch_size=int(mask.shape[0]), ppo_micro_batch_size_per_gpu=int(mask.shape[0]),
            use_dynamic_bsz=False, clip_ratio=clip_low, clip_ratio_low=clip_low, clip_ratio_high=clip_high,
            clip_ratio_c=clip_c, loss_agg_mode=loss_agg, use_torch_compile=False,
        )
        pl_cls = self._config_class("PolicyLossConfig", "verl.workers.config", "verl.workers.config.actor")
        if pl_cls is not None:
            values["policy_loss"] = _build(pl_cls, boundary, {"loss_mode": loss_mode})
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in values and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
        if missing:
            raise Unsupported(f"signature drift: verl's ActorConfig requires {missing}, which the adapter does not "
                              f"set (boundary {boundary!r})")
        try:
            cfg = _build(cls, boundary, values)
        except (ValueError, AssertionError, TypeError) as e:
            raise Unsupported(f"verl's ActorConfig rejects this configuration: {e} (boundary {boundary!r})") from e
        info = getattr(cfg, "global_batch_info", None)
        if isinstance(info, dict):
            info.clear()
            if self.batch_info == "engine":  # workers/utils/losses.ppo_loss
                info.update(dp_size=1, batch_num_tokens=int(mask.sum().item()), global_batch_size=int(mask.shape[0]),
                            loss_scale_factor=getattr(cfg, "loss_scale_factor", None))
        return cfg

    def _algo_config(self, boundary: str, **values: Any):
        cls = self._config_class("AlgoConfig", "verl.trainer.config", "verl.trainer.config.algorithm")
        if cls is None:  # before the dataclass configs: a plain DictConfig-like mapping
            from omegaconf import OmegaConf
            return OmegaConf.create(values)
        kl_cls = self._config_class("KLControlConfig", "verl.trainer.config", "verl.trainer.config.algorithm")
        if kl_cls is not None and isinstance(values.get("kl_ctrl"), dict):
            values["kl_ctrl"] = _build(kl_cls, boundary, values["kl_ctrl"])
        return _build(cls, boundary, values)

    # --- policy losses --------------------------------------------------------------------
    def _policy(self, boundary: str, loss_mode: str, lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor,
                mask: torch.Tensor, *, clip_low: float, clip_high: float, clip_c: float | None, loss_agg: str,
                rollout_is_weights: torch.Tensor | None = None, fn: Callable | None = None,
                extra: dict[str, Any] | None = None):
        """One registered policy loss on one micro-batch; returns (token loss, scalar loss, fn)."""
        core = self.core
        c = math.inf if clip_c is None else float(clip_c)
        registry = getattr(core, "get_policy_loss_fn", None)
        mask_t = mask.bool() if self.batch_info == "engine" else mask.to(torch.int64)
        if fn is None and registry is not None and not (
                loss_mode == "vanilla" and "vanilla" not in (getattr(core, "POLICY_LOSS_REGISTRY", None) or {"vanilla"})
                and callable(getattr(core, "compute_policy_loss", None))):
            # (verl 0.4 / 0.5 dispatch "vanilla" to compute_policy_loss outside the registry)
            try:
                fn = registry(loss_mode)
            except (ValueError, KeyError) as e:
                raise Unsupported(f"verl has no registered policy loss {loss_mode!r} at "
                                  f"{self.facts.get('version')}: {e}") from e
        if fn is not None:
            cfg = self._actor_config(boundary, clip_low=clip_low, clip_high=clip_high, clip_c=c, loss_agg=loss_agg,
                                     loss_mode=loss_mode, mask=mask)
            kw = _kwargs(fn, boundary, {"old_log_prob": old, "log_prob": lp, "advantages": adv,
                                        "response_mask": mask_t},
                         {"loss_agg_mode": loss_agg, "config": cfg, "rollout_is_weights": rollout_is_weights,
                          **(extra or {})},
                         aliases={"old_log_prob": ("rollout_log_prob",), "response_mask": ("eos_mask",)})
        else:  # before the policy-loss registry (verl < 0.4): compute_policy_loss(cliprange=...)
            if loss_mode != "vanilla":
                raise Unsupported(f"verl {self.facts.get('version')} has no policy-loss registry (only vanilla PPO)")
            if rollout_is_weights is not None:
                raise Unsupported(f"verl {self.facts.get('version')} takes no rollout IS weights in its policy loss")
            fn = self._fn("compute_policy_loss", boundary)
            params = parameters(fn)
            if clip_c is not None and "clip_ratio_c" not in params:
                raise Unsupported(f"{signature_text(fn)} has no dual clip (eps_clip_c={clip_c})")
            if clip_high != clip_low and "cliprange_high" not in params:
                raise Unsupported(f"{signature_text(fn)} has a symmetric clip only (eps_clip_high={clip_high})")
            kw = _kwargs(fn, boundary, {"old_log_prob": old, "log_prob": lp, "advantages": adv,
                                        "response_mask": mask_t, "cliprange": clip_low},
                         {"cliprange_low": clip_low if "cliprange_low" in params else None,
                          "cliprange_high": clip_high if "cliprange_high" in params else None,
                          "clip_ratio_c": c if "clip_ratio_c" in params else None,
                          "loss_agg_mode": loss_agg if "loss_agg_mode" in params else None},
                         aliases={"response_mask": ("eos_mask",)})
            if loss_agg != "token-mean" and "loss_agg_mode" not in params:
                raise Unsupported(f"{signature_text(fn)} aggregates by token-mean only (loss_agg={loss_agg})")
        agg_calls: list = []
        if callable(getattr(core, "agg_loss", None)):
            with _spy(core, "agg_loss") as agg_calls:
                out = fn(**kw)
        else:
            out = fn(**kw)
        loss = out[0] if isinstance(out, tuple) else out
        token = next((a.get("loss_mat") for a, r in agg_calls if r is loss), None)
        if token is None and len(agg_calls) == 1:
            token = agg_calls[0][0].get("loss_mat")
        return token, loss, fn

    # --- boundaries ---------------------------------------------------------------------
    _RS_KEYS = ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs",
                "rollout_rs_threshold")

    def _decoupled(self, boundary: str, inputs, config) -> tuple[torch.Tensor | None, torch.Tensor]:
        """use_decoupled_loss: verl's decoupled rollout correction (old_log_probs = the recomputed
        pi_old, rollout_log_probs = the rollout engine's): IS weights pi_old / pi_rollout from
        compute_rollout_correction_weights and, with rollout_rs, the rejection mask from
        compute_rollout_rejection_mask, as the trainer's compute_rollout_correction_and_add_to_batch
        combines them. `rejection_sampling` is verl's own rollout_correction keys."""
        mask = inputs["loss_mask"]
        if not config.get("use_decoupled_loss"):
            return None, mask
        spec = config.get("rejection_sampling")
        if not spec:
            raise Unsupported("use_decoupled_loss: verl's decoupled mode is configured by algorithm.rollout_correction;"
                              " pass rejection_sampling with its keys (" + ", ".join(self._RS_KEYS) + ")")
        unknown = sorted(set(spec) - set(self._RS_KEYS))
        if unknown:
            raise Unsupported(f"rejection_sampling keys {unknown} are not verl rollout_correction keys "
                              f"({', '.join(self._RS_KEYS)})")
        if "rollout_log_probs" not in inputs:
            raise ValueError("use_decoupled_loss needs input rollout_log_probs (the rollout engine's log-probs)")
        log_ratio = (inputs["old_log_probs"] - inputs["rollout_log_probs"]).detach()
        imask = mask.to(torch.int64)
        weights = None
        if spec.get("rollout_is") is not None:
            wfn = self._fn("compute_rollout_correction_weights", boundary, ROLLOUT_CORR)
            kw = _kwargs(wfn, boundary, {"log_ratio": log_ratio, "response_mask": imask},
                         {k: spec[k] for k in ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize")
                          if k in spec})
            with torch.no_grad():
                weights, _ = wfn(**kw)
        if spec.get("rollout_rs") is not None:
            rfn = self._fn("compute_rollout_rejection_mask", boundary, ROLLOUT_CORR)
            kw = _kwargs(rfn, boundary, {"log_ratio": log_ratio, "response_mask": imask},
                         {k: spec[k] for k in ("rollout_rs", "rollout_rs_threshold") if k in spec})
            with torch.no_grad():
                imask, _ = rfn(**kw)
        return weights, imask

    def _policy_boundary(self, boundary: str, mode: str, inputs, config, low: float, high: float,
                         clip_c: float | None) -> BoundaryResult:
        weights, mask = self._decoupled(boundary, inputs, config)
        token, loss, fn = self._policy(
            boundary, mode, inputs["log_probs"], inputs["old_log_probs"], inputs["advantages"], mask,
            clip_low=low, clip_high=high, clip_c=clip_c, loss_agg=config.get("loss_agg", "token-mean"),
            rollout_is_weights=weights)
        outputs: dict[str, Any] = {"loss": loss}
        if token is not None:
            outputs["pg_loss"] = token
        if weights is not None:
            outputs["weights"] = weights
        return BoundaryResult(outputs, function=self._ref(fn))

    def b_policy_loss(self, inputs, config):
        """Registered policy loss "vanilla" (asymmetric clip, dual clip clip_ratio_c), or "gspo"
        for importance_sampling_level=sequence, with verl's ActorConfig; options.policy_loss_mode
        selects any other registered loss."""
        level = config.get("importance_sampling_level") or "token"
        if level not in ("token", "sequence"):
            raise Unsupported(f"importance_sampling_level {level!r}: verl has token (vanilla) and sequence (gspo)")
        mode = self.options.get("policy_loss_mode") or ("gspo" if level == "sequence" else "vanilla")
        if mode == "gspo" and config.get("eps_clip_c") is not None:
            raise Unsupported("verl's gspo policy loss has no dual clip (eps_clip_c)")
        low = float(config.get("eps_clip", 0.2))
        high = low if config.get("eps_clip_high") is None else float(config["eps_clip_high"])
        return self._policy_boundary("policy_loss", mode, inputs, config, low, high, config.get("eps_clip_c"))

    def b_cispo_loss(self, inputs, config):
        """Registered policy loss "cispo": -sg(clip(ratio, 1 - low, 1 + high)) * A * log pi."""
        registry = getattr(self.core, "POLICY_LOSS_REGISTRY", None)
        if registry is None or "cispo" not in registry:
            raise Unsupported(f"verl {self.facts.get('version')} registers no 'cispo' policy loss"
                              + (f" (has: {', '.join(sorted(registry))})" if registry else ""))
        low = float(config.get("eps_clip", 1.0))
        high = float(config.get("eps_clip_high", 0.28))
        return self._policy_boundary("cispo_loss", "cispo", inputs, config, low, high, None)

    def b_gspo_kl(self, inputs, config):
        raise Unsupported("verl computes the GSPO sequence log-ratio inside compute_policy_loss_gspo (registered "
                          "policy loss 'gspo') and returns only the aggregated loss: no function exposes the "
                          "sequence KL (use options.policy_loss_mode=gspo with the policy_loss boundary)")

    def b_opsm_mask(self, inputs, config):
        raise Unsupported("verl has no off-policy sequence masking conditioned on the advantage (its rollout "
                          "rejection sampling, rollout_corr_helper.compute_rollout_rejection_mask, ignores the "
                          "advantage)")

    def b_loss_agg(self, inputs, config):
        """agg_loss(loss_mat, loss_mask, loss_agg_mode), with the actor's global_batch_info."""
        fn = self._fn("agg_loss", "loss_agg")
        mask = inputs["loss_mask"]
        mode = config.get("mode", "token-mean")
        optional: dict[str, Any] = {}
        if self.batch_info == "engine":
            optional = {"dp_size": 1, "batch_num_tokens": int(mask.sum().item()),
                        "global_batch_size": int(mask.shape[0])}
        mask_t = mask.bool() if self.batch_info == "engine" else mask.to(torch.int64)
        kw = _kwargs(fn, "loss_agg", {"loss_mat": inputs["values"], "loss_mask": mask_t, "loss_agg_mode": mode},
                     optional)
        try:
            loss = fn(**kw)
        except ValueError as e:
            if "loss_agg_mode" in str(e) or "Invalid" in str(e):
                raise Unsupported(f"verl's agg_loss has no mode {mode!r}: {e}") from e
            raise
        return BoundaryResult({"loss": loss}, function=self._ref(fn))

    @staticmethod
    def _kl_name(kl_type: str) -> str:
        return KL_NAMES.get(kl_type, kl_type)

    def b_kl(self, inputs, config):
        """kl_penalty(logprob, ref_logprob, kl_penalty=<verl name>)."""
        fn = self._fn("kl_penalty", "kl")
        name = self._kl_name(config.get("kl_type", "k1"))
        kw = _kwargs(fn, "kl", {"logprob": inputs["log_probs"], "ref_logprob": inputs["ref_log_probs"],
                                "kl_penalty": name})
        try:
            kl = fn(**kw)
        except NotImplementedError as e:
            raise Unsupported(f"verl's kl_penalty has no estimator {name!r}") from e
        return BoundaryResult({"kl": kl}, function=self._ref(fn))

    def b_gae(self, inputs, config):
        """compute_gae_advantage_return; `advantages` is the GAE before verl's built-in
        masked_whiten (see the module docstring), `returns` verl's returns."""
        fn = self._fn("compute_gae_advantage_return", "gae")
        kw = _kwargs(fn, "gae", {"token_level_rewards": inputs["token_rewards"], "values": inputs["values"],
                                 "response_mask": inputs["loss_mask"].to(torch.int64),
                                 "gamma": float(config.get("gamma", 1.0)), "lam": float(config.get("lam", 1.0))},
                     aliases={"response_mask": ("eos_mask",)})
        with _spy(self._verl_F(), "masked_whiten") as whiten:
            adv, ret = fn(**kw)
        if whiten:
            adv = whiten[-1][0]["values"]
        return BoundaryResult({"advantages": adv, "returns": ret}, function=self._ref(fn))

    def b_reward_norm(self, inputs, config):
        """compute_grpo_outcome_advantage on one-token responses (scores = rewards): group (or
        batch) mean, and std when std_level is set (norm_adv_by_std_in_grpo), epsilon = eps
        (None: verl's 1e-6). Row mask 0 = a fully rejected response (see _row_mask)."""
        r = inputs["rewards"]
        mean_level, std_level = config.get("mean_level", "batch"), config.get("std_level", "batch")
        if config.get("std_unbiased") is False:
            raise Unsupported("std_unbiased=False: verl's GRPO std is torch.std (unbiased)")
        if config.get("mean_leave1out"):
            return self._rloo_norm(inputs, config, mean_level, std_level)
        if mean_level is None:
            raise Unsupported("verl's group normalisation always subtracts the group mean")
        if std_level not in (None, mean_level):
            raise Unsupported(f"verl divides by the std of the group it centres on (mean over {mean_level}, "
                              f"std over {std_level})")
        fn = self._fn("compute_grpo_outcome_advantage", "reward_norm")
        n = int(r.shape[0])
        if mean_level == "batch":
            uids = _uids(None, None, n)
        else:
            uids = _uids(inputs.get("group"), config.get("group_size"), n)
        one = self._row_mask(inputs, n, r.device)
        optional: dict[str, Any] = {"epsilon": None if config.get("eps") is None else float(config["eps"])}
        # absent before Dr. GRPO support: then only the std-normalised form exists
        if "norm_adv_by_std_in_grpo" in parameters(fn) or std_level is None:
            optional["norm_adv_by_std_in_grpo"] = std_level is not None
        kw = _kwargs(fn, "reward_norm", {"token_level_rewards": r.reshape(n, 1).clone(), "response_mask": one,
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
        fn = self._fn("compute_rloo_outcome_advantage", "reward_norm")
        r = inputs["rewards"]
        n = int(r.shape[0])
        uids = _uids(None, None, n) if mean_level == "batch" else _uids(inputs.get("group"), config.get("group_size"), n)
        one = self._row_mask(inputs, n, r.device)
        kw = _kwargs(fn, "reward_norm", {"token_level_rewards": r.reshape(n, 1).clone(), "response_mask": one,
                                         "index": uids}, aliases={"response_mask": ("eos_mask",)})
        adv, _ = fn(**kw)
        return BoundaryResult({"rewards": adv[:, 0]}, function=self._ref(fn))

    # --- advantages -----------------------------------------------------------------------
    def _estimator(self, config: dict[str, Any]) -> tuple[str, Callable]:
        core = self.core
        name = ESTIMATOR_ALIASES.get(config.get("estimator", "gae"), config.get("estimator", "gae"))
        if self.options.get("vectorized"):
            name = VECTORIZED.get(name, name)
        if name in NEEDS_MORE:
            raise Unsupported(f"verl's {name!r} estimator needs {NEEDS_MORE[name]}, which no canonical input carries")
        getter = getattr(core, "get_adv_estimator_fn", None)
        if getter is None:  # before the registry (verl < 0.4)
            legacy = {"gae": "compute_gae_advantage_return", "grpo": "compute_grpo_outcome_advantage",
                      "rloo": "compute_rloo_outcome_advantage",
                      "reinforce_plus_plus": "compute_reinforce_plus_plus_outcome_advantage"}
            if name not in legacy:
                raise Unsupported(f"verl {self.facts.get('version')} has no {name!r} estimator")
            return name, self._fn(legacy[name], "advantages")
        try:
            return name, getter(name)
        except (ValueError, KeyError) as e:
            known = ", ".join(sorted(getattr(core, "ADV_ESTIMATOR_REGISTRY", {}) or []))
            raise Unsupported(f"verl has no advantage estimator {name!r} (registered: {known})") from e

    def b_advantages(self, inputs, config):
        """KL in reward (apply_kl_penalty) and the estimator (compute_advantage), as verl's
        trainer runs them; see the module docstring for the conventions."""
        name, est_fn = self._estimator(config)
        norm = config.get("reward_norm")
        if config.get("mask_no_eos_with_zero"):
            raise Unsupported("mask_no_eos_with_zero: verl's advantage path has no option to zero the reward of a "
                              "response that hit the length limit without EOS")
        if config.get("reward_clip") is not None:
            raise Unsupported("reward_clip: verl's advantage path does not clip rewards")
        if float(config.get("reward_bias") or 0.0) != 0.0 or float(config.get("reward_scaling", 1.0) or 1.0) != 1.0:
            raise Unsupported("reward_bias / reward_scaling: verl's advantage path does not shift or scale rewards")
        whiten_wanted = bool(config.get("normalize_advantages"))
        adv_norm = config.get("adv_norm")
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
        kl_coef = float(config.get("kl_coef", 0.0) or 0.0)
        kl_name = self._kl_name(config.get("kl_type", "k1"))
        scores = _last_valid_scores(rewards, mask)
        uids = _uids(inputs.get("group"), config.get("group_size"), n)
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
        data = _data(n, tensors, uids)
        algo = self._algo_config("advantages", gamma=float(config.get("gamma", 1.0)),
                                 lam=float(config.get("lam", 1.0)), adv_estimator=name,
                                 norm_adv_by_std_in_grpo=norm_by_std, use_kl_in_reward=use_kl, kl_penalty=kl_name,
                                 kl_ctrl={"type": "fixed", "kl_coef": kl_coef})

        core, trainer = self.core, self.mods.get(TRAINER)
        outputs: dict[str, Any] = {}
        # 1. KL in reward (ray_trainer.apply_kl_penalty; the trainer skips it when use_kl_in_reward is off)
        if use_kl:
            with _spy(core, "kl_penalty") as kl_calls:
                if trainer is not None and callable(getattr(trainer, "apply_kl_penalty", None)):
                    fixed = getattr(core, "FixedKLController", None)
                    kl_ctrl = fixed(kl_coef=kl_coef) if fixed is not None else core.get_kl_controller(algo.kl_ctrl)
                    data, _metrics = trainer.apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty=kl_name)
                else:  # the same composition from core_algos (apply_kl_penalty's four lines)
                    kld = core.kl_penalty(tensors["old_log_probs"], tensors["ref_log_prob"], kl_penalty=kl_name)
                    data.batch["token_level_rewards"] = scores - kl_coef * (kld * mask)
            if kl_calls:
                outputs["logged_kl"] = kl_calls[0][1]  # the KL tensor verl computed, as it is after the call
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]

        # 2. the estimator (ray_trainer.compute_advantage dispatch, else the registry)
        with _spy(self._verl_F(), "masked_whiten") as whiten:
            dispatch = getattr(trainer, "compute_advantage", None) if trainer is not None else None
            if dispatch is not None and self.options.get("advantage_dispatch", "trainer") == "trainer":
                optional = {"gamma": algo.gamma, "lam": algo.lam, "num_repeat": 1, "config": algo}
                if "norm_adv_by_std_in_grpo" in parameters(dispatch) or not norm_by_std:
                    optional["norm_adv_by_std_in_grpo"] = norm_by_std
                kw = _kwargs(dispatch, "advantages", {"data": data, "adv_estimator": name},
                             {k: v for k, v in optional.items() if k in parameters(dispatch) or k == "norm_adv_by_std_in_grpo"})
                data = dispatch(**kw)
                adv, ret = data.batch["advantages"], data.batch["returns"]
            else:
                avail = {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": mask,
                         "index": uids, "config": algo, "gamma": algo.gamma, "lam": algo.lam,
                         "values": data.batch.get("values"), "norm_adv_by_std_in_grpo": norm_by_std}
                params = parameters(est_fn)
                req = {k: v for k, v in avail.items() if k in params and v is not None}
                if "eos_mask" in params:
                    req["eos_mask"] = mask
                adv, ret = est_fn(**_kwargs(est_fn, "advantages", req))
        if whiten_wanted:
            if not whiten:
                raise Unsupported(f"normalize_advantages: verl's {name!r} estimator does not whiten its advantages "
                                  f"and verl has no separate advantage normalisation")
        elif whiten:
            same = ret is adv  # estimators returning (scores, scores) whiten both
            adv = whiten[-1][0]["values"]  # the estimator's advantages before its built-in whitening
            if same:
                ret = adv
        outputs.update(advantages=adv, returns=ret, token_rewards=data.batch["token_level_rewards"])
        return BoundaryResult(outputs, function=self._ref(est_fn))

    # --- rollout / trainer mismatch -------------------------------------------------------
    def b_is_correction(self, inputs, config):
        """Token-level rollout IS weights from rollout_corr_helper.compute_rollout_correction_weights
        and the loss that consumes them: vanilla_tis / icepop = decoupled mode (weights from
        old vs rollout, vanilla PPO loss times the weights); off_policy_is = bypass mode with
        loss_type reinforce (weights from the current policy vs rollout, REINFORCE loss)."""
        method = config.get("method", "off_policy_is")
        wfn = self._fn("compute_rollout_correction_weights", "is_correction", ROLLOUT_CORR)
        mask = inputs["loss_mask"].to(torch.int64)
        lp, old, roll, adv = (inputs[k] for k in ("log_probs", "old_log_probs", "rollout_log_probs", "advantages"))
        low, high = float(config.get("eps_clip", 0.2)), config.get("eps_clip_high")
        high = low if high is None else float(high)
        tis_low, tis_high = float(config.get("tis_clip_low", 0.0) or 0.0), float(config.get("tis_clip", 2.0))
        loss_agg = config.get("loss_agg", "token-mean")
        if method == "vanilla_tis":
            if tis_low > 0:
                raise Unsupported(f"vanilla_tis with tis_clip_low={tis_low}: verl's token TIS truncates from above "
                                  f"only (a 'low_upper' threshold is IcePop, which zeroes instead of clipping)")
            log_ratio, threshold = (old - roll).detach(), tis_high
        elif method == "icepop":
            if tis_low <= 0:
                raise Unsupported("icepop needs tis_clip_low > 0: verl's 'low_upper' threshold requires a positive "
                                  "lower bound")
            ann = str(parameters(wfn).get("rollout_is_threshold", inspect.Parameter("x", 1)).annotation)
            if "str" not in ann:
                raise Unsupported(f"icepop: {signature_text(wfn)} takes a single upper threshold at this verl version (no "
                                  f"'low_upper' IcePop threshold)")
            log_ratio, threshold = (old - roll).detach(), f"{tis_low}_{tis_high}"
        elif method == "off_policy_is":
            if 1.0 - low > 0:
                raise Unsupported(f"off_policy_is clips the weight to [1 - {low}, 1 + {high}]: verl's bypass-mode "
                                  f"IS weight min(pi_theta / pi_rollout, threshold) has no lower clip")
            log_ratio, threshold = (lp - roll).detach(), 1.0 + high
        else:
            raise ValueError(f"unknown is_correction method {method!r}")
        kw = _kwargs(wfn, "is_correction", {"log_ratio": log_ratio, "response_mask": mask},
                     {"rollout_is": "token", "rollout_is_threshold": threshold})
        with torch.no_grad():
            weights, _metrics = wfn(**kw)
        if method == "off_policy_is":
            fn = self._fn("compute_policy_loss_reinforce", "is_correction")
            token, loss, fn = self._policy("is_correction", "vanilla", lp, roll, adv, inputs["loss_mask"],
                                           clip_low=low, clip_high=high, clip_c=None, loss_agg=loss_agg,
                                           rollout_is_weights=weights, fn=fn)
        else:
            token, loss, _ = self._policy("is_correction", "vanilla", lp, old, adv, inputs["loss_mask"],
                                          clip_low=low, clip_high=high, clip_c=None, loss_agg=loss_agg,
                                          rollout_is_weights=weights)
        outputs: dict[str, Any] = {"weights": weights, "loss": loss}
        if token is not None:
            outputs["pg_loss"] = token
        return BoundaryResult(outputs, function=self._ref(wfn))
