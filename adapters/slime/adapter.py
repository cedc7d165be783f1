"""`SlimeAdapter`: slime's loss-path functions at the canonical boundaries (see the package
docstring for where each lives and the conventions translated)."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import time
import types
from pathlib import Path
from typing import Any, Callable

import torch

from sentinel.adapters.backport import backport_type_params
from sentinel.adapters.binding import bind, parameters, signature_text
from sentinel.adapters.contract import BoundaryResult, implements, refuse
from sentinel.adapters.layout import group_ids, group_layout
from sentinel.adapters.loading import bare_package, module_exists, source_of, version_facts
from sentinel.adapters.observables import Watch, returned
from sentinel.adapters.options import trainer_options
from sentinel.adapters.ranks import current as current_rank
from sentinel.adapters.spying import spy
from sentinel.adapters.trainer import TrainerAdapter, straight_through
from sentinel.errors import Unsupported

from .context_parallel import cp_all_reduce
from .conventions import (
    BARE_PACKAGES,
    BOUNDARY_MODULES,
    CP_SIZE,
    CP_UTILS,
    DP_SIZE,
    ADVANTAGE_PER_TOKEN,
    ESTIMATORS,
    EXTRA,
    GROUP_NORMALISED,
    LIGHT,
    LOSS,
    MODULE_HOMES,
    PPO_UTILS,
    OPTION_DOMAINS,
    PINNED,
    PROMPT_LENGTH,
    REUSE,
    ROLLOUT,
    UNREACHABLE,
    slime_args,
)
from .deviations import DEVIATIONS
from .entry import EntryLoss, loss_function_scale, megatron_normalise
from .megatron import install_megatron_shim
from .parallel import on_ranks, scatter
from .responses import Responses
from .surfaces import DIST, Surfaces

# The loss entry every loss boundary's reduced loss goes through (`EntryLoss._entry_loss`), and
# compute_approx_kl, which policy_loss_function calls for the drawn use_kl_loss (its importance
# ratio with use_unbiased_kl).
ENTRY_CALLS = (f"{LOSS}:loss_function", f"{LOSS}:policy_loss_function", f"{CP_UTILS}:get_sum_of_sample_mean",
               f"{PPO_UTILS}:compute_approx_kl")
ENTRY_STEPS = (megatron_normalise, loss_function_scale)  # what the adapter runs of the chain (entry.py says why)


class SlimeAdapter(Responses, EntryLoss, Surfaces, TrainerAdapter):
    """THUDM/slime from a checkout (``--repo``) or an installed package."""

    name = "slime"
    package, marker, extra, light = "slime", PPO_UTILS, EXTRA, LIGHT
    lookup_modules = (PPO_UTILS, LOSS, CP_UTILS)
    description = ("THUDM/slime: ppo_utils / megatron_utils.loss / cp_utils called on one process "
                   "(context parallel size 1; loss_agg's reducer on 1, 2 or 4 ranks in turn; the advantages on "
                   "1, 2 or 4 CP x 1 or 2 DP ranks at once, threads) with per-sample response tensors.")
    loss_path_files = ("slime/utils/ppo_utils.py", "slime/backends/megatron_utils/loss.py",
                       "slime/backends/megatron_utils/cp_utils.py", "slime/ray/rollout.py")
    deviations = DEVIATIONS  # where slime departs from the reference math on purpose
    option_domains, pinned, unreachable = OPTION_DOMAINS, PINNED, UNREACHABLE
    unsupported = (
        refuse("advantages", "reward_norm",
               reason="slime's only reward normalisation is the estimator's built-in group normalisation "
                      "(RolloutManager._post_process_rewards); no configurable reward_norm"),
        refuse("advantages", "mask_no_eos_with_zero",
               reason="slime has no option to zero the reward of a no-EOS sample"),
        refuse("advantages", "reward_clip", reason="slime's advantage path does not clip rewards"),
    )

    def __init__(self, root: Path | None, device: torch.device, options: dict[str, Any] | None = None):
        super().__init__(root, device, options)
        self.rollout_error: str | None = None

    # --- loading ------------------------------------------------------------------------
    def _version(self, root: Path, from_checkout: bool = True) -> dict[str, Any]:
        setup = root / "setup.py"
        m = re.search(r"""version\s*=\s*["']([^"']+)["']""", setup.read_text(errors="replace")) if setup.is_file() else None
        return version_facts(root, m.group(1) if m else None)

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

        self.stubs = install_megatron_shim()
        backport_type_params("slime")
        importlib.import_module("slime")
        bare = [p for p in BARE_PACKAGES if root.joinpath(*p.split(".")).is_dir()]
        for pkg in bare:
            parent = pkg.rpartition(".")[0]
            if parent:
                self._import(parent)
            bare_package(pkg, root)
        # each loss-path module where this commit keeps it; one absent everywhere leaves its
        # functions to `Unsupported` (lookup), one present but not importable fails the load
        self.located: dict[str, str] = {}
        for key in BOUNDARY_MODULES:
            where = next((m for m in MODULE_HOMES[key] if module_exists(root, m)), None)
            if where is not None:
                self.mods[key] = self._import(where)
                self.located[key] = where
        boundary_s = time.perf_counter() - t0
        # reward post-processing (reward_norm, group-normalised advantages): absent at a commit,
        # its boundaries are unsupported; present but not importable, the target does not load
        if not self.options.get("rollout_module", True):
            self.rollout_error = "rollout_module disabled by options"
        elif module_exists(root, ROLLOUT):
            self.mods[ROLLOUT] = self._import(ROLLOUT)
        else:
            self.rollout_error = f"{ROLLOUT.replace('.', '/')}.py does not exist at this commit"
        self.facts = {
            **self._version(root),
            "module_files": [str(Path(m.__file__).resolve().relative_to(root)) for m in self.mods.values()],
            "stubs": list(self.stubs),
            "bare_packages": bare,
            "boundary_import_s": round(boundary_s, 4),
            "eager": not compile_,
        }
        if self.rollout_error:
            self.facts["rollout_module_error"] = self.rollout_error
        return dict(self.facts)

    # --- boundaries ---------------------------------------------------------------------
    @implements("opsm_mask", calls=(f"{PPO_UTILS}:compute_opsm_mask", f"{PPO_UTILS}:compute_policy_loss",
                                    *ENTRY_CALLS), steps=ENTRY_STEPS)
    def b_opsm_mask(self, inputs, config):
        """compute_opsm_mask + compute_policy_loss, composed as policy_loss_function does
        (pg_loss * opsm_mask, reduced over valid tokens); mirrors the PR #1917 seed script."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_opsm_mask", PPO_UTILS, boundary="opsm_mask")
        lp, given_old, adv = (self._tok(inputs, k, mask) for k in ("log_probs", "old_log_probs", "advantages"))
        roll = self._rollout(inputs, mask)
        # with use_rollout_logprobs slime's old policy is the rollout's, for the ratio and the OPSM KL
        # alike (policy_loss_function); else it keeps the rollout log-probs unread beside the old ones
        old = roll["rollout_log_probs"] if roll and trainer_options(config).get("use_rollout_logprobs") else given_old
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        flat = torch.cat(lp)
        clip = self._clip(config)
        pg_loss, _clipfrac, _ = self._ppo_token_loss("opsm_mask", flat, torch.cat(old), torch.cat(adv), **clip)
        args = slime_args(use_opsm=True, opsm_delta=config["opsm_delta"])
        kw = bind(fn, "opsm_mask", {"args": args, "full_log_probs": lp, "full_old_log_probs": old,
                                    "advantages": adv, "loss_masks": masks})
        opsm_mask, opsm_clipfrac = fn(**kw)
        masked = pg_loss * opsm_mask
        reduced, entry, logged = self._entry_loss("opsm_mask", config, flat, lengths, totals, given_old, adv, masks, masked,
                                          batch_extra=roll, use_opsm=True, opsm_delta=args.opsm_delta, **clip)
        return self._loss_result(fn, entry, inputs, mask, lengths, {"opsm_mask": opsm_mask, "pg_loss": masked},
                                 {"opsm_clipfrac": opsm_clipfrac, "reduced_policy_loss": reduced},
                                 {"log_probs": lp, "old_log_probs": given_old, "advantages": adv, **roll}, logged)

    @implements("policy_loss", calls=(f"{PPO_UTILS}:compute_policy_loss", f"{PPO_UTILS}:compute_gspo_kl",
                                      *ENTRY_CALLS), steps=ENTRY_STEPS)
    def b_policy_loss(self, inputs, config):
        """compute_policy_loss (asymmetric + dual clip) reduced by get_sum_of_sample_mean; with
        importance_sampling_level sequence, on compute_gspo_kl's sequence KL (slime's gspo
        estimator, as policy_loss_function does it)."""
        if config["use_decoupled_loss"] or config["rejection_sampling"] is not None:
            raise Unsupported("slime has no decoupled PPO loss; its behaviour-policy correction is a TIS hook "
                              "(boundary is_correction)")
        level = config["importance_sampling_level"]
        if level not in ("token", "sequence"):
            raise Unsupported(f"importance_sampling_level {level!r}: slime has token and sequence (gspo)")
        mask = inputs["loss_mask"].to(self.device)
        lp, old, adv = (self._tok(inputs, k, mask) for k in ("log_probs", "old_log_probs", "advantages"))
        drawn, given_old = trainer_options(config), old
        if drawn.get(REUSE.partition(":")[2]):
            if level == "sequence" or drawn.get("use_rollout_logprobs"):
                raise Unsupported("slime's actor reuses the loss pass's log-probs as the old ones only without gspo "
                                  "and use_rollout_logprobs (can_reuse_log_probs_in_loss)")
            old = [x.detach() for x in lp]  # the old policy is the current one (given_old: unread)
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        flat = torch.cat(lp)
        clip = self._clip(config)
        ppo_kl, estimator = None, {}
        if level == "sequence":
            gspo = self._fn("compute_gspo_kl", PPO_UTILS, boundary="policy_loss")
            ppo_kl = gspo(**bind(gspo, "policy_loss", {"full_log_probs": lp, "full_old_log_probs": old,
                                                       "local_log_probs": lp, "loss_masks": masks}))
            estimator = {"advantage_estimator": "gspo"}
        pg_loss, clipfrac, fn = self._ppo_token_loss("policy_loss", flat, torch.cat(old), torch.cat(adv), **clip,
                                                     ppo_kl=ppo_kl)
        loss, entry, logged = self._entry_loss("policy_loss", config, flat, lengths, totals, old, adv, masks, pg_loss,
                                       batch_extra=self._rollout(inputs, mask), **clip, **estimator)
        return self._loss_result(fn, entry, inputs, mask, lengths, {"pg_loss": pg_loss, "clipfrac": clipfrac},
                                 {"loss": loss}, {"log_probs": lp, "old_log_probs": given_old, "advantages": adv}, logged)

    @implements("cispo_loss", calls=(f"{PPO_UTILS}:compute_cispo_loss", *ENTRY_CALLS), steps=ENTRY_STEPS)
    def b_cispo_loss(self, inputs, config):
        """compute_cispo_loss (MiniMax-M1) reduced by get_sum_of_sample_mean."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_cispo_loss", PPO_UTILS, boundary="cispo_loss")
        lp, old, adv = (self._tok(inputs, k, mask) for k in ("log_probs", "old_log_probs", "advantages"))
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        lp_c, old_c = torch.cat(lp), torch.cat(old)
        eps_clip, eps_high = config["eps_clip"], config["eps_clip_high"]
        kw = bind(fn, "cispo_loss", {"ppo_kl": old_c - lp_c, "log_probs": lp_c, "advantages": torch.cat(adv),
                                     "eps_clip": eps_clip, "eps_clip_high": eps_high})
        pg_loss, clipfrac = fn(**kw)[:2]
        loss, entry, logged = self._entry_loss("cispo_loss", config, lp_c, lengths, totals, old, adv, masks, pg_loss,
                                       batch_extra=self._rollout(inputs, mask), advantage_estimator="cispo", eps_clip=eps_clip, eps_clip_high=eps_high)
        return self._loss_result(fn, entry, inputs, mask, lengths, {"pg_loss": pg_loss, "clipfrac": clipfrac},
                                 {"loss": loss}, {"log_probs": lp, "old_log_probs": old, "advantages": adv}, logged)

    @implements("gspo_kl", calls=(f"{PPO_UTILS}:compute_gspo_kl",))
    def b_gspo_kl(self, inputs, config):
        """compute_gspo_kl: per-sample valid-token mean of old - new, expanded to every token."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_gspo_kl", PPO_UTILS, boundary="gspo_kl")
        lp, old = self._tok(inputs, "log_probs", mask), self._tok(inputs, "old_log_probs", mask)
        lengths, _ = self._lengths(mask, lp)
        kw = bind(fn, "gspo_kl", {"full_log_probs": lp, "full_old_log_probs": old,
                                  "local_log_probs": lp, "loss_masks": self._masks(mask)})
        seq_kl = fn(**kw)
        return BoundaryResult({"seq_kl": self._back(seq_kl, lengths, mask)},
                              self._after(inputs, {"log_probs": lp, "old_log_probs": old}, mask), self._ref(fn))

    @implements("kl", calls=(f"{PPO_UTILS}:compute_approx_kl",))
    def b_kl(self, inputs, config):
        """compute_approx_kl(log_probs, log_probs_base=ref, kl_loss_type) per sample, as
        compute_advantages_and_returns calls it."""
        mask = inputs["loss_mask"].to(self.device)
        fn = self._fn("compute_approx_kl", PPO_UTILS, boundary="kl")
        lp, ref = self._tok(inputs, "log_probs", mask), self._tok(inputs, "ref_log_probs", mask)
        kl_type = self._kl_name_for(config["kl_type"], fn)
        kl = []
        for a, b in zip(lp, ref):
            kw = bind(fn, "kl", {"log_probs": a, "log_probs_base": b, "kl_loss_type": kl_type},
                      aliases={"log_probs_base": ("ref_log_probs",), "kl_loss_type": ("kl_type",)})
            kl.append(fn(**kw))
        return BoundaryResult({"kl": self._unrows(kl, mask) if kl else torch.zeros_like(mask, dtype=torch.float32)},
                              self._after(inputs, {"log_probs": lp, "ref_log_probs": ref}, mask), self._ref(fn))

    @staticmethod
    def _kl_name_for(kl_type: str, fn: Callable) -> str:
        """Canonical KL estimator name -> the one this slime's compute_approx_kl accepts
        (slime called k1 "kl" until 2025-07)."""
        if kl_type.endswith("+") and not straight_through(fn):
            raise Unsupported(f"slime's compute_approx_kl has no straight-through estimator {kl_type!r} (its code "
                              f"tests no '+' suffix)")
        try:
            src = source_of(inspect.unwrap(fn))
        except (OSError, TypeError):
            return kl_type
        names = set(re.findall(r"""["']([a-z0-9_]+)["']""", src))
        if kl_type not in names and kl_type == "k1" and "kl" in names:
            return "kl"
        return kl_type

    @implements("loss_agg", calls=(f"{CP_UTILS}:get_sum_of_sample_mean", f"{CP_UTILS}:get_logits_and_tokens_offset_with_cp"),
                steps=(loss_function_scale, cp_all_reduce))
    def b_loss_agg(self, inputs, config):
        """get_sum_of_sample_mean, scaled as loss_function / Megatron do for one micro-batch (the
        declared `loss_function_scale`: loss_function's custom_loss would import the adapter by its
        module path, which an exported validate.py cannot); with a drawn context-parallel size,
        on each rank's zigzag share in turn, after a prompt of the drawn length (`context_parallel`):
        slime then cuts each loss mask by get_logits_and_tokens_offset_with_cp."""
        mask = inputs["loss_mask"].to(self.device)
        vals = self._tok(inputs, "values", mask)
        masks = self._masks(mask)
        drawn = trainer_options(config)
        lengths, totals = self._lengths(mask, vals, drawn[PROMPT_LENGTH])
        x = torch.cat(vals) if vals else torch.zeros(0, device=self.device)
        loss = self._reduce("loss_agg", x, masks, lengths, totals, config["mode"], cp_size=drawn[CP_SIZE])
        fn = self._fn("get_sum_of_sample_mean", CP_UTILS, boundary="loss_agg")
        return BoundaryResult({"loss": loss}, self._after(inputs, {"values": vals}, mask), self._ref(fn))

    @implements("gae", calls=(f"{PPO_UTILS}:get_advantages_and_returns_batch",))
    def b_gae(self, inputs, config):
        """get_advantages_and_returns_batch (chunked_gae, or vanilla_gae with options/config
        gae_impl=vanilla) over right-padded response tensors; older slime: get_advantages_and_returns."""
        mask = inputs["loss_mask"].to(self.device)
        rew, val = self._tok(inputs, "token_rewards", mask), self._tok(inputs, "values", mask)
        lengths, totals = self._lengths(mask, rew)
        gamma, lam = config["gamma"], config["lam"]
        impl = config.get("gae_impl", self.options.get("gae_impl", "chunked"))
        fn = getattr(self.mods[PPO_UTILS], "get_advantages_and_returns_batch", None)
        if fn is not None:
            chunked = {"chunked": impl == "chunked"} if "chunked" in parameters(fn) else {}
            if impl != "chunked" and not chunked:
                raise Unsupported(f"{signature_text(fn)} has no switch to vanilla GAE")
            kw = bind(fn, "gae", {"total_lengths": totals, "response_lengths": lengths, "values_list": val,
                                  "rewards_list": rew, "gamma": gamma, "lambd": lam, **chunked})
            adv, ret = fn(**kw)
        else:  # older slime: one sample at a time
            fn = self._fn("get_advantages_and_returns", PPO_UTILS, boundary="gae")
            adv, ret = [], []
            for t, n, v, r in zip(totals, lengths, val, rew):
                a, g = fn(**bind(fn, "gae", {"total_len": t, "response_len": n, "values": v, "rewards": r,
                                             "gamma": gamma, "lambd": lam}))
                adv.append(a)
                ret.append(g)
        return BoundaryResult({"advantages": self._unrows(list(adv), mask), "returns": self._unrows(list(ret), mask)},
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
        order, sizes = group_layout(group_ids(group, None, n_rows))
        return order, max(sizes), len(sizes)

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
                              group: torch.Tensor | None, group_size: int | None, removed: list[bool] | None = None,
                              normalise: bool = True):
        """RolloutManager._post_process_rewards on Samples carrying their reward (and
        `remove_sample`, slime's flag for a sample that must not train), with the rows in
        slime's group-consecutive order (and put back in canonical order after)."""
        fn = self._rollout_manager(boundary)
        order, n, batches = self._groups(len(rewards), group, group_size)
        types_mod = self._import("slime.utils.types")
        args = slime_args(advantage_estimator=estimator, n_samples_per_prompt=n, rollout_batch_size=batches,
                          rewards_normalization=normalise,
                          # slime's validate_args: one sample per prompt turns std normalisation off
                          grpo_std_normalization=n > 1)
        flags = {}
        if removed is not None and any(removed):
            if "remove_sample" not in parameters(types_mod.Sample):
                raise Unsupported(f"{boundary}: slime's Sample has no remove_sample flag at this commit, so a row "
                                  f"with mask 0 has no slime counterpart")
            flags = {i: {"remove_sample": True} for i, r in enumerate(removed) if r}
        try:
            samples = [types_mod.Sample(reward=float(rewards[i]), **flags.get(i, {})) for i in order]
        except Exception as e:  # noqa: BLE001
            raise Unsupported(f"{boundary}: cannot build slime Samples at this commit: {e}") from e
        manager = types.SimpleNamespace(args=args, custom_reward_post_process_func=None)
        _raw, out = fn(manager, samples)
        back = [0.0] * len(rewards)
        for pos, i in enumerate(order):
            back[i] = float(out[pos])
        return back, fn

    @implements("reward_norm", calls=(f"{ROLLOUT}:RolloutManager._post_process_rewards",))
    def b_reward_norm(self, inputs, config):
        """RolloutManager._post_process_rewards: group mean (and std for GRPO) over consecutive
        groups of n_samples_per_prompt; eps fixed at 1e-6. A row with mask 0 is a Sample with
        remove_sample set (slime zeroes its loss mask after this call)."""
        r = inputs["rewards"].to(self.device)
        removed = [not bool(x) for x in inputs["mask"].reshape(-1).tolist()] if "mask" in inputs else None
        mean_level, std_level = config["mean_level"], config["std_level"]
        if mean_level is None:
            raise Unsupported("slime always subtracts the mean when it normalises rewards")
        if std_level not in (None, mean_level):
            raise Unsupported(f"slime divides by the std of the same group it centres on (got mean over "
                              f"{mean_level}, std over {std_level})")
        eps = config["eps"]
        if std_level is not None and eps is not None and abs(float(eps) - 1e-6) > 1e-12:
            raise Unsupported(f"slime hard-codes eps 1e-6 in its reward std normalisation (got eps={eps})")
        estimator = "grpo" if std_level else "reinforce_plus_plus_baseline"
        if mean_level == "batch":
            group, group_size = None, None
        else:
            group, group_size = inputs.get("group"), config["group_size"]
        out, fn = self._post_process_rewards("reward_norm", r.tolist(), estimator, group, group_size, removed)
        rewards = torch.tensor(out, dtype=r.dtype, device=self.device)
        return BoundaryResult({"rewards": rewards}, function=self._ref(fn))

    def _advantages_fn(self):
        return self._fn("compute_advantages_and_returns", LOSS, boundary="advantages")

    @implements("advantages", calls=(f"{LOSS}:compute_advantages_and_returns",
                                     f"{ROLLOUT}:RolloutManager._post_process_rewards",
                                     # what it calls whose collectives the drawn CP / DP ranks run
                                     f"{PPO_UTILS}:get_advantages_and_returns_batch",
                                     f"{DIST}:distributed_masked_whiten",
                                     # the CP offsets GAE's all-gather / slice and the whitening's mask cut read
                                     f"{CP_UTILS}:get_logits_and_tokens_offset_with_cp"))
    def b_advantages(self, inputs, config):
        """compute_advantages_and_returns(args, rollout_data), after slime's group reward
        normalisation for GRPO-family / REINFORCE++-baseline estimators. logged_kl is
        rollout_data["kl"] after the call: what log_rollout_data reports as rollout/kl."""
        canon = config["estimator"]
        if canon not in ESTIMATORS:
            raise Unsupported(f"slime has no estimator {canon!r} (known: {', '.join(sorted(ESTIMATORS))})")
        estimator = ESTIMATORS[canon]
        fn = self._advantages_fn()
        try:
            src = source_of(inspect.unwrap(fn))
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
        drawn = trainer_options(config)  # ADVANTAGE_OPTIONS
        lengths, totals = self._lengths(mask, zeros, drawn[PROMPT_LENGTH])
        if estimator == "ppo" and "values" not in given:
            raise ValueError("slime's ppo (gae) estimator needs `values`")

        rewards = [float(x) for x in inputs["rewards"].reshape(-1).tolist()]
        if estimator in GROUP_NORMALISED:
            rewards, _ = self._post_process_rewards("advantages", rewards, estimator, inputs.get("group"),
                                                    config["group_size"],
                                                    normalise=bool(drawn.get("rewards_normalization", True)))

        rollout_data: dict[str, Any] = {
            "log_probs": log_probs, "ref_log_probs": ref, "rewards": rewards,
            "values": given.get("values"), "response_lengths": lengths, "total_lengths": totals,
            "loss_masks": masks,
        }
        opd = {}
        if drawn.get("use_opd"):  # the reference log-probs stand in for the teacher's (opd_type sglang)
            rollout_data["teacher_log_probs"] = [x.detach().clone() for x in ref]
            opd = {"use_opd": True, "opd_type": "sglang", "opd_kl_coef": float(drawn.get("opd_kl_coef", 1.0))}
        def make_args():
            return slime_args(**opd, advantage_estimator=estimator, kl_coef=float(config["kl_coef"]),
                              kl_loss_type=self._kl_name_for(config["kl_type"],
                                                             self._fn("compute_approx_kl", PPO_UTILS, boundary="advantages")),
                              gamma=float(config["gamma"]), lambd=float(config["lam"]),
                              normalize_advantages=bool(config["normalize_advantages"]))

        # each rank's PPO token rewards, as the GAE entry receives them (a spy that calls through)
        token_rewards: dict[int, list[torch.Tensor]] = {}

        def record(arguments: dict[str, Any]) -> None:  # before the call: GAE may not change what we keep
            if arguments.get("rewards_list") is not None:
                rank = current_rank()
                token_rewards.setdefault(rank.rank if rank else 0, []).extend(
                    t.detach().clone() for t in arguments["rewards_list"])

        # data- x context-parallel ranks run at once (`parallel`): the whitening all-reduce and
        # GAE's all-gather happen mid-function; a DP rank always holds a sample (slime's global
        # batch is at least the DP size), so DP is at most the number of rows
        cp, dp = int(drawn[CP_SIZE]), min(int(drawn[DP_SIZE]), len(masks))
        args = make_args()
        watch = Watch(args)
        try:
            with spy(self.mods[LOSS], "get_advantages_and_returns_batch", before=record):
                if cp * dp == 1:
                    if args.normalize_advantages:
                        self._ensure_process_group()
                    ret = fn(args, rollout_data)
                else:
                    def rank_call(rank, batch):
                        return fn(args if rank.rank == 0 else make_args(), batch)

                    rets, rollout_data, holds = on_ranks(dp, cp, rollout_data, ADVANTAGE_PER_TOKEN, rank_call)
                    ret = rets[0]
                    if token_rewards:  # each rank's token rewards, put back like the batch
                        token_rewards = {0: scatter([token_rewards.get(r, []) for r in range(dp * cp)], holds, lengths)}
        except NotImplementedError as e:
            raise Unsupported(f"compute_advantages_and_returns: {e}") from e

        out = {"advantages": self._unrows(list(rollout_data["advantages"]), mask),
               "returns": self._unrows(list(rollout_data["returns"]), mask)}
        if "kl" in rollout_data:  # stored for logging since 2026-04 (slime PR #1856)
            out["logged_kl"] = self._unrows(list(rollout_data["kl"]), mask)
        if token_rewards:
            out["token_rewards"] = self._unrows(token_rewards[0], mask)
        # what else the call returned or left in rollout_data, and what it changed in args
        extras = {**returned({"value": ret, "rollout_data": self._whole(rollout_data, mask)}), **watch.changes()}
        return BoundaryResult(out, self._after(inputs, given, mask), self._ref(fn), extras)

    # --- importance-sampling correction -------------------------------------------------
    IS_METHODS = {"vanilla_tis": "vanilla_tis_function", "icepop": "icepop_function",
                  "off_policy_is": "off_policy_is_function"}

    @implements("is_correction", calls=(f"{LOSS}:vanilla_tis_function", f"{LOSS}:icepop_function",
                                        f"{LOSS}:off_policy_is_function", f"{PPO_UTILS}:compute_policy_loss",
                                        *ENTRY_CALLS), steps=ENTRY_STEPS)
    def b_is_correction(self, inputs, config):
        """A TIS hook (vanilla_tis_function / icepop_function / off_policy_is_function) on the
        PPO token loss, as policy_loss_function calls it; weights = the hook applied to a
        loss of ones; loss reduced with the masks the hook returns over the original
        denominators."""
        method = config["method"]
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
        lp, given_old, roll, adv = (self._tok(inputs, k, mask)
                                    for k in ("log_probs", "old_log_probs", "rollout_log_probs", "advantages"))
        # reused (the actor computed no old log-probs): the loss pass's own, detached, are the old policy's
        # and what the hook weighs (policy_loss_function's train_log_probs_for_tis); given_old is unread
        old = [x.detach() for x in lp] if trainer_options(config).get(REUSE.partition(":")[2]) else given_old
        masks = self._masks(mask)
        lengths, totals = self._lengths(mask, lp)
        clip = self._clip(config)
        flat = torch.cat(lp)
        pg_loss, _, _ = self._ppo_token_loss("is_correction", flat, torch.cat(old), torch.cat(adv), **clip)
        tis = {"use_tis": True, "tis_clip": config["tis_clip"], "tis_clip_low": config["tis_clip_low"],
               # policy_loss_function calls vanilla_tis_function unless given another hook's path
               "custom_tis_function_path": None if fname == "vanilla_tis_function" else f"{fn.__module__}.{fn.__name__}"}
        args = slime_args(**tis, eps_clip=clip["eps_clip"], eps_clip_high=clip["eps_clip_high"])
        required = {"args": args, "pg_loss": pg_loss, "rollout_log_probs": roll, "loss_masks": masks}
        optional = {"total_lengths": totals, "response_lengths": lengths}
        if "cur_log_probs" in parameters(fn):
            required["cur_log_probs"] = lp
        if "train_log_probs" in parameters(fn):
            required["train_log_probs"] = [o.detach() for o in old]
        kw = bind(fn, "is_correction", required, optional)
        weights = fn(**{**kw, "pg_loss": torch.ones_like(pg_loss.detach())})[0]
        watch = Watch(args)
        corrected, out_masks, metrics = fn(**kw)
        loss, entry, logged = self._entry_loss("is_correction", config, flat, lengths, totals, old, adv, masks, corrected,
                                       reducer_masks=list(out_masks), batch_extra={"rollout_log_probs": roll},
                                       **tis, **clip)
        res = self._loss_result(fn, entry, inputs, mask, lengths, {"weights": weights, "pg_loss": corrected},
                                {"loss": loss}, {"log_probs": lp, "old_log_probs": given_old, "rollout_log_probs": roll,
                                                 "advantages": adv})
        res.extras = {**logged, **returned({"metrics": metrics, "masks": self._whole(list(out_masks), mask)}), **watch.changes()}  # the hook's logged metrics
        return res
