"""slime adapter: calls THUDM/slime's real loss-path functions at canonical boundaries.

Where the code lives in slime (paths relative to a checkout):
- ``slime/utils/ppo_utils.py``: compute_approx_kl, compute_opsm_mask, compute_gspo_kl,
  compute_policy_loss, compute_cispo_loss, get_grpo_returns, get_reinforce_plus_plus_*,
  get_advantages_and_returns_batch (GAE via chunked_gae / vanilla_gae).
- ``slime/backends/megatron_utils/loss.py``: compute_advantages_and_returns (the estimator
  switch that fills ``rollout_data``), vanilla_tis_function, icepop_function, and the loss
  entry loss_function -> policy_loss_function (on logits built from the log-probs).
- ``slime/backends/megatron_utils/cp_utils.py``: get_sum_of_sample_mean (slime's loss
  reducer: per-sample mean or per-token sum over ``loss_masks``).
- ``slime/ray/rollout.py``: RolloutManager._post_process_rewards (GRPO / REINFORCE++-baseline
  group reward normalisation, done before compute_advantages_and_returns).

Conventions translated here:
- canonical ``[B, T]`` -> one response tensor per sample (``base.rows``: each row cut to its
  first..last valid token), ``loss_masks`` as int32 (as slime's actor moves them to the GPU),
  ``response_lengths`` = span lengths, ``total_lengths`` = span start + span length;
- one process, context-parallel size 1 (``megatron.core.mpu`` is a functional shim), one
  micro-batch, data-parallel size 1, step_global_batch_size = B, one sample per rollout
  (``rollout_mask_sums`` = each sample's own mask total);
- an ``argparse.Namespace`` ``args`` carrying slime's option names with slime's defaults; a
  read of an option this adapter does not set fails loudly (signature drift).

The package ``slime.backends.megatron_utils`` is entered without running its ``__init__``
(which wires the Ray actor, Megatron model and checkpoint code, or at newer commits the
accelerator and Megatron grad-coalesce patches); the loss-path modules themselves are
imported and executed as they are.

Reduced policy losses come from slime's own loss entry (``_entry_loss``): loss_function ->
policy_loss_function on logits whose log-softmax is the canonical log-probs. Per-token
outputs come from the functions policy_loss_function calls, called directly; every number
comes from a slime function.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import re
import sys
import time
import types
from argparse import Namespace
from pathlib import Path
from typing import Any, Callable

import torch

from ..base import (Adapter, BoundaryResult, FunctionRef, TargetLoadError, Unsupported, parameters, rows,
                   signature_text, unrows, version_facts)

from ..shims import import_with_stubs

PPO_UTILS = "slime.utils.ppo_utils"
CP_UTILS = "slime.backends.megatron_utils.cp_utils"
LOSS = "slime.backends.megatron_utils.loss"
ROLLOUT = "slime.ray.rollout"
BOUNDARY_MODULES = (PPO_UTILS, CP_UTILS, LOSS)
# Packages entered without executing their __init__ (see the module docstring).
BARE_PACKAGES = ("slime.backends.megatron_utils",)

# Third-party modules slime's loss-path modules import at module level but never call on a
# boundary path (type hints, decorators, clients); stubbed only when not installed.
HEAVY_DEPS = frozenset({
    "ray", "sglang", "sglang_router", "wandb", "tensorboard", "tensorboardX", "httpx", "pybase64",
    "transformers", "deep_ep", "torch_memory_saver", "flash_attn", "transformer_engine", "apex",
    "mbridge", "aiohttp", "uvicorn", "fastapi", "requests", "datasets", "omegaconf", "pylatexenc",
    "math_verify", "mooncake", "psutil", "yaml", "tqdm", "safetensors", "accelerate", "pandas", "pyarrow",
})

# Canonical estimator name -> slime --advantage-estimator (slime names pass through).
ESTIMATORS = {
    "gae": "ppo", "ppo": "ppo",
    "grpo": "grpo", "gspo": "gspo", "cispo": "cispo",
    "reinforce_plus_plus": "reinforce_plus_plus",
    "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
}
# Estimators whose rewards slime group-normalises in RolloutManager._post_process_rewards.
GROUP_NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_NORMALISED = ("grpo", "gspo", "cispo")

# slime's argparse defaults (slime/utils/arguments.py) for every option the loss path reads.
ARG_DEFAULTS: dict[str, Any] = dict(
    advantage_estimator="grpo", kl_coef=0.0, kl_loss_type="k1", gamma=1.0, lambd=1.0,
    normalize_advantages=False, use_rollout_logprobs=False, custom_advantage_function_path=None,
    use_opd=False, opd_type=None, opd_kl_coef=0.0, qkv_format="thd",
    eps_clip=0.2, eps_clip_high=None, eps_clip_c=None,
    use_tis=False, tis_clip=2.0, tis_clip_low=0.0, custom_tis_function_path=None, get_mismatch_metrics=False,
    use_opsm=False, opsm_delta=1e-4, calculate_per_token_loss=False, entropy_coef=0.0,
    use_kl_loss=False, kl_loss_coef=0.0, use_unbiased_kl=False, custom_pg_loss_reducer_function_path=None,
    allgather_cp=False, context_parallel_size=1,
    rewards_normalization=True, grpo_std_normalization=True, n_samples_per_prompt=1, rollout_batch_size=1,
    reward_key=None,
    # read by loss_function / policy_loss_function / get_log_probs_and_entropy
    loss_type="policy_loss", custom_loss_function_path=None, recompute_loss_function=False,
    log_probs_chunk_size=-1, rollout_temperature=1.0, rollout_top_p=1.0,
)
LOSS_AGG = ("token-mean", "seq-mean-token-mean")


class _Args(Namespace):
    """slime's ``args``; reading an option nobody set names it (a newer slime reads more)."""

    def __getattr__(self, name: str) -> Any:  # only reached for unset attributes
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"slime read args.{name}, which the RL-Sentinel slime adapter does not set "
            f"(an option this slime version added: extend ARG_DEFAULTS in adapters/slime/adapter.py)")


def slime_args(**overrides: Any) -> _Args:
    return _Args(**{**ARG_DEFAULTS, **overrides})


# --- import shims --------------------------------------------------------------------------

class _MpuShim(types.ModuleType):
    """``megatron.core.mpu`` for one process: no tensor, pipeline, context or data parallelism.

    Group getters answer None, which torch.distributed reads as the default (world) group.
    Anything else fails with a message that names it.
    """

    def __init__(self) -> None:
        super().__init__("megatron.core.mpu", "RL-Sentinel shim: one rank, CP = TP = PP = DP = 1")
        def const(value):
            return lambda *a, **k: value

        one, zero, none, yes = const(1), const(0), const(None), const(True)
        for kind in ("context", "tensor_model", "pipeline_model", "data", "expert_model", "expert_tensor"):
            setattr(self, f"get_{kind}_parallel_world_size", one)
            setattr(self, f"get_{kind}_parallel_rank", zero)
            setattr(self, f"get_{kind}_parallel_group", none)
        self.is_pipeline_last_stage = yes
        self.is_pipeline_first_stage = yes
        self.model_parallel_is_initialized = yes
        self.__sentinel_stub__ = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"megatron.core.mpu.{name} is not provided by RL-Sentinel's one-rank shim")


def _one_rank_cross_entropy(vocab_parallel_logits: torch.Tensor, target: torch.Tensor, tp_group=None) -> torch.Tensor:
    """Megatron's fused_vocab_parallel_cross_entropy with one tensor-parallel rank: the plain
    per-token cross-entropy, shape [s, b] (slime before 2026-06-29 took log-probs from it)."""
    s, b, v = vocab_parallel_logits.shape
    return torch.nn.functional.cross_entropy(vocab_parallel_logits.reshape(s * b, v).float(), target.reshape(-1),
                                             reduction="none").reshape(s, b)


def _install_megatron_shim() -> list[str]:
    """A functional ``megatron.core.mpu`` (CP world size 1) and, for slime before 2026-06-29,
    ``megatron.core.fusions.fused_cross_entropy`` (one-rank cross-entropy); installed even
    when Megatron is: the real ones need initialised process groups and kernels. Nothing
    else is there, so an import of any other Megatron module fails loudly."""
    def package(name: str) -> types.ModuleType:
        m = types.ModuleType(name, "RL-Sentinel shim")
        m.__path__ = []  # a package, so its shimmed submodules import
        return m

    megatron, core, fusions = package("megatron"), package("megatron.core"), package("megatron.core.fusions")
    fused_ce = types.ModuleType("megatron.core.fusions.fused_cross_entropy", "RL-Sentinel shim: one rank")
    fused_ce.fused_vocab_parallel_cross_entropy = _one_rank_cross_entropy
    mpu = _MpuShim()
    core.mpu, megatron.core, core.fusions, fusions.fused_cross_entropy = mpu, core, fusions, fused_ce
    mods = {m.__name__: m for m in (megatron, core, mpu, fusions, fused_ce)}
    for m in mods.values():
        m.__sentinel_stub__ = True
    sys.modules.update(mods)
    return list(mods)


def _bare_package(name: str, root: Path) -> None:
    """Register package `name` from `root` without executing its ``__init__``."""
    if name in sys.modules:
        return
    path = root.joinpath(*name.split("."))
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(path)]
    mod = importlib.util.module_from_spec(spec)
    mod.__path__ = [str(path)]
    mod.__file__ = None
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(importlib.import_module(parent), child, mod)


# --- small helpers -------------------------------------------------------------------------

def _span_starts(mask: torch.Tensor) -> list[int]:
    out = []
    for m in mask:
        idx = m.nonzero(as_tuple=True)[0]
        out.append(int(idx[0]) if len(idx) else 0)
    return out


def _scatter_back(parts: list[torch.Tensor], original: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The canonical tensor with each row's span replaced by the state of what slime got."""
    out = original.detach().clone()
    for b, (p, s) in enumerate(zip(parts, _span_starts(mask))):
        out[b, s: s + p.numel()] = p.detach().reshape(-1).to(out.dtype)
    return out


def _logits_for(lp: torch.Tensor) -> torch.Tensor:
    """``[n, 2]`` float32 logits whose log-softmax at token 0 is exactly ``lp`` (token 1 takes
    the rest of the mass), so slime's own log-prob and entropy code runs on them.

    Gradient: d log_softmax / d logit = 1 - p, so the target logit is a straight-through
    ``d + (lp - d) / (1 - p)``: its value is ``d`` and the log-prob's gradient reaches ``lp``
    unscaled. Where p == 1 in float32 (lp == 0) softmax saturates and nothing flows; the
    caller supplies those tokens' gradient (`_GradAt`). Non-finite log-probs pass as they are."""
    d = lp.detach()
    p = d.exp()
    scale = torch.where(p < 1, 1 / (1 - p).clamp_min(1e-30), torch.zeros_like(p))
    target = torch.where(torch.isfinite(d), d + (lp - d) * scale, d)
    rest = torch.where(d < 0, torch.log(-torch.expm1(d.clamp_max(-1e-30))), torch.full_like(d, -1e4))
    return torch.stack([target, rest.clamp_min(-1e4)], dim=-1).float()


class _GradAt(torch.autograd.Function):
    """Adds 0 to the loss and ``g`` to the gradient of ``x``: the gradient at tokens where the
    logits route saturates, taken from slime's own per-token functions."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:  # noqa: D401
        ctx.save_for_backward(g)
        return x.new_zeros(())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (g,) = ctx.saved_tensors
        return grad * g, None


class SlimeAdapter(Adapter):
    """THUDM/slime from a checkout (``--repo``) or an installed package."""

    name = "slime"
    description = ("THUDM/slime: ppo_utils / megatron_utils.loss / cp_utils called on one process "
                   "(context parallel size 1) with per-sample response tensors.")

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        super().__init__(root, device, options)
        self.mods: dict[str, types.ModuleType] = {}
        self.rollout_error: str | None = None
        self.facts: dict[str, Any] = {}

    # --- loading ------------------------------------------------------------------------
    def _locate(self) -> Path:
        if self.root is None:
            spec = importlib.util.find_spec("slime")
            if spec is None or not spec.submodule_search_locations:
                raise TargetLoadError("slime target: no --repo given and no installed `slime` package found")
            root = Path(list(spec.submodule_search_locations)[0]).resolve().parent
        else:
            root = Path(self.root).expanduser().resolve()
        if not (root / "slime" / "utils" / "ppo_utils.py").is_file():
            raise TargetLoadError(
                f"slime target: {root} is not a slime checkout (module slime.utils.ppo_utils, "
                f"file slime/utils/ppo_utils.py, is missing)")
        loaded = sys.modules.get("slime")
        if loaded is not None:
            where = Path(list(getattr(loaded, "__path__", [""]))[0] or ".").resolve()
            if where != root / "slime":
                raise TargetLoadError(f"slime target: another slime is already imported from {where}; "
                                      f"one interpreter can hold one slime version")
        return root

    def _version(self, root: Path) -> dict[str, Any]:
        setup = root / "setup.py"
        m = re.search(r"""version\s*=\s*["']([^"']+)["']""", setup.read_text(errors="replace")) if setup.is_file() else None
        return version_facts(root, m.group(1) if m else None)

    def _import(self, name: str) -> types.ModuleType:
        return import_with_stubs(name, target="slime", own="slime", stubs=self.stubs,
                                 allowed=HEAVY_DEPS | set(self.options.get("extra_stubs") or ()))

    def load(self) -> dict[str, Any]:
        root = self._locate()
        compile_ = bool(self.options.get("compile"))
        if not compile_:
            # slime decorates compute_approx_kl / compute_policy_loss / compute_cispo_loss with
            # torch.compile: ~20 s per function on CPU. Eager gives the same math.
            os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
        t0 = time.perf_counter()  # torch._dynamo counts: slime's @torch.compile imports it (~1 s) even when eager
        import torch._dynamo

        torch._dynamo.config.disable = not compile_
        if str(root) in sys.path:
            sys.path.remove(str(root))
        sys.path.insert(0, str(root))
        self.root = root

        self.stubs = _install_megatron_shim()
        importlib.import_module("slime")
        for pkg in BARE_PACKAGES:
            parent = pkg.rpartition(".")[0]
            if parent:
                self._import(parent)
            _bare_package(pkg, root)
        for name in BOUNDARY_MODULES:
            self.mods[name] = self._import(name)
        boundary_s = time.perf_counter() - t0
        if self.options.get("rollout_module", True):
            try:
                self.mods[ROLLOUT] = self._import(ROLLOUT)
            except Exception as e:  # noqa: BLE001 - optional: only reward normalisation needs it
                self.rollout_error = f"{type(e).__name__}: {e}"
        self.facts = {
            **self._version(root),
            "module_files": [str(Path(m.__file__).resolve().relative_to(root)) for m in self.mods.values()],
            "stubs": list(self.stubs),
            "bare_packages": list(BARE_PACKAGES),
            "boundary_import_s": round(boundary_s, 4),
            "eager": not compile_,
        }
        if self.rollout_error:
            self.facts["rollout_module_error"] = self.rollout_error
        return dict(self.facts)

    # --- lookups ------------------------------------------------------------------------
    def _fn(self, name: str, *modules: str, boundary: str) -> Callable:
        for mod in modules or (PPO_UTILS, LOSS, CP_UTILS):
            fn = getattr(self.mods.get(mod), name, None)
            if callable(fn):
                return fn
        where = " or ".join(m.replace(".", "/") + ".py" for m in (modules or (PPO_UTILS, LOSS, CP_UTILS)))
        raise Unsupported(f"slime has no {name} in {where} at {self.facts.get('version', 'this commit')} "
                          f"(needed by boundary {boundary!r})")

    def _ref(self, fn: Callable) -> FunctionRef:
        return FunctionRef.of(fn, self.root)

    def _kwargs(self, fn: Callable, boundary: str, required: dict[str, Any], optional: dict[str, Any] | None = None,
                aliases: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
        """Bind by keyword against the target's signature; a required name it lacks is drift."""
        params = parameters(fn)
        has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        out = {}
        for key, value in required.items():
            names = (key, *((aliases or {}).get(key, ())))
            hit = next((n for n in names if n in params), None)
            if hit is None:
                raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r} (boundary {boundary!r})")
            out[hit] = value
        for key, value in (optional or {}).items():
            if key in params or has_var_kw:
                out[key] = value
            elif value is not None:
                raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r}, so {key}={value!r} "
                                  f"cannot be applied (boundary {boundary!r})")
        for name, p in params.items():
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in out:
                raise Unsupported(f"signature drift: {signature_text(fn)} requires {name!r}, which the adapter cannot "
                                  f"supply (boundary {boundary!r})")
        return out

    # --- canonical <-> slime ------------------------------------------------------------
    def _tok(self, inputs: dict[str, torch.Tensor], name: str, mask: torch.Tensor) -> list[torch.Tensor]:
        """Per-sample response tensors (clones of the spans, so autograd reaches the input)."""
        return [r.clone() for r in rows(inputs[name].to(self.device), mask)]

    def _masks(self, mask: torch.Tensor) -> list[torch.Tensor]:
        return [r.to(torch.int32) for r in rows(mask, mask)]

    @staticmethod
    def _lengths(mask: torch.Tensor, parts: list[torch.Tensor]) -> tuple[list[int], list[int]]:
        response = [int(p.numel()) for p in parts]
        return response, [s + n for s, n in zip(_span_starts(mask), response)]

    @staticmethod
    def _back(cat: torch.Tensor, lengths: list[int], mask: torch.Tensor) -> torch.Tensor:
        return unrows(list(cat.split(lengths, dim=0)), mask)

    def _after(self, inputs: dict[str, torch.Tensor], given: dict[str, list[torch.Tensor]],
               mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {k: _scatter_back(v, inputs[k], mask) for k, v in given.items()}

    def _reduce(self, boundary: str, x: torch.Tensor, masks: list[torch.Tensor], lengths: list[int],
                totals: list[int], mode: str, reducer_masks: list[torch.Tensor] | None = None) -> torch.Tensor:
        """slime's loss reduction for one micro-batch on one rank.

        get_sum_of_sample_mean gives a sum over samples of a per-sample mean (or, with
        calculate_per_token_loss, a token sum); loss_function then divides by the step's
        sample count (one micro-batch, DP = 1) or Megatron divides by num_tokens =
        sum_i max(loss_mask_i.sum(), 1). `reducer_masks` are the masks a TIS / rejection
        function returned; denominators stay the original ones (policy_loss_function)."""
        if mode not in LOSS_AGG:
            raise Unsupported(f"slime has no loss aggregation {mode!r} (it offers per-sample mean "
                              f"[seq-mean-token-mean] and --calculate-per-token-loss [token-mean])")
        fn = self._fn("get_sum_of_sample_mean", CP_UTILS, boundary=boundary)
        per_token = mode == "token-mean"
        use = reducer_masks if reducer_masks is not None else masks
        kw = self._kwargs(fn, boundary, {"total_lengths": totals, "response_lengths": lengths, "loss_masks": use,
                                         "calculate_per_token_loss": per_token})
        if reducer_masks is not None and "sample_denoms" in parameters(fn):
            kw["sample_denoms"] = [m.sum() for m in masks]
        total = fn(**kw)(x)
        if not isinstance(total, torch.Tensor):  # sum([]) of an empty batch
            total = torch.as_tensor(float(total), device=self.device)
        if per_token:
            num_tokens = sum(torch.clamp_min(m.sum(), 1) for m in masks)
            return total / num_tokens
        return total / max(len(masks), 1)

    def _entry_loss(self, boundary: str, config: dict[str, Any], flat: torch.Tensor, lengths: list[int],
                    totals: list[int], old: list[torch.Tensor], adv: list[torch.Tensor], masks: list[torch.Tensor],
                    pg_loss: torch.Tensor, reducer_masks: list[torch.Tensor] | None = None,
                    batch_extra: dict[str, Any] | None = None,
                    **options: Any) -> tuple[torch.Tensor, tuple[FunctionRef, ...]]:
        """The loss slime trains on: ``loss_function`` -> ``policy_loss_function`` on one packed
        micro-batch (a one-token prompt per sample, logits from `_logits_for`), divided by the
        normaliser it hands Megatron. The same loss composed from the per-token `pg_loss`
        (`_reduce`) lends its gradient to tokens with log-prob 0 (see `_logits_for`), never
        its value. `flat`: the concatenated log-probs `pg_loss` was computed from;
        `batch_extra`: more ``batch`` keys (``rollout_log_probs`` for TIS); `options`: slime ``args``."""
        mode = config.get("loss_agg", "token-mean")
        composed = self._reduce(boundary, pg_loss, masks, lengths, totals, mode, reducer_masks)
        entry = self._fn("loss_function", LOSS, boundary=boundary)
        pieces, tokens = [], []
        for part in flat.split(lengths):
            pieces += [_logits_for(part), torch.zeros(1, 2, device=self.device)]  # last token predicts nothing
            tokens.append(torch.zeros(part.numel() + 1, dtype=torch.long, device=self.device))
        logits = torch.cat(pieces)[None] if pieces else torch.zeros(1, 0, 2, device=self.device)
        batch = {"advantages": adv, "log_probs": list(old), "unconcat_tokens": tokens,
                 "total_lengths": [t.numel() for t in tokens], "response_lengths": list(lengths),
                 "loss_masks": masks, **(batch_extra or {})}
        # one sample per rollout: each sample's reducer denominator is its own mask total
        # (named group_mask_sums for a few days of 2026-06, then rollout_mask_sums again)
        sums = torch.stack([m.sum() for m in masks]).float() if masks else torch.zeros(0, device=self.device)
        batch.update(rollout_mask_sums=sums, group_mask_sums=sums)
        n = max(len(lengths), 1)
        # the step's sample count: an argument since 2026, args.global_batch_size before
        args = slime_args(calculate_per_token_loss=mode == "token-mean", global_batch_size=n, **options)
        required = {"args": args, "batch": batch, "num_microbatches": 1, "logits": logits}
        if "step_global_batch_size" in parameters(entry):
            required["step_global_batch_size"] = n
        kw = self._kwargs(entry, boundary, required)
        self._ensure_process_group()  # before 2026-06-29 slime's entropy all-reduces unconditionally
        loss, normaliser = entry(**kw)[:2]
        loss = loss / normaliser
        saturated = (flat.detach().exp() >= 1) & torch.isfinite(flat.detach())
        if flat.requires_grad and composed.requires_grad and bool(saturated.any()):
            (g,) = torch.autograd.grad(composed, flat, retain_graph=True, allow_unused=True)
            if g is not None:
                loss = loss + _GradAt.apply(flat, torch.where(saturated, g, torch.zeros_like(g)))
        return loss, (self._ref(entry), self._ref(self._fn("policy_loss_function", LOSS, boundary=boundary)))

    def _policy_loss_fn(self, boundary: str):
        return self._fn("compute_policy_loss", PPO_UTILS, boundary=boundary)

    @staticmethod
    def _clip(config: dict[str, Any], eps_clip_high: float | None = None) -> dict[str, Any]:
        """slime's clip args from a scenario config; eps_clip_high None means eps_clip (validate_args)."""
        eps_clip = config.get("eps_clip", 0.2)
        high = config.get("eps_clip_high", eps_clip_high)
        return {"eps_clip": eps_clip, "eps_clip_high": eps_clip if high is None else high,
                "eps_clip_c": config.get("eps_clip_c")}

    def _loss_result(self, fn: Callable, entry: tuple[FunctionRef, ...], inputs: dict[str, torch.Tensor],
                     mask: torch.Tensor, lengths: list[int], per_token: dict[str, torch.Tensor],
                     scalars: dict[str, Any], given: dict[str, list[torch.Tensor]]) -> BoundaryResult:
        """A loss boundary's result: per-token outputs back in [B, T], the state of what slime
        got, and the functions called (`fn`, then the loss entry)."""
        return BoundaryResult({**{k: self._back(v, lengths, mask) for k, v in per_token.items()}, **scalars},
                              self._after(inputs, given, mask), self._ref(fn).with_also(*entry))

    def _ppo_token_loss(self, boundary: str, lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor,
                        eps_clip: float, eps_clip_high: float | None, eps_clip_c: float | None,
                        ppo_kl: torch.Tensor | None = None):
        """compute_policy_loss on concatenated tokens (ppo_kl = old - new, as policy_loss_function;
        or the given `ppo_kl`, GSPO's sequence KL)."""
        fn = self._policy_loss_fn(boundary)
        params = parameters(fn)
        eps_high = eps_clip if eps_clip_high is None else eps_clip_high  # slime's validate_args rule
        if "ppo_kl" in params:
            kw = self._kwargs(fn, boundary, {"ppo_kl": old - lp if ppo_kl is None else ppo_kl, "advantages": adv,
                                             "eps_clip": eps_clip, "eps_clip_high": eps_high}, {"eps_clip_c": eps_clip_c})
        elif ppo_kl is not None:
            raise Unsupported(f"importance_sampling_level sequence: {signature_text(fn)} takes no ppo_kl "
                              f"(slime added GSPO in 2025-07, c7bb60ce4)")
        else:  # before GSPO support (2025-07): compute_policy_loss(log_probs, old_logprobs, ...)
            kw = self._kwargs(fn, boundary, {"log_probs": lp, "old_logprobs": old, "advantages": adv,
                                             "eps_clip": eps_clip, "eps_clip_high": eps_high},
                              {"eps_clip_c": eps_clip_c}, aliases={"old_logprobs": ("old_log_probs",)})
        out = fn(**kw)
        return out[0], out[1], fn

    # --- boundaries ---------------------------------------------------------------------
    def b_opsm_mask(self, inputs, config):
        """compute_opsm_mask + compute_policy_loss, composed as policy_loss_function does
        (pg_loss * opsm_mask, reduced over valid tokens); mirrors the PR #1917 seed script."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_opsm_mask", PPO_UTILS, boundary="opsm_mask")
        lp, old, adv = (self._tok(inputs, k, mask) for k in ("log_probs", "old_log_probs", "advantages"))
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        flat = torch.cat(lp)
        clip = self._clip(config)
        pg_loss, _clipfrac, _ = self._ppo_token_loss("opsm_mask", flat, torch.cat(old), torch.cat(adv), **clip)
        args = slime_args(use_opsm=True, opsm_delta=config.get("opsm_delta", 0.1))
        kw = self._kwargs(fn, "opsm_mask", {"args": args, "full_log_probs": lp, "full_old_log_probs": old,
                                            "advantages": adv, "loss_masks": masks})
        opsm_mask, opsm_clipfrac = fn(**kw)
        masked = pg_loss * opsm_mask
        reduced, entry = self._entry_loss("opsm_mask", config, flat, lengths, totals, old, adv, masks, masked,
                                          use_opsm=True, opsm_delta=args.opsm_delta, **clip)
        return self._loss_result(fn, entry, inputs, mask, lengths, {"opsm_mask": opsm_mask, "pg_loss": masked},
                                 {"opsm_clipfrac": opsm_clipfrac, "reduced_policy_loss": reduced},
                                 {"log_probs": lp, "old_log_probs": old, "advantages": adv})

    def b_policy_loss(self, inputs, config):
        """compute_policy_loss (asymmetric + dual clip) reduced by get_sum_of_sample_mean; with
        importance_sampling_level sequence, on compute_gspo_kl's sequence KL (slime's gspo
        estimator, as policy_loss_function does it)."""
        if config.get("use_decoupled_loss") or config.get("rejection_sampling") is not None:
            raise Unsupported("slime has no decoupled PPO loss; its behaviour-policy correction is a TIS hook "
                              "(boundary is_correction)")
        level = config.get("importance_sampling_level") or "token"
        if level not in ("token", "sequence"):
            raise Unsupported(f"importance_sampling_level {level!r}: slime has token and sequence (gspo)")
        mask = inputs["loss_mask"].to(self.device)
        lp, old, adv = (self._tok(inputs, k, mask) for k in ("log_probs", "old_log_probs", "advantages"))
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        flat = torch.cat(lp)
        clip = self._clip(config)
        ppo_kl, estimator = None, {}
        if level == "sequence":
            gspo = self._fn("compute_gspo_kl", PPO_UTILS, boundary="policy_loss")
            ppo_kl = gspo(**self._kwargs(gspo, "policy_loss", {"full_log_probs": lp, "full_old_log_probs": old,
                                                                "local_log_probs": lp, "loss_masks": masks}))
            estimator = {"advantage_estimator": "gspo"}
        pg_loss, clipfrac, fn = self._ppo_token_loss("policy_loss", flat, torch.cat(old), torch.cat(adv), **clip,
                                                     ppo_kl=ppo_kl)
        loss, entry = self._entry_loss("policy_loss", config, flat, lengths, totals, old, adv, masks, pg_loss,
                                       **clip, **estimator)
        return self._loss_result(fn, entry, inputs, mask, lengths, {"pg_loss": pg_loss, "clipfrac": clipfrac},
                                 {"loss": loss}, {"log_probs": lp, "old_log_probs": old, "advantages": adv})

    def b_cispo_loss(self, inputs, config):
        """compute_cispo_loss (MiniMax-M1) reduced by get_sum_of_sample_mean."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_cispo_loss", PPO_UTILS, boundary="cispo_loss")
        lp, old, adv = (self._tok(inputs, k, mask) for k in ("log_probs", "old_log_probs", "advantages"))
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        lp_c, old_c = torch.cat(lp), torch.cat(old)
        eps_clip, eps_high = config.get("eps_clip", 1.0), config.get("eps_clip_high", 0.28)
        kw = self._kwargs(fn, "cispo_loss", {"ppo_kl": old_c - lp_c, "log_probs": lp_c, "advantages": torch.cat(adv),
                                             "eps_clip": eps_clip, "eps_clip_high": eps_high})
        pg_loss, clipfrac = fn(**kw)[:2]
        loss, entry = self._entry_loss("cispo_loss", config, lp_c, lengths, totals, old, adv, masks, pg_loss,
                                       advantage_estimator="cispo", eps_clip=eps_clip, eps_clip_high=eps_high)
        return self._loss_result(fn, entry, inputs, mask, lengths, {"pg_loss": pg_loss, "clipfrac": clipfrac},
                                 {"loss": loss}, {"log_probs": lp, "old_log_probs": old, "advantages": adv})

    def b_gspo_kl(self, inputs, config):
        """compute_gspo_kl: per-sample valid-token mean of old - new, expanded to every token."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_gspo_kl", PPO_UTILS, boundary="gspo_kl")
        lp, old = self._tok(inputs, "log_probs", mask), self._tok(inputs, "old_log_probs", mask)
        lengths, _ = self._lengths(mask, lp)
        kw = self._kwargs(fn, "gspo_kl", {"full_log_probs": lp, "full_old_log_probs": old,
                                          "local_log_probs": lp, "loss_masks": self._masks(mask)})
        seq_kl = fn(**kw)
        return BoundaryResult({"seq_kl": self._back(seq_kl, lengths, mask)},
                              self._after(inputs, {"log_probs": lp, "old_log_probs": old}, mask), self._ref(fn))

    def b_kl(self, inputs, config):
        """compute_approx_kl(log_probs, log_probs_base=ref, kl_loss_type) per sample, as
        compute_advantages_and_returns calls it."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_approx_kl", PPO_UTILS, boundary="kl")
        lp, ref = self._tok(inputs, "log_probs", mask), self._tok(inputs, "ref_log_probs", mask)
        kl_type = self._kl_name(config.get("kl_type", "k1"), fn)
        kl = []
        for a, b in zip(lp, ref):
            kw = self._kwargs(fn, "kl", {"log_probs": a, "log_probs_base": b, "kl_loss_type": kl_type},
                              aliases={"log_probs_base": ("ref_log_probs",), "kl_loss_type": ("kl_type",)})
            kl.append(fn(**kw))
        return BoundaryResult({"kl": unrows(kl, mask) if kl else torch.zeros_like(mask, dtype=torch.float32)},
                              self._after(inputs, {"log_probs": lp, "ref_log_probs": ref}, mask), self._ref(fn))

    @staticmethod
    def _kl_name(kl_type: str, fn: Callable) -> str:
        """Canonical KL estimator name -> the one this slime's compute_approx_kl accepts
        (slime called k1 "kl" until 2025-07)."""
        try:
            src = inspect.getsource(inspect.unwrap(fn))
        except (OSError, TypeError):
            return kl_type
        names = set(re.findall(r"""["']([a-z0-9_]+)["']""", src))
        if kl_type not in names and kl_type == "k1" and "kl" in names:
            return "kl"
        return kl_type

    def b_loss_agg(self, inputs, config):
        """get_sum_of_sample_mean, scaled as loss_function / Megatron do for one micro-batch."""
        mask = inputs["loss_mask"].to(self.device)
        vals = self._tok(inputs, "values", mask)
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, vals)
        x = torch.cat(vals) if vals else torch.zeros(0, device=self.device)
        loss = self._reduce("loss_agg", x, masks, lengths, totals, config.get("mode", "token-mean"))
        fn = self._fn("get_sum_of_sample_mean", CP_UTILS, boundary="loss_agg")
        return BoundaryResult({"loss": loss}, self._after(inputs, {"values": vals}, mask), self._ref(fn))

    def b_gae(self, inputs, config):
        """get_advantages_and_returns_batch (chunked_gae, or vanilla_gae with options/config
        gae_impl=vanilla) over right-padded response tensors; older slime: get_advantages_and_returns."""
        mask = inputs["loss_mask"].to(self.device)
        rew, val = self._tok(inputs, "token_rewards", mask), self._tok(inputs, "values", mask)
        lengths, totals = self._lengths(mask, rew)
        gamma, lam = config.get("gamma", 1.0), config.get("lam", 1.0)
        impl = config.get("gae_impl", self.options.get("gae_impl", "chunked"))
        fn = getattr(self.mods[PPO_UTILS], "get_advantages_and_returns_batch", None)
        if fn is not None:
            chunked = {"chunked": impl == "chunked"} if "chunked" in parameters(fn) else {}
            if impl != "chunked" and not chunked:
                raise Unsupported(f"{signature_text(fn)} has no switch to vanilla GAE")
            kw = self._kwargs(fn, "gae", {"total_lengths": totals, "response_lengths": lengths, "values_list": val,
                                          "rewards_list": rew, "gamma": gamma, "lambd": lam, **chunked})
            adv, ret = fn(**kw)
        else:  # older slime: one sample at a time
            fn = self._fn("get_advantages_and_returns", PPO_UTILS, boundary="gae")
            adv, ret = [], []
            for t, n, v, r in zip(totals, lengths, val, rew):
                a, g = fn(**self._kwargs(fn, "gae", {"total_len": t, "response_len": n, "values": v, "rewards": r,
                                                     "gamma": gamma, "lambd": lam}))
                adv.append(a)
                ret.append(g)
        return BoundaryResult({"advantages": unrows(list(adv), mask), "returns": unrows(list(ret), mask)},
                              self._after(inputs, {"token_rewards": rew, "values": val}, mask), self._ref(fn))

    # --- rewards / advantages -----------------------------------------------------------
    def _groups(self, n_rows: int, group: torch.Tensor | None, group_size: int | None) -> tuple[list[int], int, int]:
        """Canonical groups -> (row order that makes groups consecutive, n_samples_per_prompt,
        rollout_batch_size).

        slime keeps a prompt's samples consecutive and reshapes the rewards to
        [rollout_batch_size, n_samples_per_prompt]; when the batch does not hold exactly
        n * rollout_batch_size samples it normalises over the whole batch instead. Rows are
        reordered group by group (by first appearance), and groups of unequal size map to
        n = the largest group (the others lost samples), which reaches that fallback."""
        if group is None:
            if group_size:
                return list(range(n_rows)), int(group_size), -(-n_rows // int(group_size))
            return list(range(n_rows)), n_rows, 1
        ids = [int(g) for g in group.reshape(-1).tolist()]
        members: dict[int, list[int]] = {}
        for i, g in enumerate(ids):
            members.setdefault(g, []).append(i)
        order = [i for rows_ in members.values() for i in rows_]
        return order, max(len(v) for v in members.values()), len(members)

    def _rollout_manager(self, boundary: str):
        mod = self.mods.get(ROLLOUT)
        if mod is None:
            raise Unsupported(f"{boundary}: slime's reward post-processing lives in slime/ray/rollout.py, which "
                              f"did not import ({self.rollout_error or 'rollout_module disabled'})")
        cls = getattr(mod, "RolloutManager", None)
        meta = getattr(cls, "__ray_metadata__", None)  # a real `ray.remote` wraps the class
        if meta is not None and hasattr(meta, "modified_class"):
            cls = meta.modified_class
        fn = getattr(cls, "_post_process_rewards", None)
        if fn is None:
            raise Unsupported(f"{boundary}: slime has no RolloutManager._post_process_rewards at this commit")
        return fn

    def _post_process_rewards(self, boundary: str, rewards: list[float], estimator: str,
                              group: torch.Tensor | None, group_size: int | None):
        """RolloutManager._post_process_rewards on Samples carrying only their reward, with the
        rows in slime's group-consecutive order (and put back in canonical order after)."""
        fn = self._rollout_manager(boundary)
        order, n, batches = self._groups(len(rewards), group, group_size)
        types_mod = self._import("slime.utils.types")
        args = slime_args(advantage_estimator=estimator, n_samples_per_prompt=n, rollout_batch_size=batches,
                          # slime's validate_args: one sample per prompt turns std normalisation off
                          grpo_std_normalization=n > 1)
        try:
            samples = [types_mod.Sample(reward=float(rewards[i])) for i in order]
        except Exception as e:  # noqa: BLE001
            raise Unsupported(f"{boundary}: cannot build slime Samples at this commit: {e}") from e
        manager = types.SimpleNamespace(args=args, custom_reward_post_process_func=None)
        _raw, out = fn(manager, samples)
        back = [0.0] * len(rewards)
        for pos, i in enumerate(order):
            back[i] = float(out[pos])
        return back, fn

    def b_reward_norm(self, inputs, config):
        """RolloutManager._post_process_rewards: group mean (and std for GRPO) over consecutive
        groups of n_samples_per_prompt; eps fixed at 1e-6; every sample enters the statistics."""
        r = inputs["rewards"].to(self.device)
        if "mask" in inputs and not bool(inputs["mask"].bool().all()):
            raise Unsupported("slime's reward post-processing has no row mask: every sample enters the statistics")
        mean_level, std_level = config.get("mean_level", "batch"), config.get("std_level", "batch")
        if mean_level is None:
            raise Unsupported("slime always subtracts the mean when it normalises rewards")
        if std_level not in (None, mean_level):
            raise Unsupported(f"slime divides by the std of the same group it centres on (got mean over "
                              f"{mean_level}, std over {std_level})")
        eps = config.get("eps")
        if std_level is not None and eps is not None and abs(float(eps) - 1e-6) > 1e-12:
            raise Unsupported(f"slime hard-codes eps 1e-6 in its reward std normalisation (got eps={eps})")
        estimator = "grpo" if std_level else "reinforce_plus_plus_baseline"
        if mean_level == "batch":
            group, group_size = None, None
        else:
            group, group_size = inputs.get("group"), config.get("group_size")
        out, fn = self._post_process_rewards("reward_norm", r.tolist(), estimator, group, group_size)
        rewards = torch.tensor(out, dtype=r.dtype, device=self.device)
        return BoundaryResult({"rewards": rewards}, function=self._ref(fn))

    def _advantages_fn(self):
        return self._fn("compute_advantages_and_returns", LOSS, boundary="advantages")

    def b_advantages(self, inputs, config):
        """compute_advantages_and_returns(args, rollout_data), after slime's group reward
        normalisation for GRPO-family / REINFORCE++-baseline estimators. logged_kl is
        rollout_data["kl"] after the call: what log_rollout_data reports as rollout/kl."""
        for key, why in (("reward_norm", "slime's only reward normalisation is the estimator's built-in group "
                                         "normalisation (RolloutManager._post_process_rewards); no configurable "
                                         "reward_norm"),
                         ("mask_no_eos_with_zero", "slime has no option to zero the reward of a no-EOS sample"),
                         ("reward_clip", "slime's advantage path does not clip rewards")):
            if config.get(key):
                raise Unsupported(f"{key}: {why}")
        canon = config.get("estimator", "gae")
        if canon not in ESTIMATORS:
            raise Unsupported(f"slime has no estimator {canon!r} (known: {', '.join(sorted(ESTIMATORS))})")
        estimator = ESTIMATORS[canon]
        fn = self._advantages_fn()
        try:
            src = inspect.getsource(inspect.unwrap(fn))
        except (OSError, TypeError):
            src = ""
        if src and f'"{estimator}"' not in src and f"'{estimator}'" not in src:
            raise Unsupported(f"compute_advantages_and_returns has no {estimator!r} estimator at this commit")

        mask = inputs["loss_mask"].to(self.device)
        masks = self._masks(mask)
        given: dict[str, list[torch.Tensor]] = {}
        for k in ("log_probs", "ref_log_probs", "values"):
            if k in inputs:
                given[k] = self._tok(inputs, k, mask)
        zeros = [torch.zeros(int(m.numel()), dtype=torch.float32, device=self.device) for m in masks]
        # slime always has log-probs; without them (and a reference) the KL is exactly 0.
        log_probs = given.get("log_probs") or [z.clone() for z in zeros]
        ref = given.get("ref_log_probs") or [x.detach().clone() for x in log_probs]
        lengths, totals = self._lengths(mask, zeros)
        if estimator == "ppo" and "values" not in given:
            raise ValueError("slime's ppo (gae) estimator needs `values`")

        rewards = [float(x) for x in inputs["rewards"].reshape(-1).tolist()]
        if estimator in GROUP_NORMALISED:
            rewards, _ = self._post_process_rewards("advantages", rewards, estimator, inputs.get("group"),
                                                    config.get("group_size"))

        rollout_data: dict[str, Any] = {
            "log_probs": log_probs, "ref_log_probs": ref, "rewards": rewards,
            "values": given.get("values"), "response_lengths": lengths, "total_lengths": totals,
            "loss_masks": masks,
        }
        args = slime_args(advantage_estimator=estimator, kl_coef=float(config.get("kl_coef", 0.0)),
                          kl_loss_type=self._kl_name(config.get("kl_type", "k1"),
                                                     self._fn("compute_approx_kl", PPO_UTILS, boundary="advantages")),
                          gamma=float(config.get("gamma", 1.0)),
                          lambd=float(config.get("lam", 1.0)),
                          normalize_advantages=bool(config.get("normalize_advantages", False)))
        if args.normalize_advantages:
            self._ensure_process_group()

        # Spy (call-through) on the GAE entry to record the PPO token rewards it receives.
        token_rewards: list[torch.Tensor] = []
        loss_mod = self.mods[LOSS]
        spied = getattr(loss_mod, "get_advantages_and_returns_batch", None)
        if spied is not None:
            def spy(*a, **k):
                rl = k.get("rewards_list", a[3] if len(a) > 3 else None)
                if rl is not None:
                    token_rewards.extend(t.detach().clone() for t in rl)
                return spied(*a, **k)
            loss_mod.get_advantages_and_returns_batch = spy
        try:
            fn(args, rollout_data)
        except NotImplementedError as e:
            raise Unsupported(f"compute_advantages_and_returns: {e}") from e
        finally:
            if spied is not None:
                loss_mod.get_advantages_and_returns_batch = spied

        out = {"advantages": unrows(list(rollout_data["advantages"]), mask),
               "returns": unrows(list(rollout_data["returns"]), mask)}
        if "kl" in rollout_data:  # stored for logging since 2026-04 (slime PR #1856)
            out["logged_kl"] = unrows(list(rollout_data["kl"]), mask)
        if token_rewards:
            out["token_rewards"] = unrows(token_rewards, mask)
        return BoundaryResult(out, self._after(inputs, given, mask), self._ref(fn))

    def _ensure_process_group(self) -> None:
        """distributed_masked_whiten all-reduces unconditionally: give it a one-rank gloo group
        (created lazily, in the forked job process on CPU)."""
        import torch.distributed as dist

        if not dist.is_available():
            raise Unsupported("normalize_advantages needs torch.distributed, which this torch lacks")
        if not dist.is_initialized():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    # --- importance-sampling correction -------------------------------------------------
    IS_METHODS = {"vanilla_tis": "vanilla_tis_function", "icepop": "icepop_function",
                  "off_policy_is": "off_policy_is_function"}

    def b_is_correction(self, inputs, config):
        """A TIS hook (vanilla_tis_function / icepop_function / off_policy_is_function) on the
        PPO token loss, as policy_loss_function calls it; weights = the hook applied to a
        loss of ones; loss reduced with the masks the hook returns over the original
        denominators."""
        method = config.get("method", "off_policy_is")
        if method not in self.IS_METHODS:
            raise Unsupported(f"slime has no is_correction method {method!r} (known: {', '.join(self.IS_METHODS)})")
        fname = self.IS_METHODS[method]
        try:
            fn = self._fn(fname, LOSS, PPO_UTILS, boundary="is_correction")
        except Unsupported:
            if method == "off_policy_is":
                raise Unsupported("slime has no off_policy_is_function at this commit "
                                  "(proposed in https://github.com/THUDM/slime/pull/2084, not merged)") from None
            raise
        mask = inputs["loss_mask"].to(self.device)
        lp, old, roll, adv = (self._tok(inputs, k, mask)
                              for k in ("log_probs", "old_log_probs", "rollout_log_probs", "advantages"))
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        clip = self._clip(config, eps_clip_high=0.2)
        flat = torch.cat(lp)
        pg_loss, _, _ = self._ppo_token_loss("is_correction", flat, torch.cat(old), torch.cat(adv), **clip)
        tis = {"use_tis": True, "tis_clip": config.get("tis_clip", 2.0), "tis_clip_low": config.get("tis_clip_low", 0.0),
               # policy_loss_function calls vanilla_tis_function unless given another hook's path
               "custom_tis_function_path": None if fname == "vanilla_tis_function" else f"{fn.__module__}.{fn.__name__}"}
        args = slime_args(**tis, eps_clip=clip["eps_clip"], eps_clip_high=clip["eps_clip_high"])
        required = {"args": args, "pg_loss": pg_loss, "rollout_log_probs": roll, "loss_masks": masks}
        optional = {"total_lengths": totals, "response_lengths": lengths}
        if "cur_log_probs" in parameters(fn):
            required["cur_log_probs"] = lp
        if "train_log_probs" in parameters(fn):
            required["train_log_probs"] = [o.detach() for o in old]
        kw = self._kwargs(fn, "is_correction", required, optional)
        weights = fn(**{**kw, "pg_loss": torch.ones_like(pg_loss.detach())})[0]
        corrected, out_masks, _metrics = fn(**kw)
        loss, entry = self._entry_loss("is_correction", config, flat, lengths, totals, old, adv, masks, corrected,
                                       reducer_masks=list(out_masks), batch_extra={"rollout_log_probs": roll},
                                       **tis, **clip)
        return self._loss_result(fn, entry, inputs, mask, lengths, {"weights": weights, "pg_loss": corrected},
                                 {"loss": loss}, {"log_probs": lp, "old_log_probs": old, "rollout_log_probs": roll,
                                                  "advantages": adv})
