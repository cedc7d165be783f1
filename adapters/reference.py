"""The bundled reference target: the correct loss-path math, readable top to bottom.

Written cleanrl-style: small functions, each naming the paper or PR its formula comes
from. Layout is canonical (see sentinel/boundaries.py): token tensors ``[B, T]``, row
tensors ``[B]``, ``loss_mask`` 1 where a token is trained. Pure torch.

Two rules hold everywhere:
- values at masked positions never reach a result: they are selected away with
  ``torch.where`` (multiplying by the mask would turn a NaN there into NaN, and its
  gradient into NaN too);
- no input tensor is ever written to.

`ReferenceAdapter` at the bottom composes these functions through a small table (`REFERENCE_OPS`),
which `planted.py` overrides one entry at a time to plant a known bug.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from .base import Adapter, BoundaryResult, FunctionRef, TargetLoadError, Unsupported, implements


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


# --- KL to the reference policy ---------------------------------------------------------

def kl_estimator(log_probs, ref_log_probs, loss_mask, kl_type="k1"):
    """k1, k2, k3 estimators of KL(pi || ref) (Schulman, http://joschu.net/blog/kl-approx.html),
    on log r = log pi - log ref; low_var_kl is k3 clamped to [-10, 10]; 0 at masked tokens."""
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
        raise ValueError(f"unknown kl_type {kl_type!r} (k1, k2, k3, low_var_kl)")
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


# --- the table the adapter calls through (planted.py overrides entries) -----------------

REFERENCE_OPS = dict(
    ppo_policy_loss=ppo_policy_loss, cispo_loss=cispo_loss, opsm_mask=opsm_mask,
    gspo_seq_kl=gspo_seq_kl, gspo_token_log_ratio=gspo_token_log_ratio, decoupled_weight=decoupled_weight,
    kl_estimator=kl_estimator, gae=gae, group_index=group_index,
    reward_norm=reward_norm, task_rewards=task_rewards, shape_token_rewards=shape_token_rewards,
    whiten=whiten, vanilla_tis=vanilla_tis, icepop=icepop, off_policy_is=off_policy_is,
    aggregate=aggregate,
)


def ops_for(plant: str | None) -> SimpleNamespace:
    """The reference table, with one entry replaced when a plant is named."""
    if not plant:
        return SimpleNamespace(**REFERENCE_OPS)
    from .planted import PLANTS

    if plant not in PLANTS:
        raise TargetLoadError(f"unknown plant {plant!r} (known: {', '.join(sorted(PLANTS))})")
    p = PLANTS[plant]
    return SimpleNamespace(**{**REFERENCE_OPS, p.replaces: p.fn})


# --- the adapter ------------------------------------------------------------------------

def _version() -> str:
    try:
        from sentinel import __version__
        return __version__
    except Exception:
        return "bundled"


class ReferenceAdapter(Adapter):
    """The bundled correct implementation; options {"plant": NAME} swap in one planted bug."""

    name = "reference"
    description = "Bundled reference implementation of the loss-path math (optionally with a planted bug)."

    def __init__(self, root=None, device=torch.device("cpu"), options=None):
        super().__init__(root, device, options)
        self.plant = self.options.get("plant")
        self.ops = ops_for(self.plant)

    def load(self) -> dict[str, Any]:
        facts = {"version": _version()}
        if self.plant:
            facts["plant"] = self.plant
        return facts

    def _result(self, outputs: dict[str, Any], fn_name: str) -> BoundaryResult:
        return BoundaryResult(outputs, function=FunctionRef.of(getattr(self.ops, fn_name)))

    def _policy(self, fn_name, inputs, config, *clip):
        m = inputs["loss_mask"]
        lp, old, adv = (keep(inputs[k], m) for k in ("log_probs", "old_log_probs", "advantages"))
        if config.get("rejection_sampling") is not None:
            raise Unsupported("rejection_sampling maps a target's own option (AReaL's behav_imp_weight_cap, ...); "
                              "the reference has none")
        weights = None
        if config.get("use_decoupled_loss"):
            if "rollout_log_probs" not in inputs:
                raise ValueError("use_decoupled_loss needs input rollout_log_probs (the behaviour policy)")
            weights = keep(self.ops.decoupled_weight(old, keep(inputs["rollout_log_probs"], m)), m)
        level = config.get("importance_sampling_level") or "token"
        if level == "sequence":  # the ratio against old is the sequence ratio
            lp, old = self.ops.gspo_token_log_ratio(lp, old, m), torch.zeros_like(old)
        elif level != "token":
            raise Unsupported(f"importance_sampling_level {level!r}: the reference has token and sequence")
        loss, clipfrac = getattr(self.ops, fn_name)(lp, old, adv, *clip)
        loss, clipfrac = keep(loss, m), keep(clipfrac, m)
        outputs = {"pg_loss": loss, "clipfrac": clipfrac}
        if weights is not None:
            loss = outputs["pg_loss"] = loss * weights
            outputs["weights"] = weights
        outputs["loss"] = self.ops.aggregate(loss, m, config.get("loss_agg", "token-mean"))
        return self._result(outputs, fn_name)

    @implements("policy_loss", calls=(ppo_policy_loss, gspo_token_log_ratio, decoupled_weight, aggregate))
    def b_policy_loss(self, inputs, config):
        clip = (config.get("eps_clip", 0.2), config.get("eps_clip_high"), config.get("eps_clip_c"))
        return self._policy("ppo_policy_loss", inputs, config, *clip)

    @implements("cispo_loss", calls=(cispo_loss, gspo_token_log_ratio, decoupled_weight, aggregate))
    def b_cispo_loss(self, inputs, config):
        clip = (config.get("eps_clip", 1.0), config.get("eps_clip_high", 0.28))
        return self._policy("cispo_loss", inputs, config, *clip)

    @implements("opsm_mask", calls=(opsm_mask, ppo_policy_loss, aggregate))
    def b_opsm_mask(self, inputs, config):
        m = inputs["loss_mask"]
        lp, old, adv = inputs["log_probs"], inputs["old_log_probs"], inputs["advantages"]
        mask, clipfrac = self.ops.opsm_mask(lp, old, adv, m, config.get("opsm_delta", 0.1))
        clip = (config.get("eps_clip", 0.2), config.get("eps_clip_high"), config.get("eps_clip_c"))
        token_loss, _ = self.ops.ppo_policy_loss(keep(lp, m), keep(old, m), keep(adv, m), *clip)
        pg_loss = keep(token_loss, m) * mask
        reduced = self.ops.aggregate(pg_loss, m, "token-mean")
        return self._result({"opsm_mask": mask, "opsm_clipfrac": clipfrac, "pg_loss": pg_loss,
                             "reduced_policy_loss": reduced}, "opsm_mask")

    @implements("gspo_kl", calls=(gspo_seq_kl,))
    def b_gspo_kl(self, inputs, config):
        seq_kl = self.ops.gspo_seq_kl(inputs["log_probs"], inputs["old_log_probs"], inputs["loss_mask"])
        return self._result({"seq_kl": seq_kl}, "gspo_seq_kl")

    @implements("kl", calls=(kl_estimator,))
    def b_kl(self, inputs, config):
        kl = self.ops.kl_estimator(inputs["log_probs"], inputs["ref_log_probs"], inputs["loss_mask"],
                                   config.get("kl_type", "k1"))
        return self._result({"kl": kl}, "kl_estimator")

    @implements("gae", calls=(gae,))
    def b_gae(self, inputs, config):
        adv, ret = self.ops.gae(inputs["token_rewards"], inputs["values"], inputs["loss_mask"],
                                config.get("gamma", 1.0), config.get("lam", 1.0))
        return self._result({"advantages": adv, "returns": ret}, "gae")

    @implements("reward_norm", calls=(group_index, reward_norm))
    def b_reward_norm(self, inputs, config):
        if config.get("mean_leave1out") or config.get("std_unbiased") is False:
            raise Unsupported("the reference normalises with the plain group mean and the unbiased std")
        r = inputs["rewards"]
        rows = inputs["mask"].bool() if "mask" in inputs else torch.ones_like(r, dtype=torch.bool)
        index = self.ops.group_index(inputs.get("group"), config.get("group_size"), r.shape[0]).to(r.device)
        out = self.ops.reward_norm(r, rows, index, config.get("mean_level", "batch"),
                                   config.get("std_level", "batch"),
                                   1e-5 if config.get("eps") is None else config["eps"])
        return self._result({"rewards": out}, "reward_norm")

    @implements("advantages", calls=(kl_estimator, group_index, task_rewards, reward_norm, shape_token_rewards, gae, whiten))
    def b_advantages(self, inputs, config):
        """Scalar rewards -> (advantages, returns, logged_kl, token_rewards) for one estimator."""
        m, r = inputs["loss_mask"], inputs["rewards"]
        estimator, kl_coef = config.get("estimator", "gae"), config.get("kl_coef", 0.0)
        if config.get("reward_bias", 0.0) != 0.0 or config.get("reward_scaling", 1.0) != 1.0 or config.get("adv_norm"):
            raise Unsupported("the reference has no reward_bias / reward_scaling / adv_norm (AReaL options)")
        if "log_probs" in inputs and "ref_log_probs" in inputs:
            kl = self.ops.kl_estimator(inputs["log_probs"], inputs["ref_log_probs"], m, config.get("kl_type", "k1"))
        else:
            kl = torch.zeros_like(m)
        rows = torch.ones_like(r, dtype=torch.bool)
        if config.get("mask_no_eos_with_zero") and "attention_mask" in inputs:
            rows = ~inputs["attention_mask"].bool().all(-1)  # a row with no padding never emitted EOS
        index = self.ops.group_index(inputs.get("group"), config.get("group_size"), r.shape[0]).to(r.device)
        norm = config.get("reward_norm")
        if estimator == "grpo" and not norm:
            norm = {"mean_level": "group", "std_level": "group", "eps": 1e-6}
        if estimator == "reinforce_plus_plus_baseline":  # reward minus its group mean
            norm = {**(norm or {}), "mean_level": "group", "std_level": (norm or {}).get("std_level")}
        r = self.ops.task_rewards(r, rows, index, norm, config.get("reward_clip"), self.ops.reward_norm)
        token_rewards = self.ops.shape_token_rewards(kl, r, m, kl_coef)

        if estimator == "gae":
            values = inputs.get("values", torch.zeros_like(m))
            adv, ret = self.ops.gae(token_rewards, values, m, config.get("gamma", 1.0), config.get("lam", 1.0))
        elif estimator == "reinforce_plus_plus":  # discounted return of the shaped rewards
            adv, ret = self.ops.gae(token_rewards, torch.zeros_like(m), m, config.get("gamma", 1.0), 1.0)
        elif estimator == "grpo":
            adv = keep(r[:, None].expand_as(m), m)
            ret = adv
        elif estimator == "reinforce_plus_plus_baseline":
            adv = keep(r[:, None] - kl_coef * kl, m)
            ret = adv
        else:
            raise Unsupported(f"the reference has no estimator {estimator!r} "
                              "(gae, grpo, reinforce_plus_plus, reinforce_plus_plus_baseline)")
        if config.get("normalize_advantages"):
            adv = self.ops.whiten(adv, m)
        outputs = {"advantages": adv, "returns": ret, "logged_kl": kl, "token_rewards": token_rewards}
        return self._result(outputs, "gae" if estimator == "gae" else "task_rewards")

    @implements("is_correction", calls=(off_policy_is, vanilla_tis, icepop, aggregate))
    def b_is_correction(self, inputs, config):
        m = inputs["loss_mask"]
        names = ("log_probs", "old_log_probs", "rollout_log_probs", "advantages")
        lp, old, roll, adv = (keep(inputs[k], m) for k in names)
        method = config.get("method", "off_policy_is")
        if method not in ("off_policy_is", "vanilla_tis", "icepop"):
            raise ValueError(f"unknown is_correction method {method!r}")
        cfg = {"eps_clip": 0.2, "eps_clip_high": 0.2, "tis_clip_low": 0.0, "tis_clip": 2.0, **config}
        if cfg["eps_clip_high"] is None:
            cfg["eps_clip_high"] = cfg["eps_clip"]
        w, pg_loss = getattr(self.ops, method)(lp, old, roll, adv, cfg)
        w, pg_loss = keep(w, m), keep(pg_loss, m)
        loss = self.ops.aggregate(pg_loss, m, config.get("loss_agg", "token-mean"))
        return self._result({"weights": w, "pg_loss": pg_loss, "loss": loss}, method)

    @implements("loss_agg", calls=(aggregate,))
    def b_loss_agg(self, inputs, config):
        loss = self.ops.aggregate(inputs["values"], inputs["loss_mask"], config.get("mode", "token-mean"))
        return self._result({"loss": loss}, "aggregate")
