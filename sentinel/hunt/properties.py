"""Hunt properties: one generic invariant family on one boundary, over drawn examples.

A property names a boundary and an invariant family (sentinel/invariants), how its
examples are drawn (keyword arguments of `sentinel.strategies.examples`: configs, batch
shapes, masked positions, groups, variants) and the invariant's YAML body for one example.
No property knows a trigger; each says what must hold for every input. `PROPERTIES` is the
table `sentinel hunt --list` shows; both sides of a hunt (the driver, and the round in the
worker's child) read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .. import strategies as S
from ..invariants import REGISTRY, Invariant

# seconds of shrinking per finding before the best so far is kept (the driver's default for
# each round, and a round's own default)
SHRINK_TIME = 20.0

# Two runs of float code may sum in a different order (a permuted batch, padded columns):
# relations between runs get this much slack. Values are drawn on dyadic grids, so sums of
# inputs are exact; only transcendental results (exp, log) carry rounding.
REL = {"atol": 1e-5, "rtol": 1e-4}

KL_FORMULA = {
    "k1": "log_probs - ref_log_probs",
    "k2": "(log_probs - ref_log_probs) ** 2 / 2",
    "k3": "exp(ref_log_probs - log_probs) - 1 - (ref_log_probs - log_probs)",
    "low_var_kl": "clip(exp(ref_log_probs - log_probs) - 1 - (ref_log_probs - log_probs), -10, 10)",
}


@dataclass(frozen=True)
class Property:
    """A generic invariant family on a boundary over generated examples."""

    name: str  # boundary.family[.qualifier]
    boundary: str
    family: str
    doc: str
    draw: dict[str, Any]  # keyword arguments of strategies.examples
    body: Callable[[S.Example], dict[str, Any]]  # the invariant's YAML body for one example

    def config_choices(self) -> dict[str, list[Any]]:
        return {**S.CONFIG_CHOICES[self.boundary], **self.draw.get("config", {})}

    def strategy(self, exclude: dict[str, list[Any]] | None = None):
        """The property's example strategy without the `exclude`d config choices (those the
        target raised Unsupported for); built once per process, and validated."""
        key = (self.name, repr(sorted((exclude or {}).items())))
        if key not in _STRATEGIES:
            kw = dict(self.draw)
            if exclude:
                kw["config"] = {k: [v for v in vs if v not in exclude.get(k, [])]
                                for k, vs in self.config_choices().items()}
            _STRATEGIES[key] = S.examples(self.boundary, **kw)
            _STRATEGIES[key].validate()
        return _STRATEGIES[key]

    def invariant(self, ex: S.Example) -> Invariant:
        return REGISTRY[self.family].model_validate(self.body(ex))


PROPERTIES: dict[str, Property] = {}
_STRATEGIES: dict[Any, Any] = {}


def _prop(name: str, family: str, doc: str, body: Callable[[S.Example], dict[str, Any]] | dict[str, Any] = None,
          **draw: Any) -> None:
    boundary = name.split(".")[0]
    fixed = body or {}
    fn = body if callable(body) else (lambda ex, _b=fixed: dict(_b))
    PROPERTIES[name] = Property(name, boundary, family, doc, draw, fn)


def _perm(extra: dict[str, Any] | None = None) -> Callable[[S.Example], dict[str, Any]]:
    return lambda ex: {"perm": list(ex.params["perm"]), **REL, **(extra or {})}


# Families that apply to every token boundary whose inputs live under loss_mask.
for _b in ("opsm_mask", "policy_loss", "cispo_loss", "gspo_kl", "kl", "gae", "is_correction", "loss_agg"):
    _prop(f"{_b}.masked_invariance", "masked_invariance",
          "values at masked positions do not change outputs at valid positions", need_masked=True)
    _prop(f"{_b}.finite", "finite", "NaN / +-Inf at masked positions leave valid outputs finite", need_masked=True)
    if _b != "is_correction":
        _prop(f"{_b}.padding_invariant", "padding_invariant",
              "extra masked columns leave every output unchanged", REL)
    _prop(f"{_b}.permutation_equivariant", "permutation_equivariant",
          "permuting rows permutes the outputs; scalars do not change", _perm(), min_batch=2, perm=True)

_prop("opsm_mask.sequence_uniform", "sequence_uniform",
      "the OPSM decision is one per sequence, never token by token", {"output": "opsm_mask"})
_prop("policy_loss.sequence_uniform", "sequence_uniform",
      "GSPO (importance_sampling_level sequence): with one advantage per sequence, every token of it "
      "gets the same clipped loss", {"output": "pg_loss", "atol": 1e-6},
      config={"importance_sampling_level": ["sequence"]}, seq_advantages=True)
_prop("gspo_kl.sequence_uniform", "sequence_uniform",
      "the GSPO sequence KL is one value per sequence", {"output": "seq_kl", "atol": 1e-6})
for _b in ("policy_loss", "kl", "is_correction", "advantages"):
    _prop(f"{_b}.unmutated", "unmutated", "the call leaves every input tensor as it was")


def _cispo_gradient(ex: S.Example) -> dict[str, Any]:
    lo, hi = 1 - ex.config["eps_clip"], 1 + ex.config["eps_clip_high"]
    return {"of": "loss", "wrt": "log_probs", "where": "loss_mask",
            "expected": (f"-clip(exp(log_probs - old_log_probs), {lo!r}, {hi!r}) * advantages * loss_mask"
                         " / sum(loss_mask)")}


def _ppo_gradient(ex: S.Example) -> dict[str, Any]:
    """-ratio * A / N where the unclipped branch is the one PPO keeps (inside the clip range,
    or outside it on the side that does not help), and not capped by the dual clip."""
    eps, high, c = ex.config["eps_clip"], ex.config["eps_clip_high"], ex.config["eps_clip_c"]
    lo, hi = 1 - eps, 1 + (eps if high is None else high)
    r = "exp(log_probs - old_log_probs)"
    kept = (f"(({r} >= {lo!r}) & ({r} <= {hi!r}) | (advantages > 0) & ({r} < {lo!r})"
            f" | (advantages < 0) & ({r} > {hi!r}))")
    if c is not None:
        kept += f" & ~((advantages < 0) & ({r} > {c!r}))"
    return {"of": "loss", "wrt": "log_probs", "where": "loss_mask",
            "expected": f"-{r} * advantages * loss_mask / sum(loss_mask) * ({kept})"}


_prop("policy_loss.gradient", "gradient",
      "PPO's gradient is -ratio * A / N at every valid token the clip keeps, 0 where it binds",
      _ppo_gradient, config={"loss_agg": ["token-mean"], "importance_sampling_level": ["token"]})
_prop("cispo_loss.gradient", "gradient",
      "CISPO's gradient flows through log pi only: -sg(clip(ratio)) * A / N at every valid token",
      _cispo_gradient, config={"loss_agg": ["token-mean"]})

_prop("is_correction.detached", "detached", "the IS correction weight carries no gradient", {"output": "weights"})
_prop("is_correction.gradient", "gradient",
      "off-policy IS: d loss / d log pi = -w * A / N (the weight is a constant)",
      {"of": "loss", "wrt": "log_probs", "where": "loss_mask",
       "expected": "-weights * advantages * loss_mask / sum(loss_mask)"},
      config={"method": ["off_policy_is"], "loss_agg": ["token-mean"]})

# advantages: configs a trainer may lack are drawn too (Unsupported = not applicable)
_prop("advantages.no_eos_isolation", "unchanged_under",
      "with mask_no_eos_with_zero, a no-EOS row's reward does not move any row with EOS",
      {"variant": "no_eos_rewards", "output": "advantages", "rows": "has_eos"},
      config={"mask_no_eos_with_zero": [True], "reward_norm": S._NORMS[1:]},
      eos="mixed", min_prompt=1, variant="no_eos_rewards")
_prop("advantages.logged_kl", "close",
      "with a KL penalty (kl_coef > 0), the KL kept for logging is still the KL formula of kl_type at "
      "valid tokens after the call (a trainer may skip the KL when kl_coef is 0)",
      lambda ex: {"output": "logged_kl", "expected": KL_FORMULA[ex.config["kl_type"]], "where": "loss_mask",
                  "atol": 1e-6, "rtol": 1e-5},
      config={"kl_coef": [0.1, 0.05, 1.0], "reward_norm": [None], "mask_no_eos_with_zero": [False],
              "reward_clip": [None]}, min_prompt=1)
_prop("advantages.group_isolation", "group_isolation",
      "with per-group statistics only, one group's rewards do not move another group's advantages", dict(REL),
      config={"estimator": ["grpo", "reinforce_plus_plus_baseline", "gae"],
              "reward_norm": [None, {"mean_level": "group", "std_level": "group"},
                              {"mean_level": "group", "std_level": None}],
              "normalize_advantages": [False]},
      groups="always", min_groups=2, min_batch=2, min_prompt=1)
_prop("advantages.permutation_equivariant", "permutation_equivariant",
      "permuting rows (and their group ids) permutes the advantages", _perm(), min_batch=2, perm=True, min_prompt=1)
_prop("advantages.masked_invariance", "masked_invariance",
      "log-probs and values at masked positions do not change valid advantages, returns or KL",
      need_masked=True, min_prompt=1)
_prop("advantages.finite", "finite", "NaN / +-Inf at masked positions leave valid advantages finite",
      need_masked=True, min_prompt=1)

_prop("reward_norm.masked_rows", "unchanged_under",
      "a row with mask 0 (any reward, NaN included) does not move the normalised reward of kept rows",
      lambda ex: {"variant": "masked_row_rewards", "output": "rewards", "rows": list(ex.params["rows"]), "mask": None},
      variant="masked_row_rewards")
_prop("reward_norm.group_isolation", "group_isolation",
      "group-level normalisation: one group's rewards do not move another group's",
      {"output": "rewards", "mask": None, **REL},
      config={"mean_level": ["group"], "std_level": ["group", None]}, groups="always", min_groups=2, min_batch=2)
_prop("reward_norm.permutation_equivariant", "permutation_equivariant",
      "permuting rows (and their group ids) permutes the normalised rewards", _perm(), min_batch=2, perm=True)


def select(boundaries: list[str] | None = None, families: list[str] | None = None,
           names: list[str] | None = None) -> list[Property]:
    """Properties filtered by boundary, invariant family and/or exact name."""
    out = []
    for p in PROPERTIES.values():
        if boundaries and p.boundary not in boundaries:
            continue
        if families and p.family not in families:
            continue
        if names and p.name not in names:
            continue
        out.append(p)
    return sorted(out, key=lambda p: (p.boundary, p.name))
