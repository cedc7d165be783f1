"""The bundled reference target: the correct loss-path math, readable top to bottom.

Written cleanrl-style: small functions, each naming the paper or PR its formula comes
from. Layout is canonical (see sentinel/boundaries.py): token tensors ``[B, T]``, row
tensors ``[B]``, ``loss_mask`` 1 where a token is trained. Pure torch.

Two rules hold everywhere:
- values at masked positions never reach a result: they are selected away with
  ``torch.where`` (multiplying by the mask would turn a NaN there into NaN, and its
  gradient into NaN too);
- no input tensor is ever written to.

`REFERENCE_OPS` at the bottom is the table of these functions through which the reference
target's adapter (`adapter.ReferenceAdapter`) calls them. A plant replaces one entry of it
with a known-wrong variant (`plants.py`: one record per plant, with its code, the invariant
families it should trip and the boundary a hunt finds it on; torch-free to list, so the CLI
checks a plant's name without torch).

Layers: this module imports neither of those; the bugs build on this math, and the
adapter on both.
"""

from __future__ import annotations

import torch

# --- masked helpers ---------------------------------------------------------------------

def keep(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x where mask, 0 elsewhere (selection, so NaN/Inf at masked positions cannot leak)."""
    return torch.where(mask.bool(), x, torch.zeros_like(x))


def seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Valid-token mean of each row, [B] (0 for a row with no valid token)."""
    return keep(x, mask).sum(-1) / mask.bool().sum(-1).clamp_min(1)


def last_valid(mask: torch.Tensor) -> torch.Tensor:
    """One-hot [B, T] of each row's last valid token (all zeros for an empty row)."""
    m = mask.bool()
    pos = torch.arange(m.shape[-1], device=m.device).expand_as(m)
    last = torch.where(m, pos, torch.full_like(pos, -1)).amax(-1, keepdim=True)
    return m & (pos == last)


# --- policy losses ----------------------------------------------------------------------

def ppo_policy_loss(log_probs, old_log_probs, advantages, eps_clip=0.2, eps_clip_high=None, eps_clip_c=None):
    """PPO clipped surrogate (arXiv 1707.06347 eq. 7), asymmetric clip-higher (DAPO,
    arXiv 2503.14476) and dual clip on A<0 (arXiv 1912.09729). Returns (loss, clipfrac)."""
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = torch.exp(log_probs - old_log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_clip, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    clipfrac = (clipped > unclipped).float()
    if eps_clip_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * eps_clip_c), loss)
    return loss, clipfrac


def cispo_loss(log_probs, old_log_probs, advantages, eps_clip=1.0, eps_clip_high=0.28):
    """CISPO (MiniMax-M1, arXiv 2506.13585 eq. 4): -sg(clip(r)) * A * log pi. Returns (loss, clipfrac)."""
    ratio = torch.exp(log_probs - old_log_probs)
    weight = ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip_high).detach()
    clipfrac = ((ratio < 1.0 - eps_clip) | (ratio > 1.0 + eps_clip_high)).float()
    return -weight * advantages * log_probs, clipfrac


def opsm_mask(log_probs, old_log_probs, advantages, loss_mask, opsm_delta=0.1):
    """Off-policy sequence masking (DeepSeek-V3.2; slime PR https://github.com/THUDM/slime/pull/1917):
    reject a whole sequence when its valid-token KL > delta and its mean advantage < 0.
    `old_log_probs` is the policy that sampled the sequence (the inference engine's log-probs
    where they are kept: the adapter passes rollout_log_probs then, as TRL's OPSM reads its
    `sampling_per_token_logps`).
    Returns (mask [B, T], clipfrac = sum over rows of rejected valid / valid tokens)."""
    seq_kl = seq_mean(old_log_probs - log_probs, loss_mask)
    seq_adv = seq_mean(advantages, loss_mask)
    rejected = (seq_adv < 0) & (seq_kl > opsm_delta)
    mask = (~rejected).float()[:, None].expand_as(log_probs).contiguous()
    return mask, opsm_clipfrac(mask, loss_mask)


def opsm_clipfrac(mask, loss_mask):
    """Sum over sequences of the rejected share of their valid tokens (slime's accumulation)."""
    m = loss_mask.bool()
    return ((m & (mask == 0)).sum(-1) / m.sum(-1).clamp_min(1)).sum().float()


def gspo_seq_kl(log_probs, old_log_probs, loss_mask):
    """GSPO (arXiv 2507.18071 eq. 7): log s_i = mean_t(log pi - log pi_old) over valid tokens;
    the sequence KL is its negative, broadcast to every token of the row."""
    return seq_mean(old_log_probs - log_probs, loss_mask)[:, None].expand_as(log_probs).contiguous()


def gspo_token_log_ratio(log_probs, old_log_probs, loss_mask):
    """GSPO-token (arXiv 2507.18071 eq. 13): per token, sg[log s_i] + log pi_t - sg[log pi_t],
    where log s_i is the valid-token mean of log pi - log pi_old. Its value is the sequence
    log-ratio at every token; its gradient reaches log pi_t alone. With one advantage per
    sequence this equals GSPO's sequence objective in value and gradient."""
    log_s = seq_mean(log_probs - old_log_probs, loss_mask).detach()[:, None]
    return log_s + (log_probs - log_probs.detach())


def decoupled_weight(proximal_log_probs, behaviour_log_probs):
    """Decoupled PPO (AReaL, arXiv 2505.24298 eq. 5): the clipped objective is taken against
    the proximal policy and reweighted by sg[pi_prox / pi_behav], which carries no gradient."""
    return torch.exp(proximal_log_probs - behaviour_log_probs).detach()


def decoupled_loss(loss, weight):
    """Decoupled PPO (arXiv 2505.24298 eq. 5): the per-token objective clipped against the
    proximal policy, times the behaviour weight (`decoupled_weight`)."""
    return loss * weight


# --- KL to the reference policy ---------------------------------------------------------

def kl_estimator(log_probs, ref_log_probs, loss_mask, kl_type="k1"):
    """k1, k2, k3 estimators of KL(pi || ref) (Schulman, http://joschu.net/blog/kl-approx.html),
    on log r = log pi - log ref; low_var_kl is k3 clamped to [-10, 10]; 0 at masked tokens.

    A name ending in "+" is straight-through (verl PR 2953, `k1+` / `k3+`): the value of the named
    estimator, the gradient of k2. For tokens drawn from pi, grad KL(pi || ref) = E_pi[log r *
    grad log pi] (the score-function form; E_pi[grad log pi] = 0). grad k2 = log r * grad log pi
    is that integrand, while grad k1 = grad log pi has mean 0 and grad k3 = (1 - ref / pi) *
    grad log pi has mean grad KL(ref || pi), the reverse KL. So k1 and k3 estimate the value
    without bias and k2's gradient estimates the gradient: value.detach() + k2 - k2.detach()."""
    if kl_type.endswith("+"):
        value = kl_estimator(log_probs, ref_log_probs, loss_mask, kl_type[:-1])
        k2 = kl_estimator(log_probs, ref_log_probs, loss_mask, "k2")
        return value.detach() + (k2 - k2.detach())
    # in at least fp32: log-probs from a bf16 forward differ by less than their own rounding, and
    # exp(-r) - 1 + r cancels to 0 in bf16 (the precision family's kl scenarios)
    wide = torch.promote_types(torch.promote_types(log_probs.dtype, ref_log_probs.dtype), torch.float32)
    log_probs, ref_log_probs = log_probs.to(wide), ref_log_probs.to(wide)  # the caller's own when already wide
    log_ratio = keep(log_probs - ref_log_probs, loss_mask)
    if kl_type == "k1":
        kl = log_ratio
    elif kl_type == "k2":
        kl = 0.5 * log_ratio ** 2
    elif kl_type in ("k3", "low_var_kl"):
        kl = torch.exp(-log_ratio) - 1.0 + log_ratio
        if kl_type == "low_var_kl":
            kl = kl.clamp(-10.0, 10.0)
    else:
        raise ValueError(f"unknown kl_type {kl_type!r} (k1, k2, k3, low_var_kl, each with + for straight-through)")
    return keep(kl, loss_mask)


# --- advantage estimators ---------------------------------------------------------------

def gae(token_rewards, values, loss_mask, gamma=1.0, lam=1.0):
    """GAE (arXiv 1506.02438 eq. 16) over valid tokens only: a masked token is skipped, so
    each valid token bootstraps from the next valid one. Returns (advantages, returns)."""
    m = loss_mask.bool()
    zero = torch.zeros_like(token_rewards[:, 0])
    next_value, next_adv, advs = zero, zero, []
    for t in reversed(range(token_rewards.shape[1])):
        r, v = keep(token_rewards[:, t], m[:, t]), keep(values[:, t], m[:, t])
        a = r + gamma * next_value - v + gamma * lam * next_adv
        next_value = torch.where(m[:, t], v, next_value)
        next_adv = torch.where(m[:, t], a, next_adv)
        advs.append(keep(a, m[:, t]))
    advantages = torch.stack(advs[::-1], dim=1)
    return advantages, keep(advantages + values, m)


def group_index(group, group_size, batch):
    """Row -> group number 0..K-1: from group ids (any sizes, any order), else contiguous
    chunks of group_size, else one group for the batch."""
    if group is not None:
        return torch.unique(group, return_inverse=True)[1]
    if group_size:
        return torch.arange(batch) // int(group_size)
    return torch.zeros(batch, dtype=torch.long)


def _stats(x, keep_rows, index):
    """Per-row mean and unbiased std of x over the kept rows of the row's group."""
    onehot = (index[:, None] == torch.arange(int(index.max()) + 1, device=x.device)) & keep_rows[:, None]
    n = onehot.sum(0)
    xs = torch.where(onehot, x[:, None], torch.zeros_like(x)[:, None])
    mean = xs.sum(0) / n.clamp_min(1)
    var = torch.where(onehot, (x[:, None] - mean) ** 2, torch.zeros_like(xs)).sum(0) / (n - 1).clamp_min(1)
    return mean[index], var.sqrt()[index]


def reward_norm(rewards, keep_rows, index, mean_level="batch", std_level="batch", eps=1e-5):
    """Scalar reward normalisation (GRPO, arXiv 2402.03300 sec. 4.1.2; AReaL PR
    https://github.com/areal-project/AReaL/pull/1351): statistics over kept rows only,
    per group or per batch; dropped rows come out 0."""
    out = rewards
    for level, use_std in ((mean_level, False), (std_level, True)):
        if level is None:
            continue
        idx = index if level == "group" else torch.zeros_like(index)
        mean, std = _stats(rewards, keep_rows, idx)
        out = out / (std + eps) if use_std else out - mean
    return keep(out, keep_rows)


def task_rewards(rewards, keep_rows, index, norm, reward_clip=None, normalize=reward_norm):
    """Clip, then normalise over the rows that keep their reward, then zero the others
    (no-EOS rows; AReaL PR https://github.com/areal-project/AReaL/pull/1351)."""
    r = rewards if reward_clip is None else rewards.clamp(-reward_clip, reward_clip)
    if norm:
        r = normalize(r, keep_rows, index, norm.get("mean_level", "batch"), norm.get("std_level", "batch"),
                      norm.get("eps", 1e-5))
    return keep(r, keep_rows)


def shape_token_rewards(kl, rewards, loss_mask, kl_coef):
    """PPO token rewards (InstructGPT, arXiv 2203.02155 eq. 2): -kl_coef * KL at each valid
    token plus the scalar reward at the last one; built out of place so the KL stays raw
    (slime PR https://github.com/THUDM/slime/pull/2114)."""
    shaped = keep(-kl_coef * kl, loss_mask)
    return shaped + torch.where(last_valid(loss_mask), rewards[:, None], torch.zeros_like(shaped))


def whiten(x, loss_mask, eps=1e-8):
    """Advantage normalisation over valid tokens (arXiv 2501.03262 eq. 11); 0 at masked tokens."""
    m = loss_mask.bool()
    mean = keep(x, m).sum() / m.sum().clamp_min(1)
    var = keep((x - mean) ** 2, m).sum() / (m.sum() - 1).clamp_min(1)
    return keep((x - mean) / (var.sqrt() + eps), m)


# --- importance-sampling corrections (trainer vs rollout engine) -------------------------

def vanilla_tis(log_probs, old_log_probs, rollout_log_probs, advantages, cfg):
    """Truncated IS (Yao et al., https://fengyao.notion.site/off-policy-rl): weight
    clip(pi_old / pi_rollout, low, high), detached, times the PPO token loss."""
    w = torch.exp(old_log_probs - rollout_log_probs).clamp(cfg["tis_clip_low"], cfg["tis_clip"]).detach()
    loss, _ = ppo_policy_loss(log_probs, old_log_probs, advantages, cfg["eps_clip"], cfg["eps_clip_high"])
    return w, w * loss


def icepop(log_probs, old_log_probs, rollout_log_probs, advantages, cfg):
    """IcePop (Ling team, arXiv 2510.18855): weight pi_old / pi_rollout inside
    [low, high], 0 outside, detached, times the PPO token loss."""
    ratio = torch.exp(old_log_probs - rollout_log_probs)
    inside = (ratio >= cfg["tis_clip_low"]) & (ratio <= cfg["tis_clip"])
    w = torch.where(inside, ratio, torch.zeros_like(ratio)).detach()
    loss, _ = ppo_policy_loss(log_probs, old_log_probs, advantages, cfg["eps_clip"], cfg["eps_clip_high"])
    return w, w * loss


def off_policy_is(log_probs, old_log_probs, rollout_log_probs, advantages, cfg):
    """Off-policy IS (slime PR https://github.com/THUDM/slime/pull/2084): weight
    clip(pi_theta / pi_rollout, 1-eps, 1+eps_high).detach(); loss -w * A * log pi."""
    w = torch.exp(log_probs - rollout_log_probs).clamp(1.0 - cfg["eps_clip"], 1.0 + cfg["eps_clip_high"]).detach()
    return w, -w * advantages * log_probs


# --- loss aggregation -------------------------------------------------------------------

def aggregate(x, loss_mask, mode="token-mean"):
    """Loss aggregation over valid tokens (Dr. GRPO, arXiv 2503.20783 sec. 3; DAPO token-mean,
    arXiv 2503.14476): token-mean, seq-mean-token-mean, seq-mean-token-sum."""
    m = loss_mask.bool()
    if mode == "token-mean":
        return keep(x, m).sum() / m.sum().clamp_min(1)
    per_seq = keep(x, m).sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / m.sum(-1).clamp_min(1)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_agg {mode!r}")
    has = m.any(-1)
    return keep(per_seq, has).sum() / has.sum().clamp_min(1)


# --- log-probabilities and entropy from logits -------------------------------------------

def token_log_probs(logits, tokens, loss_mask, temperature=1.0):
    """Log-probability of each token under softmax(logits / T) and the entropy of that
    distribution. The rollout engine samples from softmax(logits / T) (temperature sampling,
    Ackley, Hinton & Sejnowski 1985, sec. 3), so the trainer's log pi must divide by the same
    T exactly once (OpenRLHF PR https://github.com/OpenRLHF/OpenRLHF/pull/853), and the
    entropy H = -sum_v p_v log p_v (Shannon 1948) is that same tempered distribution's
    (OpenRLHF PR https://github.com/OpenRLHF/OpenRLHF/pull/1319). Returns (log_probs [B, T],
    entropy [B, T]), 0 at masked positions; the caller's logits are read, never written."""
    m = loss_mask.bool()[..., None]
    scaled = keep(logits, m) / temperature  # a new tensor: the caller's logits stay as they were
    logp = torch.log_softmax(scaled, dim=-1)
    log_probs = logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return keep(log_probs, loss_mask), keep(entropy, loss_mask)


# --- the actor: a padded batch through the model in micro-batches ----------------------------

def micro_batches(attention_mask, micro_batch_size=None, use_dynamic_bsz=False, max_token_len=None):
    """The rows of each forward pass, as lists of batch indices. Fixed size: consecutive
    chunks of micro_batch_size rows (None: the whole batch). Dynamic: first-fit decreasing bin
    packing (Johnson 1973) of the rows' real-token counts into micro-batches of at most
    max_token_len tokens (None: the longest row's count), as verl's `rearrange_micro_batches`
    balances tokens (https://github.com/volcengine/verl/blob/main/verl/utils/seqlen_balancing.py):
    rows leave in another order than the batch's, and `restore_order` puts them back."""
    lengths = attention_mask.bool().sum(-1).tolist()
    rows = list(range(len(lengths)))
    if not use_dynamic_bsz:
        size = int(micro_batch_size or len(rows) or 1)
        return [rows[i:i + size] for i in range(0, len(rows), size)]
    budget = max(int(max_token_len or 0), max(lengths, default=0), 1)
    bins: list[list[int]] = []
    room: list[int] = []
    for r in sorted(rows, key=lambda r: -lengths[r]):  # longest first; a stable sort keeps ties in batch order
        k = next((i for i, left in enumerate(room) if left >= lengths[r]), None)
        if k is None:
            bins.append([])
            room.append(budget)
            k = len(bins) - 1
        bins[k].append(r)
        room[k] -= lengths[r]
    return bins


def forward_micro_batch(logits, tokens, attention_mask, temperature=1.0, use_remove_padding=False):
    """One micro-batch's per-token (log_probs, entropy), [B_m, T] each, 0 at padding. Padded:
    `token_log_probs` over the [B_m, T, V] logits. Packed (remove padding): the real tokens of
    every row concatenated into one sequence [1, nnz] (the layout flash-attention's varlen
    kernels take, https://github.com/Dao-AILab/flash-attention `bert_padding.unpad_input`),
    scored there, and scattered back to the (row, position) each came from."""
    real = attention_mask.bool()
    if not use_remove_padding:
        return token_log_probs(logits, tokens, real, temperature)
    packed_lp, packed_ent = token_log_probs(logits[real][None], tokens[real][None],
                                            torch.ones(1, int(real.sum()), dtype=torch.bool, device=real.device),
                                            temperature)
    log_probs = packed_lp.new_zeros(real.shape).masked_scatter(real, packed_lp[0])
    entropy = packed_ent.new_zeros(real.shape).masked_scatter(real, packed_ent[0])
    return log_probs, entropy


def restore_order(results, batches):
    """The micro-batches' [B_m, T] results concatenated, and each row put back at its index in
    the batch (the inverse of the order `micro_batches` took them in)."""
    order = torch.tensor([r for b in batches for r in b], dtype=torch.long, device=results[0].device)
    return torch.cat(results)[torch.argsort(order)]


def actor_log_probs(logits, tokens, attention_mask, loss_mask, temperature=1.0, micro_batch_size=None,
                    use_dynamic_bsz=False, max_token_len=None, use_remove_padding=False,
                    split=micro_batches, forward=forward_micro_batch, restore=restore_order):
    """An actor's log-probs of a padded batch: split into micro-batches, each scored by the
    model (here: its given logits), results put back in the batch's order. Every option only
    schedules the same per-token math, `token_log_probs` at temperature T (applied once), so
    the result is that of the whole batch at once. Returns (log_probs, entropy), 0 off the
    response (loss_mask)."""
    batches = split(attention_mask, micro_batch_size, use_dynamic_bsz, max_token_len)
    outs = [forward(logits[b], tokens[b], attention_mask[b], temperature, use_remove_padding) for b in batches]
    log_probs = restore([o[0] for o in outs], batches)
    entropy = restore([o[1] for o in outs], batches)
    return keep(log_probs, loss_mask), keep(entropy, loss_mask)


# --- the critic's value path -------------------------------------------------------------

def critic_values(value_head, loss_mask):
    """V(s_t), the value of the state before token t, is the critic head's output at the
    position that predicts token t: GAE's delta_t = r_t + gamma V(s_{t+1}) - V(s_t) (arXiv
    1506.02438 eq. 10) reads it there, unscaled: the sampling temperature shapes the policy,
    not the value (slime's value path passes apply_temperature=False, see
    https://github.com/THUDM/slime/pull/2197). Returns values [B, T], 0 at masked positions."""
    return keep(value_head, loss_mask)


# --- metrics logged beside the policy loss -----------------------------------------------

def metric_mean(x, loss_mask, agg="token-mean"):
    """A per-token metric reduced over valid tokens, as the loss is: token-mean or
    seq-mean-token-mean (sequences with no valid token do not count); 0 with none."""
    if agg not in ("token-mean", "seq-mean-token-mean"):
        raise ValueError(f"unknown metric_agg {agg!r}")
    return aggregate(x.float(), loss_mask, agg)


def valid_extreme(x, loss_mask, largest=True):
    """max (or min) of x over valid tokens; 0 with none."""
    m = loss_mask.bool()
    if not bool(m.any()):
        return x.new_zeros(())
    return x[m].max() if largest else x[m].min()


def policy_metrics(log_probs, old_log_probs, advantages, loss_mask, eps_clip=0.2, eps_clip_high=None,
                   eps_clip_c=None, agg="token-mean"):
    """What a PPO loss logs beside itself: clipfrac, the share of valid tokens whose clipped
    surrogate -A clip(r) exceeds -A r, i.e. the clipped branch is the one taken (TRL's
    PPOTrainer, https://github.com/huggingface/trl, pg_clipfrac); clipfrac_lower, the share
    where the dual clip -A c binds (A < 0, arXiv 1912.09729); approx_kl, the k1 estimate of
    KL(pi_old || pi) on tokens sampled from pi_old, mean(old - new) >= 0 in expectation
    (http://joschu.net/blog/kl-approx.html; TRL logs k2 instead, verl and slime log this k1 as
    ppo_kl); ratio mean / max / min of r = pi / pi_old. Each reduced as the loss is
    (`metric_mean`)."""
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    m = loss_mask.bool()
    lp, old, adv = keep(log_probs, m), keep(old_log_probs, m), keep(advantages, m)
    ratio = torch.exp(lp - old)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - eps_clip, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    lower = torch.zeros_like(m) if eps_clip_c is None else (adv < 0) & (loss > -adv * eps_clip_c)
    return {"clipfrac": metric_mean(clipped > unclipped, m, agg),
            "clipfrac_lower": metric_mean(lower, m, agg),
            "approx_kl": metric_mean(old - lp, m, agg),
            "ratio_mean": metric_mean(ratio, m, agg),
            "ratio_max": valid_extreme(ratio, m, True),
            "ratio_min": valid_extreme(ratio, m, False)}


# --- masked reductions -------------------------------------------------------------------

def masked_stats(x, loss_mask, dim="all", unbiased=True):
    """(mean, variance, count) of the valid values, over the batch (dim all: scalars) or per
    row (dim row: [B, 1]); the variance divides by n - 1 with Bessel's correction. A row or
    batch with no valid value (or one, unbiased) has mean / variance 0, not 0 / 0."""
    m = loss_mask.bool()
    axis = None if dim == "all" else -1
    kw = {} if axis is None else {"dim": axis, "keepdim": True}
    n = m.sum(**kw)
    mean = keep(x, m).sum(**kw) / n.clamp_min(1)
    sq = keep((x - mean) ** 2, m).sum(**kw)
    var = sq / (n - (1 if unbiased else 0)).clamp_min(1)
    return mean, var, n


def masked_reduce(x, loss_mask, op="mean", dim="all", unbiased=True, shift_mean=True, eps=1e-8):
    """Masked mean / sum / variance (textbook: selection, then sum / n, Bessel's n - 1) and
    whitening (x - mean) / sqrt(var + eps) over valid positions (the advantage whitening of
    arXiv 2501.03262 eq. 11; shift_mean False adds the mean back, as verl's masked_whiten).
    Values at masked positions are selected away, never multiplied by 0. Returns the scalar
    (dim all), [B] (dim row) or the whitened [B, T] (op whiten), 0 at masked positions."""
    if dim not in ("all", "row"):
        raise ValueError(f"unknown dim {dim!r}")
    mean, var, n = masked_stats(x, loss_mask, dim, unbiased)
    if op == "whiten":
        out = (x - mean) / torch.sqrt(var + eps)
        return keep(out + mean if not shift_mean else out, loss_mask)
    if op == "mean":
        out = mean
    elif op == "sum":
        out = keep(x, loss_mask).sum(**({} if dim == "all" else {"dim": -1, "keepdim": True}))
    elif op == "var":
        out = var
    else:
        raise ValueError(f"unknown op {op!r} (mean, sum, var, whiten)")
    return out if dim == "all" else out.squeeze(-1)


# --- the table the adapter calls through (a plant replaces one entry) -------------------

REFERENCE_OPS = dict(
    ppo_policy_loss=ppo_policy_loss, cispo_loss=cispo_loss, opsm_mask=opsm_mask,
    gspo_seq_kl=gspo_seq_kl, gspo_token_log_ratio=gspo_token_log_ratio, decoupled_weight=decoupled_weight,
    decoupled_loss=decoupled_loss,
    kl_estimator=kl_estimator, gae=gae, group_index=group_index,
    reward_norm=reward_norm, task_rewards=task_rewards, shape_token_rewards=shape_token_rewards,
    whiten=whiten, vanilla_tis=vanilla_tis, icepop=icepop, off_policy_is=off_policy_is,
    aggregate=aggregate, token_log_probs=token_log_probs, critic_values=critic_values,
    micro_batches=micro_batches, forward_micro_batch=forward_micro_batch, restore_order=restore_order,
    actor_log_probs=actor_log_probs,
    policy_metrics=policy_metrics, metric_mean=metric_mean, masked_reduce=masked_reduce,
)
