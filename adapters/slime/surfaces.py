"""slime's surfaces beside the loss: log-probs and entropy from logits, the critic's values, the
metrics its loss entry logs, and its masked whitening.

`Surfaces` is mixed into `SlimeAdapter` (it uses the adapter's `_fn`, `_ref`, `device`,
`_ensure_process_group`, `_kl_name_for`). Every canonical row is handed to slime whole: one
sample per row, a one-token prompt, then all T positions as the response (masked ones
included, with the row's ``loss_mask`` as slime's ``loss_masks``), packed as slime's
Megatron forward packs a micro-batch (context-parallel size 1). Position ``s + t`` of sample
``i`` (``s`` its offset) predicts its response token ``t``, so the canonical ``logits[b, t]``
/ ``value_head[b, t]`` go there; the sample's last position predicts nothing and holds 0.

=============  =================================================================================
logprobs       ``megatron_utils.loss.get_log_probs_and_entropy`` (``args.rollout_temperature``)
values         ``megatron_utils.loss.get_values`` (slime passes ``apply_temperature=False``)
metrics        ``loss_function`` -> ``policy_loss_function`` on logits whose log-softmax is the
               canonical log-probs (`entry.logits_for`), its logging dict reduced by
               ``reduce_train_step_metrics`` (observability.train_metric_utils, cp_utils before) as
               ``train_one_step`` does: ``pg_clipfrac`` -> clipfrac, ``ppo_kl`` -> approx_kl,
               ``kl_loss`` (``--use-kl-loss``). metric_agg token-mean is
               ``--calculate-per-token-loss``; seq-mean-token-mean its per-sample mean over the
               step's samples.
masked_reduce  ``utils.distributed_utils.distributed_masked_whiten`` (op whiten over the batch, on
               a one-rank process group), as ``compute_advantages_and_returns`` whitens
               advantages; slime's other reductions are its loss reducer (boundary loss_agg).
=============  =================================================================================
"""

from __future__ import annotations

from typing import Any

import torch

from sentinel.adapters.binding import bind
from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.adapters.loading import module_exists
from sentinel.adapters.options import trainer_options
from sentinel.errors import Unsupported

from .conventions import CP_UTILS, LOSS, MICRO_BATCHES, PPO_UTILS, slime_args
from .entry import logits_for

DIST = "slime.utils.distributed_utils"
METRICS = "slime.observability.train_metric_utils"
_LOGGED = {"pg_clipfrac": "clipfrac", "ppo_kl": "approx_kl", "kl_loss": "kl_loss"}


def _pack(per_position: torch.Tensor) -> torch.Tensor:
    """[B, T, ...] -> slime's packed [1, B * (T + 1), ...]: each row then one position that
    predicts nothing (0)."""
    tail = torch.zeros_like(per_position[:, :1])
    return torch.cat([per_position, tail], dim=1).reshape(1, -1, *per_position.shape[2:])


class Surfaces:
    """slime's log-prob, value, metric and whitening paths, for `SlimeAdapter`."""

    def _samples(self, batch: int, width: int, tokens: torch.Tensor | None = None):
        """(unconcat_tokens, total_lengths, response_lengths): a one-token prompt and the row."""
        rows = tokens if tokens is not None else torch.zeros(batch, width, dtype=torch.long, device=self.device)
        prompt = torch.zeros(1, dtype=torch.long, device=self.device)
        return [torch.cat([prompt, r.long()]) for r in rows], [width + 1] * batch, [width] * batch

    def _module(self, name: str, boundary: str):
        """slime's module `name`: `Unsupported` where this commit has no such file; one that is
        there but does not import is a load error (its message names the fix), never unsupported."""
        if not module_exists(self.root, name):
            raise Unsupported(f"slime has no module {name} at {self.facts.get('version', 'this commit')} "
                              f"(boundary {boundary!r})")
        return self._import(name)

    @staticmethod
    def _per_sample(out: Any, key: str) -> list[torch.Tensor]:
        res = out[1] if isinstance(out, tuple) else out  # (empty, dict) since 2025; a dict before
        return list(res[key])

    @staticmethod
    def _nucleus(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[list[list[int]], list[list[int]]]:
        """(top_p_token_ids, top_p_token_offsets) per sample, as the rollout engine records them for
        slime's top-p replay: at each response position the smallest set of tokens, most probable
        first, whose probability (at the rollout temperature) reaches `top_p` (the rollout's data,
        which no slime function computes: the adapter stands in for the engine)."""
        probs = torch.softmax(logits.detach().double() / temperature, dim=-1)
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = (sorted_p.cumsum(-1) - sorted_p) < top_p  # the most probable token always stays
        ids, offsets = [], []
        for row_keep, row_order in zip(keep, order):
            flat, offs = [], [0]
            for k, o in zip(row_keep, row_order):
                flat += o[k].tolist()
                offs.append(len(flat))
            ids.append(flat)
            offsets.append(offs)
        return ids, offsets

    @implements("logprobs", calls=(f"{LOSS}:get_log_probs_and_entropy",))
    def b_logprobs(self, inputs, config):
        logits = inputs["logits"].to(self.device)
        b, t, _ = logits.shape
        fn = self._fn("get_log_probs_and_entropy", LOSS, boundary="logprobs")
        packed = _pack(logits.float())  # slime asserts float32 logits
        toks, totals, lengths = self._samples(b, t, inputs["tokens"].to(self.device))
        drawn = trainer_options(config)
        top_p = float(drawn.get("rollout_top_p", 1.0))
        args = slime_args(rollout_temperature=float(config["temperature"]), rollout_top_p=top_p)
        optional: dict[str, Any] = {"with_entropy": bool(drawn.get("with_entropy", True))}
        if top_p != 1.0:
            ids, offsets = self._nucleus(logits, float(config["temperature"]), top_p)
            optional.update(top_p_token_ids=ids, top_p_token_offsets=offsets)
        self._ensure_process_group()
        out = fn(**bind(fn, "logprobs", {"logits": packed, "args": args, "unconcat_tokens": toks,
                                         "total_lengths": totals, "response_lengths": lengths}, optional,
                        absent={"top_p_token_ids": None, "top_p_token_offsets": None}))  # no top-p replay yet
        with_entropy = optional["with_entropy"]
        outputs = {"log_probs": torch.stack(self._per_sample(out, "log_probs"))}
        if with_entropy:
            outputs["entropy"] = torch.stack(self._per_sample(out, "entropy"))
        after = packed.detach()[0].reshape(b, t + 1, -1)[:, :t].to(logits.dtype)  # what slime got, as it is now
        return BoundaryResult(outputs, {"logits": after}, self._ref(fn))

    @implements("values", calls=(f"{LOSS}:get_values",))
    def b_values(self, inputs, config):
        head = inputs["value_head"].to(self.device)
        b, t = head.shape
        fn = self._fn("get_values", LOSS, boundary="values")
        packed = _pack(head.float()[..., None])  # the value head's [1, N, 1] output
        toks, totals, lengths = self._samples(b, t)
        args = slime_args(rollout_temperature=float(config["temperature"]))
        out = fn(**bind(fn, "values", {"logits": packed, "args": args, "unconcat_tokens": toks,
                                       "total_lengths": totals, "response_lengths": lengths}))
        # Until 843c94e (2025-09-19) slime handed each sample's values on as [T, 1], the value
        # head's trailing dim kept; later ones squeeze it: the same values either way.
        values = torch.stack([v.squeeze(-1) if v.dim() == 2 and v.shape[-1] == 1 else v
                              for v in self._per_sample(out, "values")])
        after = packed.detach()[0, :, 0].reshape(b, t + 1)[:, :t].to(head.dtype)
        return BoundaryResult({"values": values}, {"value_head": after}, self._ref(fn))

    @implements("metrics", calls=(f"{LOSS}:loss_function", f"{LOSS}:policy_loss_function",
                                  f"{METRICS}:reduce_train_step_metrics"))
    def b_metrics(self, inputs, config):
        mask = inputs["loss_mask"].to(self.device)
        b, t = mask.shape
        per_token = config["metric_agg"] == "token-mean"
        entry = self._fn("loss_function", LOSS, boundary="metrics")
        reduce = self._step_reduction()
        lp = inputs["log_probs"].to(self.device)
        options: dict[str, Any] = dict(eps_clip=config["eps_clip"], eps_clip_high=config["eps_clip_high"],
                                       eps_clip_c=config["eps_clip_c"])
        if "ref_log_probs" in inputs:
            kl_name = self._kl_name_for(config["kl_type"], self._fn("compute_approx_kl", PPO_UTILS, boundary="metrics"))
            options.update(use_kl_loss=True, kl_loss_type=kl_name)
        args = slime_args(calculate_per_token_loss=per_token, global_batch_size=b, **options)
        self._ensure_process_group()
        # the step's rows in micro-batches, as train_one_step hands them to loss_function one by one
        parts = torch.arange(b).tensor_split(min(int(config.get(MICRO_BATCHES, 1)), b))
        names = {"advantages": "advantages", "log_probs": "old_log_probs", "ref_log_probs": "ref_log_probs"}
        logged = []
        for rows in parts:
            n = len(rows)
            batch: dict[str, Any] = {k: list(inputs[ours][rows].to(self.device)) for k, ours in names.items()
                                     if ours in inputs}
            masks = [m.to(torch.int32) for m in mask[rows]]
            toks, totals, lengths = self._samples(n, t)
            sums = torch.stack([m.sum() for m in masks]).float()  # one sample per rollout
            batch.update(loss_masks=masks, unconcat_tokens=toks, total_lengths=totals, response_lengths=lengths,
                         rollout_mask_sums=sums, group_mask_sums=sums)
            logits = _pack(logits_for(lp[rows].reshape(-1)).reshape(n, t, 2))
            required = {"args": args, "batch": batch, "num_microbatches": len(parts), "logits": logits}
            logged.append(entry(**bind(entry, "metrics", required, {"step_global_batch_size": b}))[2])
        import torch.distributed as dist  # the one-rank group _ensure_process_group made

        reduced = reduce(**bind(reduce, "metrics", {"losses_reduced": logged, "dp_with_cp_group": dist.group.WORLD},
                                {"calculate_per_token_loss": per_token, "step_global_batch_size": b, "cp_size": 1}))
        outputs = {ours: torch.as_tensor(float(reduced[k])) for k, ours in _LOGGED.items() if k in reduced}
        return BoundaryResult(outputs, function=self._ref(entry).with_also(self._ref(reduce)))

    def _step_reduction(self):
        """slime's reduce_train_step_metrics: in observability.train_metric_utils since 624b824a8 (#2298),
        in megatron_utils.cp_utils from 7405851 (#1933); before it train_one_step reduced inline (nothing
        to call: unsupported)."""
        for name in (METRICS, CP_UTILS):
            fn = getattr(self._import(name), "reduce_train_step_metrics", None) if module_exists(self.root, name) else None
            if callable(fn):
                return fn
        raise Unsupported(f"slime {self.facts.get('version', 'at this commit')} reduces its logged metrics inline in "
                          f"train_one_step (no reduce_train_step_metrics in {METRICS} or {CP_UTILS})")

    @implements("masked_reduce", calls=(f"{DIST}:distributed_masked_whiten",))
    def b_masked_reduce(self, inputs, config):
        if config["op"] != "whiten" or config["dim"] != "all":
            raise Unsupported("slime's only standalone masked reduction is distributed_masked_whiten over the batch; its "
                              "masked means and sums are the loss reducer get_sum_of_sample_mean (boundary loss_agg)")
        if not config["unbiased"]:
            raise Unsupported("slime's distributed_masked_whiten always applies Bessel's correction (two or more values)")
        fn = getattr(self._module(DIST, "masked_reduce"), "distributed_masked_whiten", None)
        if not callable(fn):
            raise Unsupported(f"slime {self.facts.get('version')} has no distributed_masked_whiten")
        values, mask = inputs["values"].to(self.device), inputs["loss_mask"].to(self.device)
        self._ensure_process_group()
        # as compute_advantages_and_returns: the concatenated tokens and their int masks
        kw = bind(fn, "masked_reduce", {"values": values.reshape(-1), "mask": mask.to(torch.int32).reshape(-1)},
                  {"shift_mean": None if config["shift_mean"] else False,
                   "epsilon": None if config["eps"] is None else float(config["eps"])})
        return BoundaryResult({"whitened": fn(**kw).reshape(values.shape)}, function=self._ref(fn))
