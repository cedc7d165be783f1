"""The loss slime trains on, reached through its own Megatron loss entry.

slime's reduced policy loss comes from ``loss_function`` -> ``policy_loss_function`` on one
packed micro-batch whose logits are built so that their log-softmax at each response token is
the canonical log-prob (`logits_for`: a two-token vocabulary, a one-token prompt per sample),
divided by the normaliser it hands Megatron. The same loss composed from slime's per-token
functions (`EntryLoss._reduce`) lends its gradient where softmax saturates (`GradAt`).

Two steps of the chain stay the adapter's, each a `trainer_step` with its reason: Megatron's
division by the normaliser (`megatron_normalise`), and loss_function's scaling of the reducer
called directly (`loss_function_scale`: loss_agg's values, and the composed loss behind `GradAt`).

`EntryLoss` is mixed into `SlimeAdapter`; it uses the adapter's lookups (`_fn`, `_ref`) and
its canonical <-> slime translation (`_back`, `_after`).
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

import torch

from sentinel.adapters.binding import bind, parameters, signature_text
from sentinel.adapters.composing import trainer_step
from sentinel.adapters.contract import BoundaryResult, FunctionRef
from sentinel.adapters.loading import source_of
from sentinel.adapters.observables import returned
from sentinel.adapters.options import trainer_options
from sentinel.adapters.spying import composes
from sentinel.errors import Unsupported

from .context_parallel import as_rank, cp_all_reduce, zigzag_indices
from .conventions import CP_UTILS, LOSS, LOSS_AGG, PPO_UTILS, REUSE, slime_args


@composes
def logits_for(lp: torch.Tensor) -> torch.Tensor:
    """``[n, 2]`` float32 logits whose log-softmax at token 0 is exactly ``lp`` (token 1 takes
    the rest of the mass), so slime's own log-prob and entropy code runs on them.

    Gradient: d log_softmax / d logit = 1 - p, so the target logit is a straight-through
    ``d + (lp - d) / (1 - p)``: its value is ``d`` and the log-prob's gradient reaches ``lp``
    unscaled. Where p == 1 in float32 (lp == 0) softmax saturates and nothing flows; the
    caller supplies those tokens' gradient (`GradAt`). Non-finite log-probs pass as they are."""
    if lp.dtype in (torch.bfloat16, torch.float16):  # the route's own arithmetic in float32: slime's
        lp = lp.float()  # log-prob code sees float32 logits, so rounding here would be the adapter's, not slime's
    d = lp.detach()
    p = d.exp()
    scale = torch.where(p < 1, 1 / (1 - p).clamp_min(1e-30), torch.zeros_like(p))
    target = torch.where(torch.isfinite(d), d + (lp - d) * scale, d)
    rest = torch.where(d < 0, torch.log(-torch.expm1(d.clamp_max(-1e-30))), torch.full_like(d, -1e4))
    return torch.stack([target, rest.clamp_min(-1e4)], dim=-1).float()


@composes
def packed_logits(flat: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """``[1, tokens, 2]`` logits of one packed micro-batch from the concatenated log-probs
    `flat`: per sample a one-token prompt, then `logits_for` its `lengths[i]` log-probs (the
    last token predicts nothing)."""
    pieces = []
    for part in flat.split(lengths):
        pieces += [logits_for(part), torch.zeros(1, 2, device=flat.device)]
    return torch.cat(pieces)[None] if pieces else torch.zeros(1, 0, 2, device=flat.device)


@trainer_step("Megatron's forward_backward_func divides the loss loss_function returns by the normaliser "
              "beside it (num_tokens with --calculate-per-token-loss, else 1), outside slime, after the "
              "pipeline schedule: no slime function runs that division")
def megatron_normalise(loss: torch.Tensor, normaliser: Any) -> torch.Tensor:
    return loss / normaliser


@trainer_step("loss_function's scaling (the step's sample count, or Megatron's num_tokens) of "
              "get_sum_of_sample_mean called directly. loss_agg: loss_function takes per-token values only as "
              "--loss-type custom_loss, imported by module path, which an exported validate.py (torch and the "
              "trainer only) cannot import; the composed loss whose gradient GradAt lends where the logits "
              "route saturates (never its value) reduces a TIS / rejection hook's masks, which "
              "policy_loss_function builds inside and loss_function cannot be handed")
def loss_function_scale(total: torch.Tensor, masks: list[torch.Tensor], per_token: bool) -> torch.Tensor:
    if per_token:
        return total / sum(torch.clamp_min(m.sum(), 1) for m in masks)
    return total / max(len(masks), 1)


def logged(log: Any) -> dict[str, torch.Tensor]:
    """loss_function's logging dict as observables (``returned:logged.<metric>``): the metrics
    policy_loss_function reports (pg_clipfrac, ppo_kl, ois, kl_loss, ...), named by its ``keys``
    where it pairs them with a ``values`` tensor, and the metrics together (``logged.values``: a
    metric dropped or added changes its length, which a comparison by name would pass over). The
    leading value is Megatron's reporting count, not a metric: left out (slime 7405851 made it a 0
    placeholder without --calculate-per-token-loss, the loss and every metric unchanged)."""
    if isinstance(log, dict) and isinstance(log.get("keys"), list) and isinstance(log.get("values"), torch.Tensor):
        keys, values = log["keys"], log["values"].reshape(-1)
        metrics = values[values.numel() - len(keys):]
        log = {**dict(zip(keys, metrics)), "values": metrics}
    return returned({"logged": log})


class GradAt(torch.autograd.Function):
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



class EntryLoss:
    """slime's loss reduction and loss entry, for the loss boundaries of `SlimeAdapter`."""

    def _reduce(self, boundary: str, x: torch.Tensor, masks: list[torch.Tensor], lengths: list[int],
                totals: list[int], mode: str, reducer_masks: list[torch.Tensor] | None = None,
                cp_size: int = 1) -> torch.Tensor:
        """slime's loss reduction for one micro-batch.

        get_sum_of_sample_mean gives a sum over samples of a per-sample mean (or, with
        calculate_per_token_loss, a token sum); loss_function then divides by the step's
        sample count (one micro-batch, DP = 1) or Megatron divides by num_tokens =
        sum_i max(loss_mask_i.sum(), 1). `reducer_masks` are the masks a TIS / rejection
        function returned; denominators stay the original ones (policy_loss_function).
        `cp_size` > 1: each context-parallel rank in turn gets its zigzag share of `x`
        (`context_parallel`), the ranks' results summed as the group's all-reduce does."""
        if mode not in LOSS_AGG:
            raise Unsupported(f"slime has no loss aggregation {mode!r} (it offers per-sample mean "
                              f"[seq-mean-token-mean] and --calculate-per-token-loss [token-mean])")
        fn = self._fn("get_sum_of_sample_mean", CP_UTILS, boundary=boundary)
        per_token = mode == "token-mean"
        use = reducer_masks if reducer_masks is not None else masks
        given: dict[str, Any] = {"total_lengths": totals, "response_lengths": lengths, "loss_masks": use,
                                 "calculate_per_token_loss": per_token}

        def on_rank(local: list[torch.Tensor], flat: torch.Tensor) -> torch.Tensor:
            if "xs" in parameters(fn):  # slime before 2025-07: this rank's per-sample tensors (read under CP > 1)
                given["xs"] = local
            kw = bind(fn, boundary, given)
            if reducer_masks is not None and "sample_denoms" in parameters(fn):
                kw["sample_denoms"] = [m.sum() for m in masks]
            total = fn(**kw)(flat)
            if not isinstance(total, torch.Tensor):  # sum([]) of an empty batch
                total = torch.as_tensor(float(total), device=self.device)
            return total

        parts = list(x.split(lengths, dim=0)) if lengths else []
        if cp_size == 1:
            return loss_function_scale(on_rank(parts, x), masks, per_token)
        partials = []
        for rank in range(cp_size):
            local = [p[torch.as_tensor(zigzag_indices(t, n, cp_size, rank), dtype=torch.long, device=p.device)]
                     for p, t, n in zip(parts, totals, lengths)]
            with as_rank(rank, cp_size):
                partials.append(on_rank(local, torch.cat(local) if local else x))
        return loss_function_scale(cp_all_reduce(partials), masks, per_token)

    def _entry_loss(self, boundary: str, config: dict[str, Any], flat: torch.Tensor, lengths: list[int],
                    totals: list[int], old: list[torch.Tensor], adv: list[torch.Tensor], masks: list[torch.Tensor],
                    pg_loss: torch.Tensor, reducer_masks: list[torch.Tensor] | None = None,
                    batch_extra: dict[str, Any] | None = None,
                    **options: Any) -> tuple[torch.Tensor, tuple[FunctionRef, ...], dict[str, torch.Tensor]]:
        """The loss slime trains on: ``loss_function`` -> ``policy_loss_function`` on one packed
        micro-batch (a one-token prompt per sample, logits from `_logits_for`), divided by the
        normaliser it hands Megatron, and the metrics loss_function logs beside it (`logged`).
        The same loss composed from the per-token `pg_loss` (`_reduce`) lends its gradient to
        tokens with log-prob 0 (see `_logits_for`), never its value. `flat`: the concatenated log-probs `pg_loss` was computed from;
        `batch_extra`: more ``batch`` keys (``rollout_log_probs`` for TIS); `options`: slime ``args``."""
        mode = config["loss_agg"]
        composed = self._reduce(boundary, pg_loss, masks, lengths, totals, mode, reducer_masks)
        drawn = trainer_options(config)  # LOSS_OPTIONS, set on args where policy_loss_function reads them
        batch_extra = dict(batch_extra or {})
        if drawn.get("use_kl_loss"):  # the behaviour policy stands in for the reference model
            batch_extra.setdefault("ref_log_probs", [o.detach() for o in old])
        if drawn.get("use_rollout_logprobs") or drawn.get("get_mismatch_metrics"):
            batch_extra.setdefault("rollout_log_probs", [o.detach() for o in old])
        reuse = drawn.pop(REUSE.partition(":")[2], False)  # the actor's choice, not an args option
        if reuse and not _old_optional(self._fn("policy_loss_function", LOSS, boundary=boundary)):
            raise Unsupported("can_reuse_log_probs_in_loss: this slime's actor always computes the old log-probs (its "
                              "policy_loss_function reads batch['log_probs'] unconditionally: the reuse arrived in "
                              "bf9b1a3, slime #1897)")
        options = {**drawn, **options}
        entry = self._fn("loss_function", LOSS, boundary=boundary)
        tokens = [torch.zeros(n + 1, dtype=torch.long, device=self.device) for n in lengths]
        logits = packed_logits(flat, list(lengths))
        batch = {"advantages": adv, "log_probs": list(old), "unconcat_tokens": tokens,
                 "total_lengths": [t.numel() for t in tokens], "response_lengths": list(lengths),
                 "loss_masks": masks, **(batch_extra or {})}
        if reuse:  # the actor computed no old log-probs: the loss pass's own stand in (detached)
            del batch["log_probs"]
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
        kw = bind(entry, boundary, required)
        self._ensure_process_group()  # before 2026-06-29 slime's entropy all-reduces unconditionally
        out = entry(**kw)
        loss, normaliser = out[:2]
        metrics = logged(out[2]) if len(out) > 2 else {}
        loss = megatron_normalise(loss, normaliser)
        saturated = (flat.detach().exp() >= 1) & torch.isfinite(flat.detach())
        if flat.requires_grad and composed.requires_grad and bool(saturated.any()):
            (g,) = torch.autograd.grad(composed, flat, retain_graph=True, allow_unused=True)
            if g is not None:
                loss = loss + GradAt.apply(flat, torch.where(saturated, g, torch.zeros_like(g)))
        return loss, (self._ref(entry), self._ref(self._fn("policy_loss_function", LOSS, boundary=boundary))), metrics

    def _policy_loss_fn(self, boundary: str):
        return self._fn("compute_policy_loss", PPO_UTILS, boundary=boundary)

    @staticmethod
    def _clip(config: dict[str, Any]) -> dict[str, Any]:
        """slime's clip args from a scenario config (eps_clip_c: only where the boundary has it)."""
        return {"eps_clip": config["eps_clip"], "eps_clip_high": config["eps_clip_high"],
                "eps_clip_c": config.get("eps_clip_c")}

    def _loss_result(self, fn: Callable, entry: tuple[FunctionRef, ...], inputs: dict[str, torch.Tensor],
                     mask: torch.Tensor, lengths: list[int], per_token: dict[str, torch.Tensor],
                     scalars: dict[str, Any], given: dict[str, list[torch.Tensor]],
                     extras: dict[str, torch.Tensor] | None = None) -> BoundaryResult:
        """A loss boundary's result: per-token outputs back in [B, T], the state of what slime
        got, the functions called (`fn`, then the loss entry) and `extras` (what the entry logged)."""
        return BoundaryResult({**{k: self._back(v, lengths, mask) for k, v in per_token.items()}, **scalars},
                              self._after(inputs, given, mask), self._ref(fn).with_also(*entry), extras or {})

    def _ppo_token_loss(self, boundary: str, lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor,
                        eps_clip: float, eps_clip_high: float, eps_clip_c: float | None,
                        ppo_kl: torch.Tensor | None = None):
        """compute_policy_loss on concatenated tokens (ppo_kl = old - new, as policy_loss_function;
        or the given `ppo_kl`, GSPO's sequence KL)."""
        fn = self._policy_loss_fn(boundary)
        params = parameters(fn)
        if "ppo_kl" in params:
            kw = bind(fn, boundary, {"ppo_kl": old - lp if ppo_kl is None else ppo_kl, "advantages": adv,
                                             "eps_clip": eps_clip, "eps_clip_high": eps_clip_high}, {"eps_clip_c": eps_clip_c})
        elif ppo_kl is not None:
            raise Unsupported(f"importance_sampling_level sequence: {signature_text(fn)} takes no ppo_kl "
                              f"(slime added GSPO in 2025-07, c7bb60ce4)")
        else:  # before GSPO support (2025-07): compute_policy_loss(log_probs, old_logprobs, ...)
            kw = bind(fn, boundary, {"log_probs": lp, "old_logprobs": old, "advantages": adv,
                                             "eps_clip": eps_clip, "eps_clip_high": eps_clip_high},
                              {"eps_clip_c": eps_clip_c}, aliases={"old_logprobs": ("old_log_probs",)})
        out = fn(**kw)
        return out[0], out[1], fn

    def _ensure_process_group(self) -> None:
        """distributed_masked_whiten all-reduces unconditionally: give it a one-rank gloo group
        (created lazily, in the forked job process on CPU)."""
        import torch.distributed as dist

        if not dist.is_available():
            raise Unsupported("normalize_advantages needs torch.distributed, which this torch lacks")
        if not dist.is_initialized():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def _old_optional(fn: Callable) -> bool:
    """Whether `fn` (policy_loss_function) runs without the batch's old log-probs: it takes them with
    batch.get("log_probs") and falls back on the current ones. Unreadable source: assumed so."""
    try:
        src = source_of(inspect.unwrap(fn))
    except (OSError, TypeError):
        return True
    return re.search(r"""batch\.get\(\s*["']log_probs["']""", src) is not None
