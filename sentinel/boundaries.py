"""Canonical boundaries: the framework-neutral signatures every adapter speaks.

A boundary is one loss-path function of a trainer. Scenarios address it by name with
canonical inputs; each adapter translates those into its target's own conventions and
translates the outputs back. This module is pure data (no torch): the spec loader and the
invariants use it to check shapes and to know which mask governs which tensor.

Canonical layout
- token tensors are ``[B, T]`` padded batches; ``loss_mask[b, t] == 1`` marks a response
  token whose log-prob is trained; ``log_probs[b, t]`` is ``log pi(token t | prefix)``.
- row tensors are ``[B]`` (one value per sequence: a scalar reward, a group id).
- ``attention_mask`` marks real tokens (prompt and response); a row with no padding at all
  ran to the length limit without emitting EOS.
- scalars are 0-d.
- vocab tensors are ``[B, T, V]``: one distribution over a V-token vocabulary per position,
  aligned as token tensors are (``logits[b, t]`` predicts token ``t``); their mask is the
  ``[B, T]`` mask of the position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

Kind = Literal["token", "row", "scalar", "vocab"]
DType = Literal["float", "mask", "int"]
# the shape each kind has: one home for `sentinel list boundaries`, the schema and the docs
SHAPES: dict[str, str] = {"token": "[B, T]", "row": "[B]", "scalar": "[]", "vocab": "[B, T, V]"}


@dataclass(frozen=True)
class Port:
    """One input or output of a boundary."""

    name: str
    kind: Kind
    dtype: DType = "float"
    required: bool = True
    mask: str | None = None  # the mask that says where this tensor's values matter
    doc: str = ""
    # required only under these option values: ((option, (value, ...)), ...), all of them
    # (an output the config asks for; `required` is then False)
    required_when: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    # an optional input a trainer reads only when its batch holds it (a missing key takes
    # another path): differential hunts also draw examples without it (strategies' "absent")
    absent_drawn: bool = False

    @property
    def shape(self) -> str:
        """`[B, T]`, `[B]`, `[]` or `[B, T, V]`."""
        return SHAPES[self.kind]

    def contract(self) -> str:
        """`kind [shape] dtype` and, for an optional port, when it is required: a scalar
        `clipfrac` is right on `metrics` and a contract error on `policy_loss`, so say which."""
        text = f"{self.kind} {self.shape} {self.dtype}"
        if self.required_when:
            text += f" (required under {self.when()})"
        elif not self.required:
            text += " (optional)"
        return text

    def when(self) -> str:
        """The option values that make an optional port required: `op mean/sum/var, dim all`."""
        return ", ".join(f"{k} {'/'.join(map(str, vs))}" for k, vs in self.required_when)

    def required_under(self, config: dict[str, Any]) -> bool:
        """Whether a call with `config` (normalised) must produce this port."""
        if self.required:
            return True
        return bool(self.required_when) and all(config.get(k) in vs for k, vs in self.required_when)


OptionKind = Literal["number", "bool", "choice", "mapping"]


@dataclass(frozen=True)
class Option:
    """One config option of a boundary: its default, what values it takes, and what it needs.

    kind: "number" (int or float), "bool", "choice" (one of `values`), "mapping" (a dict;
    with `keys_of`, its keys and values are another boundary's options).
    derive: when the value is None, it means the value of this other option
    (`eps_clip_high: None` is `eps_clip`): `Boundary.normalise` applies it, once, for every
    adapter. requires: inputs a scenario must give when the option is set (truthy).
    hunt: the values `sentinel hunt` draws, the first being what a shrunk example keeps.
    """

    name: str
    default: Any
    kind: OptionKind = "number"
    values: tuple[Any, ...] = ()
    nullable: bool = False
    derive: str | None = None
    requires: tuple[str, ...] = ()
    keys_of: str | None = None
    hunt: tuple[Any, ...] | None = None
    doc: str = ""

    def allowed(self) -> str:
        """The allowed values, as `sentinel list boundaries` and spec errors print them."""
        if self.kind == "choice":
            text = ", ".join(str(v) for v in self.values)
        elif self.kind == "mapping":
            text = f"a mapping of {self.keys_of} options" if self.keys_of else "a mapping"
        else:
            text = "a number" if self.kind == "number" else "true or false"
        return text + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        """Why `value` is not allowed here (None: it is)."""
        if value is None:
            return None if self.nullable else f"may not be null (allowed: {self.allowed()})"
        if self.kind == "choice":
            ok = any(value == v and type(value) is type(v) for v in self.values)
        elif self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind == "number":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            if not isinstance(value, dict):
                ok = False
            elif self.keys_of:
                return get(self.keys_of).problem(value)
            else:
                ok = True
        return None if ok else f"{value!r} is not allowed (allowed: {self.allowed()})"


@dataclass(frozen=True)
class Boundary:
    name: str
    doc: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    options: tuple[Option, ...] = ()
    grad_inputs: tuple[str, ...] = ()  # inputs that may carry requires_grad
    # inputs a trainer may hand over still in the autograd graph although the loss must not
    # differentiate through them (on-policy or bypass modes pass the current log-probs as the old
    # ones): the differential hunt takes gradients w.r.t. them too, so a weight or ratio left
    # undetached shows as a gradient difference (sentinel/hunt/differences.grads_for)
    graph_inputs: tuple[str, ...] = ()

    @property
    def differentiable(self) -> tuple[str, ...]:
        """Every input a gradient may be observed with respect to (a found difference replays)."""
        return (*self.grad_inputs, *self.graph_inputs)

    @property
    def config(self) -> dict[str, Any]:
        """Option name -> default (a fresh dict: callers may change it)."""
        return dict(self._defaults)

    # by name, worked out once: a hunt looks ports and options up a hundred times an example
    # (the instance's __dict__ takes them although the dataclass is frozen; the first of a name wins)
    @cached_property
    def _defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    @cached_property
    def _derived(self) -> tuple[Option, ...]:
        return tuple(o for o in self.options if o.derive)

    @cached_property
    def _by_name(self) -> tuple[dict[str, Port], dict[str, Port], dict[str, Option]]:
        def index(items):
            out: dict[str, Any] = {}
            for x in items:
                out.setdefault(x.name, x)
            return out
        return index(self.inputs), index(self.outputs), index(self.options)

    def option(self, name: str) -> Option | None:
        return self._by_name[2].get(name)

    def problem(self, config: dict[str, Any]) -> str | None:
        """The first unknown key or disallowed value of `config` (None: all fine)."""
        for key, value in config.items():
            opt = self.option(key)
            if opt is None:
                return f"unknown config key {key!r} for boundary {self.name!r} (known: {', '.join(self.config) or 'none'})"
            if (why := opt.problem(value)) is not None:
                return f"{key}: {why}"
        return None

    def normalise(self, config: dict[str, Any]) -> dict[str, Any]:
        """Defaults filled in and derived values resolved: what every adapter receives."""
        out = {**self._defaults, **config}
        for o in self._derived:
            if out.get(o.name) is None:
                out[o.name] = out[o.derive]
        return out

    def input(self, name: str) -> Port | None:
        return self._by_name[0].get(name)

    def output(self, name: str) -> Port | None:
        return self._by_name[1].get(name)

    @property
    def masks(self) -> list[str]:
        return [p.name for p in self.inputs if p.dtype == "mask" and p.kind == "token"]


def _tok(name: str, doc: str = "", *, required: bool = True, dtype: DType = "float", mask: str | None = "loss_mask",
         absent_drawn: bool = False) -> Port:
    return Port(name, "token", dtype, required, mask if dtype != "mask" else None, doc, absent_drawn=absent_drawn)


LOSS_MASK = Port("loss_mask", "token", "mask", True, None, "1 where the token is trained")
LOSS_AGG = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
# Canonical estimators first; the rest are names a target dispatches as given (slime's
# gspo / cispo, verl's registry), so a scenario may address them.
ESTIMATORS = ("gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo", "gspo", "cispo",
              "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "remax", "opo", "gpg", "gdpo",
              "optimal_token_baseline", "tir_optimal_token_baseline")
KL_TYPES = ("k1", "k2", "k3", "low_var_kl", "kl", "mse")
# straight-through estimators (verl PR 2953's `k1+` / `k3+`): the value of the named estimator with
# the gradient of k2; only the kl boundary takes them
KL_STRAIGHT_THROUGH = ("k1+", "k3+", "low_var_kl+")
LEVELS = ("batch", "group")


def _clip(eps_clip: float, eps_clip_high: float | None, hunt_low: tuple, hunt_high: tuple) -> tuple[Option, Option]:
    return (Option("eps_clip", eps_clip, hunt=hunt_low, doc="lower clip range: ratio >= 1 - eps_clip"),
            Option("eps_clip_high", eps_clip_high, nullable=True, derive="eps_clip", hunt=hunt_high,
                   doc="upper clip range: ratio <= 1 + eps_clip_high; null means eps_clip"))


def _agg(hunt: bool = True) -> Option:
    return Option("loss_agg", "token-mean", "choice", LOSS_AGG, hunt=LOSS_AGG if hunt else None,
                  doc="how the per-token loss is reduced over valid tokens")

BOUNDARIES: dict[str, Boundary] = {}


def _register(b: Boundary) -> Boundary:
    BOUNDARIES[b.name] = b
    return b


_register(Boundary(
    "opsm_mask",
    "Off-policy sequence masking: reject a whole sequence whose valid-token KL to the policy "
    "that sampled it exceeds opsm_delta and whose mean advantage is negative; the PPO loss is then "
    "multiplied by the mask and reduced over valid tokens. The sampling policy is the rollout "
    "engine's (rollout_log_probs) where the batch holds its log-probs, else the old policy.",
    inputs=(_tok("log_probs"), _tok("old_log_probs"), _tok("advantages"), LOSS_MASK,
            _tok("rollout_log_probs", "the rollout (inference) engine's log-probs; where given, the sequence KL is "
                 "measured from them (both kinds of off-policy drift: updates and the inference mismatch), "
                 "the PPO ratio still from old_log_probs", required=False, absent_drawn=True)),
    outputs=(_tok("opsm_mask"), Port("opsm_clipfrac", "scalar", required=False), _tok("pg_loss", required=False),
             Port("reduced_policy_loss", "scalar", required=False)),
    options=(Option("opsm_delta", 0.1, hunt=(0.1, 0.0, 0.05, 0.5), doc="KL threshold above which a sequence is rejected"),
             *_clip(0.2, 0.2, (0.2, 0.1, 0.3), (0.2, 0.28, None)), _agg(hunt=False)),
    grad_inputs=("log_probs",),
    graph_inputs=("old_log_probs",),
))

# Decoupled PPO (AReaL): old_log_probs is the proximal policy, rollout_log_probs the behaviour
# policy; rejection_sampling is a target-specific mapping, passed through.
_DECOUPLED = (Option("use_decoupled_loss", False, "bool", requires=("rollout_log_probs",),
                     doc="AReaL's decoupled PPO: old_log_probs is the proximal policy, rollout_log_probs the behaviour"),
              Option("rejection_sampling", None, "mapping", nullable=True,
                     doc="a target's own rejection-sampling options, passed through as given"))
_POLICY_INPUTS = (_tok("log_probs"), _tok("old_log_probs"), _tok("advantages"), LOSS_MASK,
                  _tok("rollout_log_probs", "the rollout (inference) engine's log-probs, where the batch holds them",
                       required=False, absent_drawn=True))
_POLICY_OUTPUTS = (_tok("pg_loss"), _tok("clipfrac", required=False), Port("loss", "scalar"),
                   _tok("weights", required=False))

_register(Boundary(
    "policy_loss",
    "PPO clipped surrogate (asymmetric clip, optional dual clip), aggregated over valid tokens; "
    "importance_sampling_level token or sequence (GSPO-style); `weights` is the behaviour "
    "correction when a decoupled loss uses one.",
    inputs=_POLICY_INPUTS,
    outputs=_POLICY_OUTPUTS,
    options=(*_clip(0.2, None, (0.2, 0.1, 0.3), (None, 0.28, 0.2)),
             Option("eps_clip_c", None, nullable=True, hunt=(None, 3.0, 1.5), doc="dual-clip constant (negative advantages)"),
             _agg(),
             Option("importance_sampling_level", "token", "choice", ("token", "sequence"), hunt=("token", "sequence"),
                    doc="token: PPO's per-token ratio; sequence: GSPO's length-normalised sequence ratio"),
             *_DECOUPLED),
    grad_inputs=("log_probs",),
    graph_inputs=("old_log_probs",),
))

_register(Boundary(
    "cispo_loss",
    "CISPO: -sg(clip(ratio)) * A * log pi, gradient through log pi even where clipped.",
    inputs=_POLICY_INPUTS,
    outputs=_POLICY_OUTPUTS,
    options=(*_clip(1.0, 0.28, (1.0, 0.2), (0.28, 0.2)), _agg(), *_DECOUPLED),
    grad_inputs=("log_probs",),
    graph_inputs=("old_log_probs",),
))

_register(Boundary(
    "gspo_kl",
    "GSPO sequence-level KL: the valid-token mean of (old - new) log-prob, broadcast to every token.",
    inputs=(_tok("log_probs"), _tok("old_log_probs"), LOSS_MASK),
    outputs=(_tok("seq_kl"),),
    grad_inputs=("log_probs",),
    graph_inputs=("old_log_probs",),
))

_register(Boundary(
    "kl",
    "Per-token KL estimator between the policy and a reference (k1, k2, k3 / low_var_kl).",
    inputs=(_tok("log_probs"), _tok("ref_log_probs"), LOSS_MASK),
    outputs=(_tok("kl"),),
    options=(Option("kl_type", "k1", "choice", KL_TYPES + KL_STRAIGHT_THROUGH,
                    hunt=("k1", "k2", "k3", "low_var_kl", "k1+", "k3+"),
                    doc="k1 = log r, k2 = (log r)^2 / 2, k3 = r - 1 - log r (low_var_kl: k3 clamped); kl / mse are k1 / k2; "
                        "a name ending in + is straight-through: that estimator's value, k2's gradient"),),
    grad_inputs=("log_probs",),
))

_register(Boundary(
    "advantages",
    "From scalar rewards (and KL to the reference) to per-token advantages and returns, for "
    "an estimator (gae, grpo, reinforce_plus_plus, reinforce_plus_plus_baseline), with optional "
    "reward normalisation and no-EOS masking. grpo includes its group normalisation (group mean "
    "and std unless reward_norm says otherwise). `logged_kl` is the raw KL as the trainer stores "
    "it for logging after the call; `kl_rewards` is -kl_coef * KL where a trainer logs that instead.",
    inputs=(Port("rewards", "row", doc="scalar reward per sequence"),
            _tok("log_probs", required=False), _tok("ref_log_probs", required=False),
            _tok("values", required=False), LOSS_MASK,
            _tok("rollout_log_probs", "the rollout engine's log-probs where a trainer recomputes the policy's "
                 "before the advantages (AReaL recompute_logprob: its batch's logprobs, with log_probs as the "
                 "recomputed prox_logp); the KL in the reward still reads log_probs; absent: log_probs",
                 required=False, absent_drawn=True),
            _tok("attention_mask", required=False, dtype="mask"),
            Port("group", "row", "int", False, None, "group id per sequence (GRPO)")),
    outputs=(_tok("advantages"), _tok("returns"), _tok("logged_kl", required=False),
             _tok("token_rewards", required=False), _tok("kl_rewards", required=False)),
    options=(Option("estimator", "gae", "choice", ESTIMATORS,
                    hunt=("gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"),
                    doc="the advantage estimator (canonical names first, then target-specific ones)"),
             Option("kl_coef", 0.0, hunt=(0.0, 0.05, 0.1, 1.0), doc="KL penalty folded into the token rewards"),
             Option("kl_type", "k1", "choice", KL_TYPES, hunt=("k1", "k2", "k3")),
             Option("gamma", 1.0, hunt=(1.0, 0.9)), Option("lam", 1.0, hunt=(1.0, 0.95)),
             Option("reward_norm", None, "mapping", nullable=True, keys_of="reward_norm", hunt=(
                 None, {"mean_level": "batch", "std_level": None}, {"mean_level": "batch", "std_level": "batch"},
                 {"mean_level": "group", "std_level": "group"}, {"mean_level": "group", "std_level": None}),
                    doc="scalar reward normalisation before the estimator (the reward_norm boundary's options)"),
             Option("mask_no_eos_with_zero", False, "bool", hunt=(False, True),
                    doc="rows that never emitted EOS get reward 0"),
             Option("reward_clip", None, nullable=True, hunt=(None, 1.5)),
             Option("reward_bias", 0.0), Option("reward_scaling", 1.0),
             Option("adv_norm", None, "mapping", nullable=True, doc="a target's own advantage normalisation options"),
             Option("group_size", None, nullable=True, doc="fixed group size where a target needs one"),
             Option("normalize_advantages", False, "bool", hunt=(False, True),
                    doc="whiten advantages over valid tokens after the estimator")),
))

_register(Boundary(
    "reward_norm",
    "Scalar reward normalisation (batch or group mean / std); rows with mask 0 must not "
    "enter the statistics.",
    inputs=(Port("rewards", "row"), Port("mask", "row", "mask", False),
            Port("group", "row", "int", False)),
    outputs=(Port("rewards", "row"),),
    # eps None / mean_leave1out None / std_unbiased None: the target's own default
    options=(Option("mean_level", "batch", "choice", LEVELS, nullable=True, hunt=("batch", "group", None)),
             Option("std_level", "batch", "choice", LEVELS, nullable=True, hunt=("batch", "group", None)),
             Option("eps", None, nullable=True, hunt=(1e-5, 1e-6), doc="added to the std; null: the target's default"),
             Option("group_size", None, nullable=True),
             Option("mean_leave1out", None, "bool", nullable=True, doc="leave-one-out group mean; null: the target's default"),
             Option("std_unbiased", None, "bool", nullable=True, doc="unbiased std; null: the target's default")),
))

_register(Boundary(
    "gae",
    "Generalised advantage estimation over valid tokens (Schulman et al. 2016, eq. 16).",
    inputs=(_tok("token_rewards"), _tok("values"), LOSS_MASK),
    outputs=(_tok("advantages"), _tok("returns")),
    options=(Option("gamma", 1.0, hunt=(1.0, 0.99, 0.9)), Option("lam", 1.0, hunt=(1.0, 0.95, 0.9))),
))

_register(Boundary(
    "is_correction",
    "Importance-sampling correction between the rollout engine and the trainer: a detached "
    "per-token weight (off_policy_is: clip(pi_theta/pi_rollout); vanilla_tis: "
    "clip(pi_old/pi_rollout) on the PPO loss; icepop: masked outside [low, high]) and the "
    "corrected loss, whose gradient must flow only through log pi. vanilla_tis and icepop "
    "apply their weight to the PPO loss with eps_clip / eps_clip_high.",
    inputs=(_tok("log_probs"), _tok("old_log_probs"), _tok("rollout_log_probs"),
            _tok("advantages"), LOSS_MASK),
    outputs=(_tok("weights"), _tok("pg_loss"), Port("loss", "scalar")),
    options=(Option("method", "off_policy_is", "choice", ("off_policy_is", "vanilla_tis", "icepop"),
                    hunt=("off_policy_is", "vanilla_tis", "icepop")),
             *_clip(0.2, 0.2, (0.2, 0.1), (0.2, 0.28)),
             Option("tis_clip_low", 0.0, hunt=(0.0, 0.5, 0.8)), Option("tis_clip", 2.0, hunt=(2.0, 1.2, 5.0)),
             _agg()),
    grad_inputs=("log_probs",),
    graph_inputs=("old_log_probs",),
))

_register(Boundary(
    "loss_agg",
    "Loss aggregation over valid tokens: token-mean, seq-mean-token-mean, seq-mean-token-sum.",
    inputs=(_tok("values"), LOSS_MASK),
    outputs=(Port("loss", "scalar"),),
    options=(Option("mode", "token-mean", "choice", LOSS_AGG, hunt=LOSS_AGG),),
    grad_inputs=("values",),
))

# --- surfaces beside the loss: log-probs from logits, the critic's values, logged metrics,
# and the masked reductions every loss uses ------------------------------------------------

_register(Boundary(
    "logprobs",
    "Per-token log-probabilities and entropy from the policy's logits: log_probs[b, t] = "
    "log_softmax(logits[b, t] / temperature)[tokens[b, t]], entropy[b, t] the entropy of that "
    "softmax. logits[b, t] is the distribution that predicts token t (the model's output one "
    "position earlier); only loss_mask positions (the response) matter. The caller's logits "
    "must be left as they were.",
    inputs=(Port("logits", "vocab", mask="loss_mask", doc="[B, T, V] logits that predict token t"),
            Port("tokens", "token", "int", mask="loss_mask", doc="the token id at each position, in [0, V)"),
            LOSS_MASK),
    outputs=(_tok("log_probs"), _tok("entropy", required=False)),
    options=(Option("temperature", 1.0, hunt=(1.0, 0.5, 2.0),
                    doc="the sampling temperature: logits are divided by it exactly once before the softmax"),),
    grad_inputs=("logits",),
))

_register(Boundary(
    "actor_logprobs",
    "The actor's batch-to-log-probs method: a padded batch (tokens, attention_mask, the response as "
    "loss_mask) goes through the model in micro-batches (fixed size, or a token budget with dynamic "
    "batching), padded or packed (remove padding), and per-token log_probs and entropy of the response "
    "come back in the batch's row order. `logits` is what the model returns, aligned as the logprobs "
    "boundary's (logits[b, t] predicts token t); an adapter hands them to the trainer through a stand-in "
    "model keyed by the ids it is given, so the trainer's own batching, packing and slicing run. The "
    "result must be log_softmax(logits[b, t] / temperature)[tokens[b, t]] at every loss_mask token, "
    "whatever the batching options.",
    inputs=(Port("logits", "vocab", mask="loss_mask", doc="[B, T, V] the model's logits that predict token t"),
            Port("tokens", "token", "int", mask="loss_mask", doc="the input ids, in [0, V)"),
            _tok("attention_mask", "1 at real tokens (prompt and response); 0 at padding, left or right",
                 dtype="mask"),
            LOSS_MASK),
    outputs=(_tok("log_probs"), _tok("entropy", required=False)),
    options=(Option("temperature", 1.0, hunt=(1.0, 0.5, 2.0),
                    doc="the sampling temperature: logits are divided by it exactly once before the softmax"),
             Option("micro_batch_size", None, nullable=True, hunt=(None, 1, 2, 3),
                    doc="rows per forward pass; null: the whole batch in one"),
             Option("use_dynamic_bsz", False, "bool", hunt=(False, True),
                    doc="micro-batches built to a token budget (max_token_len) instead of a row count"),
             Option("max_token_len", None, nullable=True, hunt=(None, 8, 16),
                    doc="the token budget per micro-batch with use_dynamic_bsz; null: the longest row's real "
                        "length (the tightest budget, the most micro-batches)"),
             Option("use_remove_padding", False, "bool", hunt=(False, True),
                    doc="padding removed and the rows packed into one sequence before the forward pass")),
    grad_inputs=("logits",),
))

_register(Boundary(
    "values",
    "The critic's value path: the value head's scalar output per position -> the per-token "
    "values GAE reads. value_head[b, t] is the head's output at the position that predicts "
    "token t (aligned as logits are); values[b, t] must equal it at every loss_mask token: no "
    "temperature, no shift.",
    inputs=(_tok("value_head", "the value head's output at the position that predicts token t"), LOSS_MASK),
    outputs=(_tok("values"),),
    options=(Option("temperature", 1.0, hunt=(1.0, 0.5, 2.0),
                    doc="the rollout temperature configured beside the critic; values must not depend on it"),),
    grad_inputs=("value_head",),
))

METRIC_AGG = ("token-mean", "seq-mean-token-mean")

_register(Boundary(
    "metrics",
    "The metrics a policy loss logs beside the loss, each reduced over valid tokens "
    "(metric_agg): clipfrac, the share of tokens where PPO's clipped branch is the one taken; "
    "clipfrac_lower, the share where the dual clip (A < 0) binds; approx_kl, the k1 estimate "
    "of KL(pi_old || pi) = old_log_probs - log_probs; ratio_mean / ratio_max / ratio_min of "
    "pi / pi_old; kl_loss, the KL estimator of kl_type against ref_log_probs.",
    inputs=(_tok("log_probs"), _tok("old_log_probs"), _tok("advantages"), LOSS_MASK,
            _tok("ref_log_probs", required=False),
            _tok("rollout_log_probs", "the rollout engine's log-probs where a trainer's decoupled loss reads them "
                 "as the behaviour policy (old_log_probs then the proximal one)", required=False, absent_drawn=True)),
    outputs=(Port("clipfrac", "scalar", doc="every trainer logs it"),
             Port("clipfrac_lower", "scalar", required=False, doc="the dual-clip fraction, where logged"),
             Port("approx_kl", "scalar", required=False, doc="the policy-vs-old KL metric, where logged"),
             Port("ratio_mean", "scalar", required=False), Port("ratio_max", "scalar", required=False),
             Port("ratio_min", "scalar", required=False),
             Port("kl_loss", "scalar", required=False, doc="the logged KL-to-reference loss, where logged")),
    options=(*_clip(0.2, None, (0.2, 0.1, 0.3), (None, 0.28)),
             Option("eps_clip_c", None, nullable=True, hunt=(None, 3.0, 1.5), doc="dual-clip constant (negative advantages)"),
             Option("metric_agg", "token-mean", "choice", METRIC_AGG, hunt=METRIC_AGG,
                    doc="how a per-token metric is reduced: over all valid tokens, or per sequence then over sequences"),
             Option("kl_type", "k1", "choice", KL_TYPES, hunt=("k1", "k3"),
                    doc="the estimator kl_loss logs (with ref_log_probs)")),
))

_NOT_WHITEN = ("op", ("mean", "sum", "var"))

_register(Boundary(
    "masked_reduce",
    "The masked reductions every loss uses, over loss_mask positions only: mean, sum, variance "
    "(op) of the valid values of the batch (dim all -> result) or of each row (dim row -> "
    "row_result), or whitening (op whiten -> whitened, (x - mean) / sqrt(var + eps) at valid "
    "positions). Values at masked positions, NaN and Inf included, must not matter; a row or "
    "batch with no valid value gives 0.",
    inputs=(_tok("values"), LOSS_MASK),
    outputs=(Port("result", "scalar", required=False, required_when=(_NOT_WHITEN, ("dim", ("all",)))),
             Port("row_result", "row", required=False, required_when=(_NOT_WHITEN, ("dim", ("row",)))),
             Port("whitened", "token", required=False, mask="loss_mask", required_when=(("op", ("whiten",)),))),
    options=(Option("op", "mean", "choice", ("mean", "sum", "var", "whiten"), hunt=("mean", "sum", "var", "whiten"),
                    doc="the reduction"),
             Option("dim", "all", "choice", ("all", "row"), hunt=("all", "row"),
                    doc="all: over every valid value of the batch; row: over each row's valid values"),
             Option("unbiased", True, "bool", hunt=(True, False), doc="var and whiten: Bessel's correction n / (n - 1)"),
             Option("shift_mean", True, "bool", hunt=(True, False),
                    doc="whiten: false adds the mean back after scaling"),
             Option("eps", None, nullable=True, doc="whiten: the stabiliser; null: the target's default")),
    grad_inputs=("values",),
))


def get(name: str) -> Boundary:
    try:
        return BOUNDARIES[name]
    except KeyError:
        raise KeyError(f"unknown boundary {name!r} (known: {', '.join(sorted(BOUNDARIES))})") from None
