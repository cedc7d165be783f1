"""Reference formulas of the surfaces beside the loss, as expressions of sentinel.expr over a
run's inputs: the `close` hunt properties of the logprobs, values, metrics and masked_reduce
boundaries compare a target's output with these (the same math as adapters/reference.py,
written once more in numpy so that no invariant imports torch or a target).

Values under the mask may be anything (NaN, 1e4): each formula selects valid positions with
`where` before it sums, and the `close` check compares valid positions only.
"""

from __future__ import annotations

from typing import Any

from .. import boundaries
from .base import hunted

M = "(loss_mask > 0)"


def loss_agg_formula(mode: str, x: str) -> str:
    """`x` reduced over valid tokens by loss_agg `mode` (adapters/reference.py `aggregate`):
    token-mean, seq-mean-token-mean or seq-mean-token-sum, where rows with no valid token take
    no part in a sequence mean, and an empty batch gives 0."""
    kept = f"where({M}, {x}, 0)"
    if mode == "token-mean":
        return f"(sum({kept}) / maximum(sum({M}), 1))"
    per_row = f"sum({kept}, axis=1)"
    if mode == "seq-mean-token-mean":
        per_row += f" / maximum(sum({M}, axis=1), 1)"
    rows = f"any({M}, axis=1)"
    return f"(sum(where({rows}, {per_row}, 0)) / maximum(sum({rows}), 1))"


def masked_mean(x: str, agg: str = "token-mean") -> str:
    """`x` reduced over valid tokens by metric_agg `agg` (the loss_agg modes' formulas)."""
    return loss_agg_formula(agg, x)


# --- logprobs --------------------------------------------------------------------------------

def _log_softmax(temperature: float) -> str:
    """log_softmax(logits / T) over the vocabulary axis, [B, T, V], max-shifted as torch does."""
    z = f"(logits / {float(temperature)!r})"
    top = f"max({z}, axis=2, keepdims=True)"
    return f"({z} - {top} - log(sum(exp({z} - {top}), axis=2, keepdims=True)))"


def log_probs_formula(temperature: float) -> str:
    """log_softmax(logits / T) gathered at the token ids (a one-hot of the ids by a cumsum index)."""
    onehot = "(cumsum(ones_like(logits), axis=2) - 1 == expand_dims(tokens, 2))"
    return f"sum(where({onehot}, {_log_softmax(temperature)}, 0), axis=2)"


def entropy_formula(temperature: float) -> str:
    logp = _log_softmax(temperature)
    return f"-sum(exp({logp}) * {logp}, axis=2)"


# --- metrics ---------------------------------------------------------------------------------

RATIO = "exp(log_probs - old_log_probs)"


def _clip_bounds(cfg: dict[str, Any]) -> tuple[float, float]:
    high = cfg["eps_clip"] if cfg.get("eps_clip_high") is None else cfg["eps_clip_high"]
    return 1 - cfg["eps_clip"], 1 + high


def clipfrac_formula(cfg: dict[str, Any]) -> str:
    lo, hi = _clip_bounds(cfg)
    clipped = f"(-advantages * clip({RATIO}, {lo!r}, {hi!r}) > -advantages * {RATIO})"
    return masked_mean(clipped, cfg["metric_agg"])


def clipfrac_lower_formula(cfg: dict[str, Any]) -> str:
    if cfg.get("eps_clip_c") is None:
        return "0.0"
    lo, hi = _clip_bounds(cfg)
    loss = f"maximum(-advantages * {RATIO}, -advantages * clip({RATIO}, {lo!r}, {hi!r}))"
    binds = f"((advantages < 0) & ({loss} > -advantages * {float(cfg['eps_clip_c'])!r}))"
    return masked_mean(binds, cfg["metric_agg"])


KL_FORMULA = {  # the KL estimators of the `kl` boundary
    "k1": "log_probs - ref_log_probs",
    "k2": "(log_probs - ref_log_probs) ** 2 / 2",
    "k3": "exp(ref_log_probs - log_probs) - 1 - (ref_log_probs - log_probs)",
    "low_var_kl": "clip(exp(ref_log_probs - log_probs) - 1 - (ref_log_probs - log_probs), -10, 10)",
}


# --- masked reductions -----------------------------------------------------------------------

def masked_reduce_formula(cfg: dict[str, Any]) -> tuple[str, str]:
    """(output, expression) of the masked_reduce boundary under `cfg`."""
    op, row = cfg["op"], cfg["dim"] == "row"
    ax = ", axis=1" if row else ""
    n = f"sum({M}{ax})"
    mean = f"(sum(where({M}, values, 0){ax}) / maximum({n}, 1))"
    spread = f"expand_dims({mean}, 1)" if row else mean
    var = f"(sum(where({M}, (values - {spread}) ** 2, 0){ax}) / maximum({n} - {1 if cfg['unbiased'] else 0}, 1))"
    if op == "whiten":
        eps = 1e-8 if cfg.get("eps") is None else float(cfg["eps"])
        out = f"(values - {spread}) / sqrt({f'expand_dims({var}, 1)' if row else var} + {eps!r})"
        return "whitened", out if cfg["shift_mean"] else f"{out} + {spread}"
    expr = {"mean": mean, "sum": f"sum(where({M}, values, 0){ax})", "var": var}[op]
    return ("row_result" if row else "result"), expr


# --- the `close` hunt properties ----------------------------------------------------------------

REL = {"atol": 1e-5, "rtol": 1e-5}
# whitening: targets place eps differently (sqrt(var + eps), std + eps) and default it differently
WHITEN_TOL = {"atol": 1e-3, "rtol": 1e-3}


def _reduce_body(ex) -> dict[str, Any]:
    out, expr = masked_reduce_formula(ex.config)
    tol = WHITEN_TOL if ex.config["op"] == "whiten" else REL
    return {"output": out, "expected": expr, **({"where": "loss_mask"} if out == "whitened" else {}), **tol}


def _mode_hunts() -> tuple:
    """One property per loss_agg mode and boundary: each mode has its own formula, so a wrong
    denominator in one mode is not blurred with another's."""
    out = []
    for b, key, x in (("loss_agg", "mode", "values"), ("policy_loss", "loss_agg", "pg_loss"),
                      ("cispo_loss", "loss_agg", "pg_loss"), ("is_correction", "loss_agg", "pg_loss")):
        for mode in boundaries.LOSS_AGG:
            out.append(hunted(b, name=f"mode.{mode}", doc=f"loss_agg {mode}: the loss is the {mode} of "
                              f"{'the values' if x == 'values' else 'pg_loss'} over valid tokens",
                              body={"output": "loss", "expected": loss_agg_formula(mode, x), "atol": 1e-5,
                                    "rtol": 1e-4}, config={key: [mode]}, min_valid=1))
    return tuple(out)


HUNTS = (
    *_mode_hunts(),
    hunted("logprobs", name="log_probs",
           doc="log_probs = log_softmax(logits / T) at the token id, T applied exactly once",
           body=lambda ex: {"output": "log_probs", "expected": log_probs_formula(ex.config["temperature"]),
                            "where": "loss_mask", **REL}),
    hunted("logprobs", name="entropy", doc="entropy is that of softmax(logits / T), the sampled distribution",
           body=lambda ex: {"output": "entropy", "expected": entropy_formula(ex.config["temperature"]),
                            "where": "loss_mask", **REL}),
    hunted("actor_logprobs", name="log_probs",
           doc="the actor's log_probs = log_softmax(logits / T) at the token id, T applied exactly once, whatever "
               "the batching", body=lambda ex: {"output": "log_probs", "expected": log_probs_formula(
               ex.config["temperature"]), "where": "loss_mask", **REL}, min_prompt=1),
    hunted("actor_logprobs", name="entropy", doc="the actor's entropy is that of softmax(logits / T)",
           body=lambda ex: {"output": "entropy", "expected": entropy_formula(ex.config["temperature"]),
                            "where": "loss_mask", **REL}, min_prompt=1),
    hunted("values", name="head", doc="values equal the value head's output at every response token (no shift, "
           "no temperature)", body={"output": "values", "expected": "value_head", "where": "loss_mask"}),
    hunted("metrics", name="clipfrac", doc="clipfrac is the share of valid tokens where PPO's clipped branch is taken",
           body=lambda ex: {"output": "clipfrac", "expected": clipfrac_formula(ex.config), **REL}),
    hunted("metrics", name="clipfrac_lower", doc="the dual-clip fraction is the share of valid A < 0 tokens where "
           "-A c binds", body=lambda ex: {"output": "clipfrac_lower", "expected": clipfrac_lower_formula(ex.config),
                                          **REL}, config={"eps_clip_c": [3.0, None]}),
    hunted("metrics", name="approx_kl", doc="approx_kl is the k1 estimate of KL(pi_old || pi): mean(old - new)",
           body=lambda ex: {"output": "approx_kl", "expected": masked_mean("old_log_probs - log_probs",
                                                                           ex.config["metric_agg"]), **REL}),
    hunted("metrics", name="ratio_mean", doc="ratio_mean is the mean of pi / pi_old over valid tokens",
           body=lambda ex: {"output": "ratio_mean", "expected": masked_mean(RATIO, ex.config["metric_agg"]), **REL}),
    hunted("metrics", name="kl_loss", doc="the logged KL loss is the mean of the kl_type estimator over valid tokens",
           body=lambda ex: {"output": "kl_loss", "expected": masked_mean(KL_FORMULA[ex.config["kl_type"]],
                                                                         ex.config["metric_agg"]), **REL}),
    hunted("masked_reduce", name="formula", doc="masked mean / sum / variance / whitening over valid values only "
           "(0 for none)", body=_reduce_body),
)
