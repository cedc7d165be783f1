"""`ArealAdapter`: AReaL's PPO loss-path code at the canonical boundaries (see the package
docstring for what each boundary reaches and the token alignment translated)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import math
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

from sentinel.adapters.backport import backport_type_params
from sentinel.adapters.binding import bind, parameters
from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.adapters.layout import group_ids, group_layout, unpermute
from sentinel.adapters.loading import bare_package, first_on_path, keep_host_logging, locate, module_exists, source_of
from sentinel.adapters.observables import Watch, extras
from sentinel.adapters.options import recorded
from sentinel.adapters.shims import install_stubs
from sentinel.adapters.trainer import TrainerAdapter, floating
from sentinel.errors import TargetLoadError, Unsupported

from .conventions import ACTOR, DATA, FUNCTIONAL, HOMES, LEVELS, LIGHT, PIP_HINT, STUBS, UNREACHABLE
from .legacy import OFF_FLAGS, norm_flags
from .options import OPTION_DOMAINS, PINNED, TRAINER_OFF, actor_options
from .surfaces import Surfaces

_last_root: list[Path | None] = []  # the location `areal` was last imported from


# --- small helpers -----------------------------------------------------------------------

def _prepend(x: torch.Tensor, value: Any) -> torch.Tensor:
    """Token-aligned tensor -> AReaL width T + 1, with one prompt column in front."""
    return torch.cat([torch.full_like(x[:, :1], value), x], dim=1)


def _append(x: torch.Tensor, value: Any) -> torch.Tensor:
    """Predict-aligned tensor -> AReaL width T + 1, the column past the end set to `value`."""
    return torch.cat([x, torch.full_like(x[:, :1], value)], dim=1)


def _append_past_end(x: torch.Tensor, padded: torch.Tensor) -> torch.Tensor:
    """Predict-aligned values -> AReaL width T + 1. The column past the end is padding on a row
    whose last position is padding, and AReaL reads it there (its GAE bootstrap, masked by
    seq_no_eos_mask): it holds what that padding holds, the drawn junk. A row that fills the
    width has no value past its end (0: terminal). A NaN or Inf drawn there reaches AReaL's
    turn-level GAE through its `* mask` products (junk x 0), as the same junk at any masked
    position does: the finite family's known root cause (gae-nan-at-masked-position)."""
    return torch.cat([x, torch.where(padded.reshape(-1, 1), x[:, -1:], torch.zeros_like(x[:, :1]))], dim=1)


def turn_ids(loss_mask: torch.Tensor) -> torch.Tensor:
    """AReaL's rollout turn_ids for a token-aligned loss mask: each run of trained tokens one
    generated turn (0, 1, ... per row), -1 elsewhere (prompt, the tool outputs between turns),
    as its concat interaction labels a multi-turn sample (`to_tensor_dict`)."""
    on = loss_mask.bool()
    starts = on & ~torch.cat([torch.zeros_like(on[:, :1]), on[:, :-1]], dim=1)
    return torch.where(on, starts.long().cumsum(dim=1) - 1, -1).to(torch.int32)


def _layout(group: torch.Tensor | None, batch: int, group_size: int | None) -> tuple[list[int], list[int]]:
    """Row order and group sizes of the trajectory list handed to AReaL (without groups:
    one trajectory group per row)."""
    if group is None and group_size and batch % int(group_size):
        raise ValueError(f"batch of {batch} rows is not a multiple of group_size {group_size}")
    return group_layout(group_ids(group, group_size, batch, ungrouped="each"))


@contextlib.contextmanager
def _deferred_torch_compile():
    """While AReaL imports, `torch.compile(fn)` on a plain function returns a wrapper that
    compiles on first call. AReaL compiles helpers at import time (vocab_parallel's
    log-prob gathers), which alone loads dynamo and inductor (~1 s); none is on a boundary
    path, and one that is still runs compiled, exactly as torch.compile would."""
    real = torch.compile

    def deferred(model: Any = None, **kwargs: Any) -> Any:
        if model is None:  # @torch.compile(...) with options
            return lambda m: deferred(m, **kwargs)
        if not isinstance(model, types.FunctionType):
            return real(model, **kwargs)
        compiled: list[Any] = []

        @functools.wraps(model)
        def call(*args: Any, **kw: Any) -> Any:
            if not compiled:
                compiled.append(real(model, **kwargs))
            return compiled[0](*args, **kw)
        return call

    torch.compile = deferred
    try:
        yield
    finally:
        torch.compile = real


def _stores(fn: Any, key: str) -> bool:
    """Whether `fn`'s code, as its file has it, stores `data[key]`: the version has that output,
    so its absence from a run is a fault of the run (a mutant's deleted line), not an older AReaL."""
    try:
        src = source_of(inspect.unwrap(fn))
    except (OSError, TypeError):
        return False
    return f'data["{key}"] =' in src or f"data['{key}'] =" in src


class _Unimportable:
    """AReaL's PPO actor module where AReaL's own import of it fails at this commit: every use
    raises that ImportError (a failed call on this commit, not an unsupported one)."""

    def __init__(self, name: str, error: ImportError):
        self.__name__, self.__file__, self._error = name, None, error

    def __getattr__(self, attr: str) -> Any:
        raise ImportError(f"AReaL's own {self.__name__} does not import at this commit: {self._error}")


class _NoEngine:
    """Stand-in for the TrainEngine a PPOActor holds; no boundary may reach it."""

    __sentinel_standin__ = True  # an exported validate.py gets this class's source (export.standins)

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the sentinel adapter gave PPOActor no train engine (engine.{name} was reached)")


# --- the adapter -------------------------------------------------------------------------

class ArealAdapter(Surfaces, TrainerAdapter):
    name = "areal"
    package, marker, extra, install_hint, light = "areal", "areal.api.cli_args", "areal", PIP_HINT, LIGHT
    description = ("AReaL PPOActor advantages, Normalization, ppo_actor_loss_fn / cispo_loss_fn "
                   "and KLEstimator, called through import shims on CPU or GPU.")
    option_domains, pinned, unreachable = OPTION_DOMAINS, PINNED, UNREACHABLE
    loss_path_files = ("areal/trainer/ppo/actor.py", "areal/engine/ppo/actor.py", "areal/trainer/ppo/gae.py",
                       "areal/utils/functional.py", "areal/utils/functional/", "areal/utils/data.py",
                       "areal/api/cli_args.py")

    # --- loading ------------------------------------------------------------------------

    def _find(self) -> str:
        """Where AReaL comes from, for messages; a checkout goes first on sys.path (an
        installed package stays where it is: `self.root` stays None)."""
        found = locate("areal", "areal", self.marker, self.root, hint=PIP_HINT, one_version=False)
        self._found = found
        if self.root is None:
            return "installed package"
        first_on_path(found)
        return f"checkout {self.root}"

    def _forget_other_areal(self) -> None:
        """A process imports one AReaL; a different location drops the modules cached from
        the previous one (tests load 1.0.4 and a checkout in one process)."""
        mod = sys.modules.get("areal")
        if mod is None:
            return
        here = Path(mod.__file__).resolve().parent.parent if getattr(mod, "__file__", None) else None
        want = Path(self.root).resolve() if self.root is not None else None
        if want is not None and here == want:
            return
        if want is None and (not _last_root or _last_root[-1] is None):
            return
        for name in [n for n in sys.modules if n == "areal" or n.startswith("areal.")]:
            del sys.modules[name]
        if _last_root and _last_root[-1] is not None:
            old = str(_last_root[-1])
            while old in sys.path and old != (str(want) if want else None):
                sys.path.remove(old)
        importlib.invalidate_caches()

    def load(self) -> dict[str, Any]:
        where = self._find()
        self._forget_other_areal()
        self.stubs = install_stubs(STUBS + list(self.options.get("stubs", [])))
        backport_type_params("areal")  # AReaL used Python 3.12 generics for a while (2026-01 to 03)
        if self.root is not None and not (self._found / "areal" / "__init__.py").is_file():
            bare_package("areal", self._found)  # early AReaL: no __init__.py; the installed one must not win
        homes = {k: next((m for m in c if module_exists(self._found, m)), c[0]) for k, c in HOMES.items()}
        t0 = time.perf_counter()
        try:
            with keep_host_logging(), _deferred_torch_compile():
                mods = {k: self._import(m) for k, m in {"areal": "areal", **homes}.items() if k != ACTOR}
                try:
                    mods[ACTOR] = self._import(homes[ACTOR])
                except ImportError as e:  # AReaL's own actor imports a name its package lacks (cd3d405dc,
                    if not (e.name or "").startswith("areal"):  # fixed a day later by #703): the boundaries
                        raise  # that need no actor still run
                    mods[ACTOR] = _Unimportable(homes[ACTOR], e)
        except TargetLoadError as e:  # a light dependency is missing: the message names the extra
            raise TargetLoadError(f"target 'areal' ({where}): {e}") from e
        except SyntaxError as e:  # newer syntax than this interpreter reads, beyond PEP 695 generics
            raise TargetLoadError(f"target 'areal' ({where}): this version's code needs a newer Python than "
                                  f"{sys.version_info.major}.{sys.version_info.minor}: SyntaxError: {e}") from e
        except Exception as e:  # an import-time failure of the target is a load error
            raise TargetLoadError(f"target 'areal' ({where}): import failed: {type(e).__name__}: {e}") from e
        import_s = time.perf_counter() - t0
        _last_root.append(Path(self.root).resolve() if self.root is not None else None)

        pkg_parent = Path(mods["areal.api.cli_args"].__file__).resolve().parents[2]
        if self.root is not None and pkg_parent != Path(self.root).resolve():
            raise TargetLoadError(f"target 'areal': imported from {pkg_parent}, not from the checkout "
                                  f"{self.root} (another areal shadows it on sys.path)")
        self._areal = mods["areal"]
        self._cli = mods["areal.api.cli_args"]
        self._data = mods["areal.utils.data"]
        self._functional = mods[FUNCTIONAL]
        self._actor_mod = mods[ACTOR]
        self._quiet()

        version = getattr(self._areal, "__version__", None)
        if self.root is not None:  # a checkout reports the installed dist's metadata version
            version = self._checkout_version(Path(self.root)) or version
        files = sorted({str(Path(m.__file__).resolve().relative_to(pkg_parent)) for m in mods.values() if m.__file__}
                       | {str(Path(inspect.getsourcefile(f)).resolve().relative_to(pkg_parent))
                          for f in (getattr(self._data, "Normalization", None),
                                    getattr(self._functional, "ppo_actor_loss_fn", None)) if f is not None})
        return {"version": version, "module_files": files, "stubs": list(self.stubs),
                "import_s": round(import_s, 3), "location": str(pkg_parent / "areal")}

    @staticmethod
    def _checkout_version(root: Path) -> str | None:
        try:
            import tomllib
            return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
        except Exception:
            return None

    def _quiet(self) -> None:
        logs = getattr(sys.modules.get("areal.utils.logging"), "_created_loggers", {})
        for lg in list(logs.values()):
            if isinstance(lg, logging.Logger) and lg.level < logging.WARNING:
                lg.setLevel(logging.WARNING)

    # --- config translation -------------------------------------------------------------

    def _norm_config(self, boundary: str, spec: Any, *, sizes: list[int], has_groups: bool, group_size: int | None) -> Any:
        """A canonical normalisation dict -> AReaL NormConfig (None stays None).

        `sizes` are the trajectory group sizes the adapter hands AReaL; `group_size` is the
        configured fixed size, which versions without variable-size groups slice by."""
        if spec is None or spec is False:
            return None
        spec = dict(spec) if isinstance(spec, dict) else {}
        mean_level = LEVELS[spec.get("mean_level", "batch")]
        std_level = LEVELS[spec.get("std_level", "batch")]
        gs = spec.get("group_size") or group_size
        if "group" in (mean_level, std_level):
            if not has_groups:
                raise ValueError("group-level normalisation needs `group` ids or config `group_size`")
            if not gs:
                # the configured samples per prompt: the largest group (smaller ones lost samples,
                # as filtering leaves them). Versions with variable-size groups (#1454) read the
                # trajectory groups instead; older ones slice by this size, whatever the groups
                # are: fed as the trainer would, and observed.
                gs = max(sizes)
        cls = self._need(self._cli, "NormConfig", boundary)
        return cls(**bind(cls, boundary, {"mean_level": mean_level, "std_level": std_level,
                                           "group_size": int(gs or 1)},
                          {k: spec.get(k) for k in ("eps", "mean_leave1out", "std_unbiased")}))

    def _supports_group_sizes(self) -> bool:
        return "group_sizes" in inspect.signature(self._need(self._data, "Normalization", "reward_norm").__call__).parameters

    @staticmethod
    def _need(mod: types.ModuleType, name: str, boundary: str) -> Any:
        """AReaL's `name` from `mod`, or `Unsupported` where this version has none."""
        obj = getattr(mod, name, None)
        if obj is None:
            raise Unsupported(f"AReaL has no {mod.__name__}.{name} at this version (boundary {boundary!r})")
        return obj

    def _actor(self, **kw: Any) -> Any:
        """A PPOActor built by AReaL's own constructor from its own config class (a version
        without `kl_estimator` has k1 only)."""
        cls = self._need(self._cli, "PPOActorConfig", "advantages")
        cfg = cls(**bind(cls, "advantages", {"experiment_name": "rl-sentinel", "trial_name": "adapter"}, kw,
                         absent={"kl_estimator": "k1", **OFF_FLAGS, **TRAINER_OFF}))
        params = inspect.signature(self._actor_mod.PPOActor.__init__).parameters
        args = {"config": recorded(cfg)}  # the options PPOActor reads (actor.*, reward_norm.*), recorded
        if "engine" in params:
            args["engine"] = _NoEngine()
        return self._actor_mod.PPOActor(**args)

    def _rejection_sampling(self, boundary: str, spec: Any) -> Any:
        """AReaL's RejectionSamplingConfig from its own keys, passed as given."""
        if spec is None:
            return None
        cls = getattr(self._cli, "RejectionSamplingConfig", None)
        if cls is None:
            raise Unsupported("RejectionSamplingConfig is absent at this AReaL version")
        return recorded(cls(**bind(cls, boundary, dict(spec))), "rejection_sampling.")  # the fields read, recorded

    # --- boundaries ---------------------------------------------------------------------

    @implements("advantages", calls=(f"{ACTOR}:PPOActor.compute_advantages", f"{ACTOR}:PPOActor._compute_advantages",
                                      f"{DATA}:Normalization", f"{DATA}:KLEstimator",
                                      f"{FUNCTIONAL}:reward_overlong_penalty"))  # trainer:overlong_reward_penalty
    def b_advantages(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        if config["estimator"] != "gae":
            raise Unsupported(f"AReaL's PPOActor computes GAE only, not estimator {config['estimator']!r}")
        kl_type = self._kl_name(config["kl_type"])
        if kl_type is None:
            raise Unsupported(f"AReaL's KLEstimator has no {config['kl_type']!r}")

        loss_mask = inputs["loss_mask"]
        B, T = loss_mask.shape
        dev = loss_mask.device
        attn = inputs.get("attention_mask")
        if attn is None:  # real tokens: everything up to the row's last trained token
            pos = torch.arange(T, device=dev).expand(B, T)
            last = torch.where(loss_mask.bool(), pos, -1).amax(-1, keepdim=True)
            attn = pos <= last
        group = inputs.get("group")
        group_size = config["group_size"] or (config["reward_norm"] or {}).get("group_size")
        perm, sizes = _layout(group, B, group_size)
        groups = dict(sizes=sizes, has_groups=group is not None or bool(group_size), group_size=group_size)
        adv_spec = config["adv_norm"] or ({} if config["normalize_advantages"] else None)
        if "reward_norm" in parameters(self._need(self._cli, "PPOActorConfig", "advantages")):
            norms = {"reward_norm": self._norm_config("advantages", config["reward_norm"], **groups),
                     "adv_norm": self._norm_config("advantages", adv_spec, **groups)}
        else:  # before NormConfig: booleans (legacy.py)
            norms = norm_flags(config["reward_norm"], adv_spec,
                               group_size or (max(sizes) if group is not None else None))
            held = parameters(self._cli.PPOActorConfig).get("adv_norm")
            if norms["adv_norm"] and held is not None and "bool" not in str(held.annotation):
                raise ValueError("the adapter does not build the AdvNormConfig AReaL's adv_norm took at this version "
                                 "(2025-09); only adv_norm off is translated there")
        clip = config["reward_clip"]
        actor = self._actor(
            **norms,
            reward_clip=math.inf if clip is None else float(clip),
            reward_bias=float(config["reward_bias"]), reward_scaling=float(config["reward_scaling"]),
            mask_no_eos_with_zero=bool(config["mask_no_eos_with_zero"]),
            kl_ctl=float(config["kl_coef"]), kl_estimator=kl_type,
            discount=float(config["gamma"]),
            # a drawn lambda function (trainer:gae_lambda_fn) replaces the constant lam
            **{"gae_lambda": float(config["lam"]), **(trainer := actor_options(config))},
        )

        # AReaL's rollout layout (areal/workflow/rlvr.py): int32 ids and loss mask, bool
        # attention mask, float32 log-probs and rewards; width T + 1 (see the module doc:
        # a prompt column in front of token-aligned inputs, predict-aligned ones as they are).
        idx = torch.tensor(perm, device=dev)
        lp = inputs.get("log_probs")
        lp = lp.detach().float() if lp is not None else torch.zeros(B, T, device=dev)
        # recompute_logprob (not decoupled): log_probs are the recomputed prox_logp the KL reads, and the
        # batch's logprobs the rollout engine's, drawn on their own where given (AReaL overwrites them)
        recomputed = bool(trainer.get("recompute_logprob")) and not trainer.get("use_decoupled_loss")
        roll = inputs.get("rollout_log_probs") if recomputed else None
        batch: dict[str, torch.Tensor] = {
            "input_ids": torch.zeros(B, T + 1, dtype=torch.int32, device=dev),
            "attention_mask": _prepend(attn.bool(), True)[idx],
            "loss_mask": _prepend(loss_mask.to(torch.int32), 0)[idx],
            "logprobs": _prepend(lp if roll is None else roll.detach().float(), 0.0)[idx],
            "rewards": inputs["rewards"].detach().float().reshape(B)[idx],
        }
        if trainer.get("gae_timestep_unit") == "turn":  # a multi-turn rollout's turn boundaries
            batch["turn_ids"] = _prepend(turn_ids(loss_mask), -1)[idx]
        if trainer.get("recompute_logprob") or trainer.get("use_decoupled_loss"):  # what compute_logp returns
            batch["prox_logp"] = _append(lp, 0.0)[idx]  # (options.py), predict-aligned
        if inputs.get("ref_log_probs") is not None:
            batch["ref_logp"] = _append(inputs["ref_log_probs"].detach().float(), 0.0)[idx]
        if inputs.get("values") is not None:
            batch["values"] = _append_past_end(inputs["values"].detach().float(), ~attn[:, -1].bool())[idx]
        passed = {k: list(v.split(sizes, dim=0)) for k, v in batch.items()}
        trajs = [{k: passed[k][i] for k in batch} for i in range(len(sizes))]

        watches = [Watch(actor, "actor")] + ([Watch(actor.config)] if getattr(actor, "config", None) is not None else [])
        if "list" in str(parameters(actor.compute_advantages)["data"].annotation).lower():
            results = actor.compute_advantages(trajs)
        else:  # before #1017 (2026-03): one padded batch dict, its keys replaced (returned, or in place)
            one = dict(batch)
            results = [actor.compute_advantages(one) or one]

        cls = self._actor_mod.PPOActor  # the batch kernel, or the one method before #1017
        kernel = getattr(cls, "_compute_advantages", cls.compute_advantages)
        if "returns" not in results[0] and not _stores(kernel, "returns"):  # else a fault of this run: KeyError below
            raise Unsupported("AReaL's PPOActor.compute_advantages stores no returns at this version (before #392, "
                              "PPO with a critic): the advantages boundary's returns output does not exist there")

        def back(key: str) -> torch.Tensor:  # AReaL predicting position p == canonical token p
            return unpermute(torch.cat([r[key] for r in results], dim=0)[:, :T], perm)

        outputs = {
            "advantages": back("advantages"),
            "returns": back("returns"),
            "token_rewards": back("tot_rewards"),
            # AReaL logs kl_rewards = -kl_ctl * KL (no raw KL): reported under its own name.
            "kl_rewards": back("kl_rewards"),
        }

        after = {k: unpermute(torch.cat(v, dim=0), perm) for k, v in passed.items()}
        inputs_after: dict[str, torch.Tensor] = {
            "rewards": after["rewards"].to(inputs["rewards"].dtype).reshape(inputs["rewards"].shape),
            "loss_mask": after["loss_mask"][:, 1:].to(loss_mask.dtype),
        }
        if inputs.get("attention_mask") is not None:
            inputs_after["attention_mask"] = after["attention_mask"][:, 1:].to(inputs["attention_mask"].dtype)
        if inputs.get("log_probs") is not None and roll is None:
            inputs_after["log_probs"] = after["logprobs"][:, 1:].to(inputs["log_probs"].dtype)
        if roll is not None:
            inputs_after["rollout_log_probs"] = after["logprobs"][:, 1:].to(roll.dtype)
        for canon, mine in (("ref_log_probs", "ref_logp"), ("values", "values")):
            if mine in after:
                inputs_after[canon] = after[mine][:, :T].to(inputs[canon].dtype)
        # every key compute_advantages returned, its groups' rows put back in canonical order
        keys = [k for k in results[0] if all(isinstance(r.get(k), torch.Tensor) and r[k].dim() for r in results)]
        rows = {}
        for k in keys:
            try:
                rows[k] = unpermute(torch.cat([r[k] for r in results], dim=0), perm)
            except RuntimeError:  # groups of unequal widths: kept per group
                rows[k] = [r[k] for r in results]
        return BoundaryResult(outputs, inputs_after, self._ref(kernel),
                              extras({"results": rows}, *watches))

    @implements("gae", calls=("areal.trainer.ppo.gae:_compute_token_level_gae",))
    def b_gae(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        """AReaL's token-level GAE kernel (a function of its own since #1600; inline in
        `_compute_advantages` before, hence unsupported there)."""
        try:
            gae = importlib.import_module("areal.trainer.ppo.gae")
        except ImportError:
            gae = None
        fn = getattr(gae, "_compute_token_level_gae", None)
        if fn is None:
            raise Unsupported("GAE is inline in PPOActor._compute_advantages at this AReaL version "
                              "(areal.trainer.ppo.gae._compute_token_level_gae arrived with #1600)")
        mask = inputs["loss_mask"]
        B, T = mask.shape
        # Predict-aligned layout one column wider (module doc): column p is canonical token
        # p; the last column, past the end, is never a timestep. No row bootstraps (no
        # canonical input holds a value past the last token); past a masked last token the
        # values' column is padding and holds its junk, which AReaL must ignore.
        wide = {"token_rewards": _append(inputs["token_rewards"].detach().float(), 0.0),
                "values": _append_past_end(inputs["values"].detach().float(), ~mask[:, -1].bool())}
        wide_mask = _append(mask.float(), 0.0)
        adv, ret = fn(**bind(fn, "gae", {"rewards": wide["token_rewards"], "values": wide["values"],
                                         "loss_mask": wide_mask,
                                         "seq_no_eos_mask": torch.zeros(B, dtype=torch.bool, device=mask.device),
                                         "discount": float(config["gamma"]), "gae_lambda": float(config["lam"])}))
        after = {"token_rewards": wide["token_rewards"][:, :T].to(inputs["token_rewards"].dtype),
                 "values": wide["values"][:, :T].to(inputs["values"].dtype),
                 "loss_mask": wide_mask[:, :T].to(mask.dtype)}
        return BoundaryResult({"advantages": adv[:, :T], "returns": ret[:, :T]}, after, self._ref(fn))

    # the class, as advantages maps it: one function for coverage, where both boundaries' hunts add up
    @implements("reward_norm", calls=(f"{DATA}:Normalization",))
    def b_reward_norm(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        x = inputs["rewards"]
        B = x.shape[0]
        group = inputs.get("group")
        group_size = config["group_size"]
        perm, sizes = _layout(group, B, group_size)
        supports_sizes = self._supports_group_sizes()
        spec = {k: config[k] for k in ("mean_level", "std_level", "eps", "mean_leave1out", "std_unbiased")}
        norm_cfg = self._norm_config("reward_norm", spec, sizes=sizes, has_groups=group is not None or bool(group_size),
                                     group_size=group_size)
        norm = self._need(self._data, "Normalization", "reward_norm")(recorded(norm_cfg))  # its reads recorded
        idx = torch.tensor(perm, device=x.device)
        kw: dict[str, Any] = {}
        mask = inputs.get("mask")
        if mask is not None:
            kw["loss_mask"] = mask.float()[idx]
        if group is not None and supports_sizes:
            kw["group_sizes"] = sizes
        passed = x.detach().float()[idx]
        y = norm(passed, **kw)
        inputs_after = {"rewards": unpermute(passed, perm).to(x.dtype)}
        if mask is not None:
            inputs_after["mask"] = unpermute(kw["loss_mask"], perm).to(mask.dtype)
        return BoundaryResult({"rewards": unpermute(y, perm)}, inputs_after,
                              self._ref(self._data.Normalization.__call__))

    def _loss_common(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, Any]:
        """The tensors every AReaL actor loss takes (ppo_actor_loss_fn's names)."""
        if config["loss_agg"] != "token-mean":
            raise Unsupported(f"AReaL's actor losses aggregate token-mean only, not {config['loss_agg']!r}")
        old = floating(inputs["old_log_probs"])
        behave = old
        if config["use_decoupled_loss"]:
            # Decoupled PPO: proximal = recomputed pi_old, behave = the rollout engine's.
            behave = inputs.get("rollout_log_probs")
            if behave is None:
                raise ValueError("use_decoupled_loss needs input rollout_log_probs (behaviour log-probs)")
            behave = floating(behave)
        return {"logprobs": floating(inputs["log_probs"]), "proximal_logprobs": old, "old_logprobs": behave,
                "advantages": floating(inputs["advantages"]), "loss_mask": inputs["loss_mask"].bool()}

    @staticmethod
    def _loss_outputs(loss: torch.Tensor, stat: dict[str, Any]) -> dict[str, Any]:
        out = {"pg_loss": stat["loss"], "clipfrac": stat["clip_mask"].float(), "loss": loss}
        if "behave_imp_weight" in stat:
            out["weights"] = stat["behave_imp_weight"]
        return out

    @staticmethod
    def _absent(config: dict[str, Any]) -> dict[str, Any]:
        """How ppo_actor_loss_fn behaves at a version without one of its later parameters:
        symmetric clip, token-level ratio, no behaviour-weight cap, no rejection-sampling config
        (before #1088: the version's own behaviour-weight defaults, as the adapter passes none)."""
        return {"eps_clip_higher": config["eps_clip"], "importance_sampling_level": "token",
                "behav_imp_weight_cap": None, "behave_imp_weight_cap": None, "rejection_sampling": None}

    @implements("policy_loss", calls=(f"{FUNCTIONAL}:ppo_actor_loss_fn",))
    def b_policy_loss(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        kw = self._loss_common(inputs, config)
        fn = self._need(self._functional, "ppo_actor_loss_fn", "policy_loss")
        loss, stat = fn(**bind(fn, "policy_loss", {**kw, "eps_clip": float(config["eps_clip"])},
                               {"eps_clip_higher": config["eps_clip_high"], "c_clip": config["eps_clip_c"],
                                "rejection_sampling": self._rejection_sampling("policy_loss",
                                                                               config["rejection_sampling"]),
                                "importance_sampling_level": config["importance_sampling_level"]},
                               absent=self._absent(config)))
        return BoundaryResult(self._loss_outputs(loss, stat),
                              {"loss_mask": kw["loss_mask"].to(inputs["loss_mask"].dtype)}, self._ref(fn),
                              extras((loss, stat)))

    @implements("cispo_loss", calls=(f"{FUNCTIONAL}:cispo_loss_fn",))
    def b_cispo_loss(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        fn = getattr(self._functional, "cispo_loss_fn", None)
        if fn is None:
            raise Unsupported("areal.utils.functional.cispo_loss_fn is absent at this version (added by #1412)")
        kw = self._loss_common(inputs, config)
        behave = kw.pop("old_logprobs")
        if not config["use_decoupled_loss"]:
            behave = None  # AReaL's default: no behaviour policy
        loss, stat = fn(**bind(fn, "cispo_loss", {**kw, "eps_clip": float(config["eps_clip"])},
                               {"eps_clip_higher": config["eps_clip_high"], "old_logprobs": behave,
                                "rejection_sampling": self._rejection_sampling("cispo_loss",
                                                                               config["rejection_sampling"])}))
        return BoundaryResult(self._loss_outputs(loss, stat),
                              {"loss_mask": kw["loss_mask"].to(inputs["loss_mask"].dtype)}, self._ref(fn),
                              extras((loss, stat)))

    @implements("is_correction", calls=(f"{FUNCTIONAL}:ppo_actor_loss_fn",))
    def b_is_correction(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        """AReaL's decoupled loss: pi_prox/pi_behave weight from rejection sampling (token level)."""
        method = config["method"]
        actions = {"vanilla_tis": "clamp", "icepop": "mask"}
        if method not in actions:
            raise Unsupported(f"AReaL has no {method!r} correction (it has vanilla_tis = token clamp "
                              "and icepop = token mask of pi_prox/pi_behave)")
        low = config["tis_clip_low"]
        rs = {"level": "token", "action": actions[method], "metric": "ratio",
              "upper": float(config["tis_clip"]), "lower": float(low) if low else None}
        kw = self._loss_common(inputs, {**config, "use_decoupled_loss": True})
        fn = self._need(self._functional, "ppo_actor_loss_fn", "policy_loss")
        loss, stat = fn(**bind(fn, "is_correction", {**kw, "eps_clip": float(config["eps_clip"])},
                               {"eps_clip_higher": config["eps_clip_high"],
                                "rejection_sampling": self._rejection_sampling("is_correction", rs)}))
        out = self._loss_outputs(loss, stat)
        return BoundaryResult({"weights": out["weights"], "pg_loss": out["pg_loss"], "loss": loss},
                              {"loss_mask": kw["loss_mask"].to(inputs["loss_mask"].dtype)}, self._ref(fn),
                              extras((loss, stat)))

    @implements("kl", calls=(f"{DATA}:KLEstimator",))
    def b_kl(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        kl_type = self._kl_name(config["kl_type"])
        if kl_type is None:
            raise Unsupported(f"AReaL's KLEstimator has no {config['kl_type']!r} (k1, k2, k3)")
        est = self._need(self._data, "KLEstimator", "kl")(kl_type)
        kl = est(floating(inputs["log_probs"]), floating(inputs["ref_log_probs"]))
        return BoundaryResult({"kl": kl}, {}, self._ref(self._data.KLEstimator._compute_approx_kl))
