"""Hunt: find invariant violations with no hand-made trigger, shrink them to minimal scenarios.

A *property* is one generic invariant family instantiated on a boundary, over inputs and
configs drawn from `sentinel.strategies` (plus the perturbed copies the family needs: a
row permutation, a variant that changes only the no-EOS rows' rewards, ...). No property
knows a trigger; each says what must hold for every input.

How a hunt runs
- The parent (`hunt()`, in the CLI's process) checks the target out, starts one worker
  (`sentinel.worker`, the only process that imports torch and the target) and schedules
  *rounds*: one property, up to N examples or S seconds. Properties take turns (round
  robin, each round twice as long as that property's last), so a cheap bug anywhere is
  found early and a long hunt spreads evenly.
- A round is one `{"type": "hunt"}` job: the worker forks (on CPU), and the child runs
  Hypothesis itself (`hypothesis.find`) with the adapter in-process, so each round trip
  carries many examples; a crash, exit or hang costs that round, not the hunt. The child
  streams `{"event": "progress"}` lines and returns one result.
- Hypothesis draws examples, evaluates the property (`check`: the same plan, boundary calls
  and pure invariant code `sentinel run` uses) and, on a violation, shrinks it to a
  minimal counterexample. Its example database (default `.sentinel/hunt-db`) is keyed by
  (target, commit, plant, property): a known failure is replayed first.
- Each finding becomes a ready-to-run scenario YAML (`--out`, default `reports/hunt/`);
  `sentinel run` on it reproduces the violation. The report (kind "hunt") has one result
  per property and a `hunt` section: examples, time, invariants per boundary, findings.

Not applicable is not a finding: a config the target raises `Unsupported` for, an output it
does not produce, or an unmet precondition (no masked position to perturb) rejects the
example; Hypothesis then draws another.
"""

from __future__ import annotations

import collections
import math
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import strategies as S
from .boundaries import get as get_boundary
from .invariants import REGISTRY, Invariant, RunObservation
from .invariants.base import Outcome
from .observe import observe

DEFAULT_DB = Path(".sentinel") / "hunt-db"
DEFAULT_OUT = Path("reports") / "hunt"
FIRST_ROUND = 20  # examples in a property's first round; each later round doubles
SHRINK_TIME = 20.0  # seconds of shrinking per finding before the best so far is kept
PROGRESS_EVERY = 0.5  # seconds between progress lines from a round
PROBE_GIVE_UP = 12  # inputs the target declines in every config before a property is not applicable

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


class NotApplicable(Exception):
    """The drawn example does not meet the property's precondition (the invariant's static
    checks): rejected, never a finding."""


# --- properties -----------------------------------------------------------------------------

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


# --- one example ----------------------------------------------------------------------------

def scenario_for(prop: Property, ex: S.Example):
    """The in-memory scenario of one example (what the YAML of a finding loads to)."""
    from .spec import Scenario

    inv = prop.invariant(ex)
    variants = {n: ({**ex.inputs, **ov}, {}) for n, ov in ex.variants.items()}
    sc = Scenario(id=f"hunt-{prop.name}", title=prop.doc, description="", boundary=ex.boundary, targets=["*"],
                  config=dict(ex.config), inputs=dict(ex.inputs), variants=variants, grads=[], invariants=[inv],
                  provenance=[], tags=["hunt"])
    problems = inv.check(sc)
    if problems:
        raise NotApplicable("; ".join(m for _, m in problems))
    return sc


def check(prop: Property, ex: S.Example, adapter, device) -> tuple[Outcome, dict[str, RunObservation], dict | None]:
    """Evaluate one example: plan the runs its invariant needs, call the target, evaluate.
    Raises NotApplicable, or the adapter's Unsupported, for an example that does not apply."""
    from .runner import plan

    sc = scenario_for(prop, ex)
    obs, function = {}, None
    for run in plan(sc):
        o, fn = observe(adapter, device, sc.boundary, run.inputs, run.config, run.grads)
        # inputs come back in their own dtypes, as runner.evaluate decodes them
        o["inputs_after"] = {n: a.astype(run.inputs[n].dtype) for n, a in o["inputs_after"].items()}
        obs[run.name] = RunObservation(inputs=run.inputs, **o)
        function = function or fn
    with np.errstate(all="ignore"):
        outcome = sc.invariants[0].evaluate(obs, sc)
    return outcome, obs, function


def fingerprint(ex: S.Example) -> str:
    return repr((ex.config, {n: a.tobytes() for n, a in ex.inputs.items()},
                 {n: {k: a.tobytes() for k, a in v.items()} for n, v in ex.variants.items()}, ex.params))


# --- one round, inside the worker (forked child on CPU) -------------------------------------

def probe(prop: Property, adapter, device) -> tuple[dict[str, list[Any]], str | None]:
    """Which config choices does the target not have? From the property's simplest
    applicable example, try each other choice of each config key alone; the ones the
    target raises Unsupported for are excluded from this hunt's draws. Returns
    (excluded choices, reason) where a reason means the property does not apply at all
    (the simplest example is itself unsupported, or an output it checks is absent)."""
    from dataclasses import replace

    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import HypothesisException

    from sentinel_adapters.base import Unsupported

    seen: dict[str, Any] = {"declined": 0}
    default = {k: v[0] for k, v in prop.config_choices().items()}

    def runs(ex: S.Example) -> bool:
        """The drawn inputs are applicable and the target runs them, with the default config
        (every key's first choice), else (first input only) the default with one key changed,
        else the drawn config; Unsupported for all of them is a decline."""
        if seen["declined"] >= PROBE_GIVE_UP:  # the target declines whatever is drawn: stop here
            seen["gave_up"] = True
            return True
        configs = [default, ex.config]
        if seen["declined"] == 0:  # the default declined on a first input: try it with one key changed
            configs[1:1] = [{**default, k: v} for k, vs in prop.config_choices().items() for v in vs[1:]]
        for cfg in configs:
            cand = replace(ex, config=dict(cfg))
            try:
                outcome, _, _ = check(prop, cand, adapter, device)
            except NotApplicable:
                return False
            except Unsupported as e:
                seen.setdefault("unsupported", str(e).splitlines()[0] if str(e) else "Unsupported")
                continue
            except Exception:  # noqa: BLE001 - the rounds will meet and report it
                seen["error"] = True
                return False
            if outcome.verdict == "skipped":
                seen.setdefault("skipped", outcome.message)
                continue
            seen["base"] = cand
            return True
        seen["declined"] += 1
        return False

    try:
        find(prop.strategy(), runs, settings=settings(  # the first runnable example; no shrinking
            max_examples=200, database=None, deadline=None, phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck)))
    except HypothesisException:
        pass
    base = seen.get("base")
    if base is None:  # nothing ran: not applicable if the target only ever declined
        return {}, None if seen.get("error") else (seen.get("skipped") or seen.get("unsupported"))
    excluded: dict[str, list[Any]] = {}
    for key, choices in prop.config_choices().items():
        for v in choices:
            if v == base.config.get(key):
                continue
            try:
                check(prop, replace(base, config={**base.config, key: v}), adapter, device)
            except Unsupported:
                excluded.setdefault(key, []).append(v)
            except Exception:  # noqa: BLE001
                pass
    return excluded, None


def run_round(adapter, device, job: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Hypothesis on one property for up to job.max_examples examples / job.time_limit s,
    then shrinking. Returns counts, and the minimal counterexample if one was found."""
    import random

    from hypothesis import HealthCheck, Phase, find, reject, settings
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.errors import NoSuchExample, Unsatisfiable

    from sentinel_adapters.base import Unsupported

    prop = PROPERTIES[job["property"]]
    t_probe = time.monotonic()
    exclude = job.get("exclude") or {}
    if job.get("probe"):
        exclude, why = probe(prop, adapter, device)
        if why:
            return {"status": "ok", "property": prop.name, "examples": 0, "rejected": 0, "errors": 0,
                    "shrink_calls": 0, "timed_out": 0, "note": "", "not_applicable": why, "exclude": {},
                    "unsupported_reasons": [why], "error_sample": None, "duration_s": time.monotonic() - t_probe,
                    "ran_out_of_time": False}
    t0 = time.monotonic()
    deadline = t0 + float(job.get("time_limit", 10.0))
    shrink_time = float(job.get("shrink_time", SHRINK_TIME))
    st = {"examples": 0, "rejected": 0, "errors": 0, "shrink_calls": 0, "timed_out": 0}
    unsupported: Counter[str] = Counter()
    first: dict[str, Any] = {}
    best: dict[str, Any] = {}
    error_sample: dict[str, Any] | None = None
    last_emit = [t0]

    def progress(force: bool = False) -> None:
        now = time.monotonic()
        if force or now - last_emit[0] >= PROGRESS_EVERY:
            last_emit[0] = now
            emit({"event": "progress", "property": prop.name, "examples": st["examples"],
                  "shrink_calls": st["shrink_calls"], "found": bool(best), "elapsed_s": round(now - t0, 3)})

    def condition(ex: S.Example) -> bool:
        nonlocal error_sample
        now = time.monotonic()
        if not best and now > deadline:  # the round's time is up: let Hypothesis run out
            st["timed_out"] += 1
            return False
        if best and now - first["t"] > shrink_time and fingerprint(ex) != best["fp"]:
            return False  # shrinking budget spent: only the best so far is still a failure
        try:
            outcome, obs, function = check(prop, ex, adapter, device)
        except (NotApplicable, Unsupported) as e:
            st["rejected"] += 1
            unsupported[str(e).splitlines()[0][:300] if str(e) else type(e).__name__] += 1
            reject()
        except Exception as e:  # noqa: BLE001 - target code raised on a drawn input
            st["rejected"] += 1
            st["errors"] += 1
            if error_sample is None:
                import traceback
                error_sample = {"type": type(e).__name__, "message": str(e)[:2000],
                                "traceback": traceback.format_exc()[-4000:], "example": repr(ex)[:4000]}
            reject()
        if outcome.verdict in ("skipped", "error"):
            st["rejected"] += 1
            unsupported[f"{outcome.verdict}: {outcome.message}"[:300]] += 1
            reject()
        if best:
            st["shrink_calls"] += 1
        else:
            st["examples"] += 1
        progress()
        if outcome.verdict != "violated":
            return False
        if not best:
            first.update(t=time.monotonic(), examples=st["examples"])
        best.update(ex=ex, fp=fingerprint(ex), outcome=outcome, base=obs["base"], function=function)
        return True

    db = DirectoryBasedExampleDatabase(job["db"]) if job.get("db") else None
    key = job["db_key"].encode()
    strategy = prop.strategy(exclude)
    generate = (Phase.generate, Phase.target, Phase.shrink)
    if job.get("seed") is None:  # one search: replay known failures, generate, shrink, save
        attempts = [((Phase.explicit, Phase.reuse) + generate, None)]
    else:  # Hypothesis never mixes a fixed seed with its database: replay first, then the seeded search
        attempts = [((Phase.reuse, Phase.shrink), None)] if db is not None else []
        attempts.append((generate, random.Random(job["seed"])))
    note = ""
    found = None
    for phases, rnd in attempts:
        s = settings(max_examples=max(1, int(job.get("max_examples", 100))), database=db, deadline=None,
                     phases=phases, suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        try:
            found = find(strategy, condition, settings=s, random=rnd, database_key=key)
        except NoSuchExample:
            pass
        except Unsatisfiable as e:
            note = f"no applicable example: {e}"
        except Exception as e:  # noqa: BLE001 - e.g. Flaky: a nondeterministic target; keep the best seen
            note = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if best:
            break
    progress(force=True)
    out: dict[str, Any] = {"status": "ok", "property": prop.name, **st, "note": note, "exclude": exclude,
                           "unsupported_reasons": [f"{r} (x{n})" for r, n in unsupported.most_common(5)],
                           "error_sample": error_sample, "duration_s": time.monotonic() - t_probe,
                           "probe_s": t0 - t_probe,
                           "ran_out_of_time": st["timed_out"] > 0}
    if best:
        ex, o = best["ex"], best["outcome"]
        if found is not None and found is not ex:  # find() returns the final replay, the last True
            note += " (find returned a different example than the last violation)"
        out["finding"] = {
            "config": ex.config, "inputs": {n: a.tolist() for n, a in ex.inputs.items()},
            "dtypes": {n: str(a.dtype) for n, a in ex.inputs.items()},
            "variants": {n: {k: a.tolist() for k, a in v.items()} for n, v in ex.variants.items()},
            "params": ex.params, "invariant": prop.invariant(ex).summary(),
            "outcome": {"message": o.message, "observed": _plain(o.observed), "expected": _plain(o.expected),
                        "difference": _plain(o.difference), "positions": o.positions, "details": _plain(o.details)},
            "observations": {n: _plain(a.tolist()) for n, a in best["base"].outputs.items()},
            "function": best["function"], "examples_to_first": first["examples"],
            "time_to_first_s": first["t"] - t_probe}
        out["note"] = note
    return out


def _plain(x: Any) -> Any:
    """JSON-safe python values (numpy scalars and arrays to lists)."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


# --- findings as scenario YAML ----------------------------------------------------------------

class _Flow(list):
    """A tensor: written inline, [[0.0, 1.0], ...]."""


def _yaml():
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    return yaml, Dumper


def _num(v: Any, mask: bool) -> Any:
    if isinstance(v, list):
        return [_num(x, mask) for x in v]
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    f = float(v)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if mask:
        return int(f)
    # the shortest decimal that parses back to the same float32 (the loader's dtype)
    return float(np.format_float_positional(np.float32(f), unique=True, trim="0")) if f == float(np.float32(f)) else f


def _tensor(name: str, values: list, boundary: str) -> Any:
    port = get_boundary(boundary).input(name)
    mask = port is not None and port.dtype == "mask"
    v = _num(values, mask)
    return _Flow(v) if isinstance(v, list) else v


def slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9.]+", "-", text.lower())).strip("-.") or "x"


def finding_document(prop: Property, finding: dict[str, Any], target_key: str, provenance: str,
                     stats: dict[str, Any]) -> tuple[str, str]:
    """(scenario id, YAML text) of a ready-to-run scenario reproducing the finding."""
    yaml, Dumper = _yaml()
    sid = f"hunt-{slug(target_key)}-{slug(prop.name)}"
    b = prop.boundary
    (family, body), = finding["invariant"].items()
    body = {k: (_Flow(v) if isinstance(v, list) else v) for k, v in body.items()}
    doc: dict[str, Any] = {
        "id": sid,
        "title": f"hunt: {prop.doc}",
        "description": (f"Minimal counterexample found by `sentinel hunt` on {target_key} and shrunk by Hypothesis "
                        f"({stats['examples_to_first']} examples, {stats['time_to_first_s']:.2f} s to the first "
                        f"violation; {stats['shrink_calls']} shrink calls). Property {prop.name}: "
                        f"{finding['outcome']['message']}"),
        "boundary": b,
        "targets": ["*"],
        "provenance": [provenance],
        "tags": ["hunt", family],
        "config": {k: v for k, v in finding["config"].items()},
        "inputs": {n: _tensor(n, v, b) for n, v in finding["inputs"].items()},
    }
    if finding["variants"]:
        doc["variants"] = {n: {"description": _variant_doc(n), "inputs": {k: _tensor(k, v, b) for k, v in ov.items()}}
                           for n, ov in finding["variants"].items()}
    doc["invariants"] = [{family: body}]
    head = f"# Found by `sentinel hunt` on {target_key}: property {prop.name} ({family}).\n"
    text = head + yaml.dump(doc, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120,
                            allow_unicode=True)
    return sid, text


def _variant_doc(name: str) -> str:
    return {"no_eos_rewards": "only the rewards of rows without EOS change",
            "masked_row_rewards": "only the rewards of rows with mask 0 change"}.get(name, name)


# --- the driver (parent process) ------------------------------------------------------------

@dataclass
class _State:
    prop: Property
    examples: int = 0
    rejected: int = 0
    errors: int = 0
    shrink_calls: int = 0
    rounds: int = 0
    empty_rounds: int = 0
    duration_s: float = 0.0
    search_before: float = 0.0  # search seconds of the hunt before this property's current round
    status: str = "running"
    reason: str = ""
    reasons: list[str] = field(default_factory=list)
    error_sample: dict | None = None
    exclude: dict | None = None  # config choices the target does not have (probed in round 1)
    finding: dict | None = None
    examples_to_first: int | None = None
    time_to_first_s: float | None = None

    @property
    def done(self) -> bool:
        return self.status != "running"


def db_key(target_key: str, commit: str | None, prop: Property) -> str:
    return f"rl-sentinel-hunt/{target_key}/{commit or '-'}/{prop.boundary}/{prop.name}"


def hunt(spec, *, boundaries: list[str] | None = None, families: list[str] | None = None,
         names: list[str] | None = None, max_examples: int = 300, time_budget: float = 60.0,
         seed: int | None = None, db: str | Path | None = DEFAULT_DB, out_dir: str | Path | None = DEFAULT_OUT,
         timeout: float = 60.0, shrink_time: float = SHRINK_TIME, command: list[str] | None = None,
         first: bool = False, verify: bool = True, jobs: int = 1, until: list[str] | None = None,
         on_event: Callable[[dict[str, Any]], None] | None = None):
    """Hunt `spec` (a runner.TargetSpec) for violations of the selected properties; return a
    Report of kind "hunt" (findings written as scenario YAML under `out_dir`).

    first: stop at the first finding (after shrinking it).
    jobs: worker processes hunting in parallel (each takes rounds of properties in turn).
    until: stop as soon as these properties have a verdict (the others keep theirs so far).
    verify: load each finding's YAML back and run it as `sentinel run` would (same worker,
      the scenario job path); HuntFinding.reproduced records the verdict."""
    from contextlib import ExitStack

    from .report import (Environment, ExceptionInfo, FunctionInfo, HuntFinding, HuntProperty, HuntSummary,
                         InvariantResult, Report, ScenarioResult, Target, statistics)
    from .runner import LOAD_TIMEOUT, WorkerDied, WorkerHandle, checkout_root
    from .spec import load_text

    emit = on_event or (lambda e: None)
    props = select(boundaries, families, names)
    if not props:
        raise ValueError("no hunt property matches the given --boundary / --invariant filters "
                         f"(known: {', '.join(sorted(PROPERTIES))})")
    t_start = time.perf_counter()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    target = Target(name=spec.name, repo=spec.repo, device=spec.device, plant=spec.plant)
    states = [_State(p) for p in props]
    env: dict[str, Any] = {}
    search_s, startup_s = 0.0, 0.0
    db_path = str(Path(db).resolve()) if db else None

    with ExitStack() as stack:
        root = checkout_root(stack, spec, target)
        header = {"target": spec.name, "root": root, "device": spec.device, "timeout": timeout,
                  "options": {"plant": spec.plant, "compile": spec.compile}}
        lock = threading.RLock()

        def start() -> WorkerHandle | None:
            nonlocal env
            w = WorkerHandle(header)
            hello = w.receive(LOAD_TIMEOUT)
            with lock:
                if hello["event"] == "load_error":
                    target.load_error = ExceptionInfo(**hello["error"])
                    w.close()
                    return None
                info, env = hello["target_info"], hello["environment"]
                target.version, target.stubs = info.get("version"), info.get("stubs", [])
                target.import_s, target.device = info.get("import_s"), env.get("device", spec.device)
                supported = set(info.get("boundaries", []))
                for s in states:
                    if not s.done and s.prop.boundary not in supported:
                        s.status, s.reason = "unsupported", f"target {spec.key!r} has no {s.prop.boundary!r} boundary"
            return w

        # One lane per worker process (--jobs). Lanes take rounds from one round robin over the
        # properties; a property is in at most one lane at a time.
        lanes = max(1, int(jobs))
        workers: list[WorkerHandle | None] = [None] * lanes
        if target.load_error is None:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(lanes) as pool:
                workers = list(pool.map(lambda _: _try_start(start, WorkerDied, ExceptionInfo, target), range(lanes)))
            startup_s = time.perf_counter() - t0
        if target.load_error is not None or not any(workers):
            if target.load_error is None:
                target.load_error = ExceptionInfo(type="WorkerDied", message="no worker could be started")
            for s in states:
                s.status, s.reason = "error", f"target {spec.key!r} could not be loaded: {target.load_error.message}"
        emit({"event": "start", "properties": len(states), "startup_s": startup_s, "target": spec.key,
              "jobs": lanes})

        t_search = time.perf_counter()
        queue = collections.deque(states)
        running: set[int] = set()

        def stop() -> bool:
            return (target.load_error is not None or time.perf_counter() - t_search >= time_budget
                    or (first and any(x.status == "violated" for x in states))
                    or (bool(until) and all(x.done for x in states if x.prop.name in until)))

        def pick() -> _State | None | bool:
            """The next property to run a round of; None: wait; False: the hunt is over."""
            with lock:
                if stop():
                    return False
                if all(x.done for x in states):
                    return False
                for _ in range(len(queue)):
                    s = queue[0]
                    queue.rotate(-1)
                    if not s.done and id(s) not in running:
                        running.add(id(s))
                        return s
                return None

        def lane(i: int) -> None:
            while True:
                s = pick()
                if s is False:
                    return
                if s is None:
                    time.sleep(0.005)
                    continue
                try:
                    with lock:
                        left = time_budget - (time.perf_counter() - t_search)
                        n = min(max_examples - s.examples, FIRST_ROUND * 2 ** s.rounds)
                        share = left * lanes / max(1, sum(1 for x in states if not x.done))
                        time_limit = max(0.2, min(left, max(share, 0.5) * (1 + s.rounds)))
                        s.search_before = time.perf_counter() - t_search
                    job = {"type": "hunt", "scenario": s.prop.name, "property": s.prop.name, "max_examples": n,
                           "time_limit": time_limit, "shrink_time": shrink_time, "db": db_path,
                           "db_key": db_key(spec.key, target.commit, s.prop),
                           "probe": s.exclude is None, "exclude": s.exclude or {},
                           "seed": None if seed is None else f"{seed}:{spec.key}:{s.prop.name}:{s.rounds}"}
                    try:
                        if workers[i] is None:
                            workers[i] = start()
                            if workers[i] is None:
                                return
                        w = workers[i]
                        w.send(job)
                        while True:
                            msg = w.receive(time_limit + shrink_time + timeout)
                            if msg.get("event") == "progress":
                                emit({**msg, "hunt_elapsed_s": time.perf_counter() - t_search})
                                continue
                            res = msg
                            break
                    except WorkerDied as e:
                        workers[i] = None
                        res = {"status": "error", "error": {"type": "WorkerDied", "message": str(e), "traceback": ""}}
                    with lock:
                        _merge(s, res, max_examples)
                        emit({"event": "round", "property": s.prop.name, "status": s.status, "examples": s.examples,
                              "hunt_elapsed_s": time.perf_counter() - t_search, "round": s.rounds})
                finally:
                    with lock:
                        running.discard(id(s))

        if target.load_error is None:
            with ThreadPoolExecutor(lanes) as pool:
                for f in [pool.submit(lane, i) for i in range(lanes)]:
                    f.result()
        search_s = time.perf_counter() - t_search
        for s in states:
            if s.status == "running" and target.load_error is not None:
                s.status = "error"
                s.reason = f"target {spec.key!r} could not be (re)loaded: {target.load_error.message}"
        worker = next((w for w in workers if w is not None), None)
        for w in workers:
            if w is not None and w is not worker:
                w.close()

        # findings -> scenario YAML, each loaded back and (verify) run through the scenario job path
        provenance = _provenance(spec, target.commit, seed)
        documents: dict[str, tuple[str, str, str | None]] = {}
        for s in states:
            if not s.finding:
                continue
            sid, text = finding_document(s.prop, s.finding, spec.key, provenance, {
                "examples_to_first": s.examples_to_first, "time_to_first_s": s.time_to_first_s,
                "shrink_calls": s.shrink_calls})
            sc, = load_text(text, f"<hunt finding {sid}>")  # the file must load as a scenario
            verdict = None
            if verify:
                try:
                    if worker is None:
                        worker = start()
                    if worker is not None:
                        from .runner import evaluate, job, plan
                        runs = plan(sc)
                        worker.send(job(sc, runs))
                        res = worker.receive(timeout + 30)
                        verdict = evaluate(sc, runs, res, spec.key).verdict
                except WorkerDied as e:
                    worker, verdict = None, f"error: {e}"
            documents[s.prop.name] = (sid, text, verdict)
        if worker is not None:
            worker.close()

    # --- report ------------------------------------------------------------------------
    out = Path(out_dir) if out_dir else None
    results, hp, findings = [], [], []
    for s in states:
        if s.status == "running":
            s.status = "holds"
        p = s.prop
        cfg = {**get_boundary(p.boundary).config}
        res_kw: dict[str, Any] = {}
        if s.finding:
            f = s.finding
            sid, text, verdict = documents[p.name]
            file = None
            if out is not None:
                from .report import write_atomic
                file = str(out / f"{sid}.yaml")
                write_atomic(file, text)
            o = f["outcome"]
            (family, body), = f["invariant"].items()
            inv = InvariantResult(family=family, config=f["invariant"], verdict="violated", message=o["message"],
                                  observed=o["observed"], expected=o["expected"], difference=o["difference"],
                                  positions=o["positions"], details=o["details"] or {})
            cfg.update(f["config"])
            rows, tokens, valid = _size(f)
            res_kw = dict(file=file or "", reason=f"{family}: {o['message']}", invariants=[inv], inputs=f["inputs"],
                          observations=f["observations"],
                          function=FunctionInfo(**f["function"]) if f.get("function") else None)
            findings.append(HuntFinding(property=p.name, boundary=p.boundary, family=p.family, scenario_id=sid,
                                        file=file, rows=rows, tokens=tokens, valid_tokens=valid,
                                        examples_to_first=s.examples_to_first or 0,
                                        time_to_first_s=round(s.time_to_first_s or 0.0, 4),
                                        shrink_calls=s.shrink_calls, message=o["message"],
                                        reproduced=None if verdict is None else verdict == "violated"))
        elif s.status == "holds":
            res_kw = dict(reason=f"{s.examples} examples, no violation",
                          invariants=[InvariantResult(family=p.family, config={p.family: {}}, verdict="held",
                                                      message=f"held on {s.examples} generated examples")])
        else:
            res_kw = dict(reason=s.reason)
        err = (ExceptionInfo(**{k: s.error_sample[k] for k in ("type", "message", "traceback")})
               if s.error_sample else None)
        results.append(ScenarioResult(id=p.name, title=p.doc, boundary=p.boundary, target=spec.key,
                                      verdict=s.status, config=cfg, provenance=[provenance],
                                      duration_s=round(s.duration_s, 4),
                                      exception_info=err if s.status == "error" else None,
                                      **{"file": "", **res_kw}))
        hp.append(HuntProperty(property=p.name, boundary=p.boundary, family=p.family, doc=p.doc, status=s.status,
                               reason=s.reason, examples=s.examples, rejected=s.rejected, errors=s.errors,
                               shrink_calls=s.shrink_calls, rounds=s.rounds, duration_s=round(s.duration_s, 4),
                               unsupported_reasons=s.reasons[:5], excluded_config=s.exclude or {},
                               error_sample=err))
    per_boundary: dict[str, list[str]] = {}
    for s in states:
        if s.status in ("holds", "violated"):
            per_boundary.setdefault(s.prop.boundary, []).append(s.prop.family)
    total = sum(s.examples for s in states)
    summary = HuntSummary(seed=seed, max_examples=max_examples, time_budget_s=time_budget, database=db_path,
                          out_dir=str(out) if out else None, examples=total, rejected=sum(s.rejected for s in states),
                          shrink_calls=sum(s.shrink_calls for s in states), search_s=round(search_s, 3),
                          startup_s=round(startup_s, 3),
                          examples_per_s=round(total / search_s, 1) if search_s > 0 else 0.0,
                          invariants_per_boundary={b: sorted(set(v)) for b, v in sorted(per_boundary.items())},
                          properties=hp, findings=findings)
    stats = statistics(results)
    return Report(kind="hunt", success=not findings and stats.errors == 0, created_at=created,
                  duration_s=round(time.perf_counter() - t_start, 3), command=command or [],
                  environment=Environment(**env), targets={spec.key: target}, results=results, statistics=stats,
                  hunt=summary)


def _try_start(start, died, info_cls, target):
    try:
        return start()
    except died as e:
        if target.load_error is None:
            target.load_error = info_cls(type="WorkerDied", message=str(e))
        return None


def _merge(s: _State, res: dict[str, Any], max_examples: int) -> None:
    s.rounds += 1
    if res.get("status") == "error":
        e = res.get("error") or {}
        s.status, s.reason = "error", f"{e.get('type', 'Error')}: {e.get('message', '')}"
        s.error_sample = {"type": e.get("type", "Error"), "message": e.get("message", ""),
                          "traceback": e.get("traceback", "")}
        return
    if res.get("not_applicable"):
        s.status, s.reason = "unsupported", f"not applicable to this target: {res['not_applicable']}"
        return
    if s.exclude is None:
        s.exclude = res.get("exclude") or {}
    before = s.examples
    s.examples += res.get("examples", 0)
    s.rejected += res.get("rejected", 0)
    s.errors += res.get("errors", 0)
    s.shrink_calls += res.get("shrink_calls", 0)
    s.duration_s += res.get("duration_s", 0.0)
    for r in res.get("unsupported_reasons", []):
        if r not in s.reasons:
            s.reasons.append(r)
    if res.get("error_sample") and s.error_sample is None:
        s.error_sample = res["error_sample"]
    if res.get("finding"):
        f = res["finding"]
        s.finding = f
        s.status = "violated"
        s.examples_to_first = before + f["examples_to_first"]
        s.time_to_first_s = s.search_before + f["time_to_first_s"]
        s.reason = f["outcome"]["message"]
        return
    if res.get("examples", 0) == 0 and not res.get("ran_out_of_time"):
        # nothing applicable was drawn this round (all rejected), or the space is exhausted
        s.empty_rounds += 1
        if s.examples == 0 and (s.empty_rounds >= 2 or res.get("rejected", 0) >= 50):
            if s.errors and s.error_sample:
                s.status = "error"
                s.reason = ("the target raised on every drawn example: "
                            f"{s.error_sample['type']}: {s.error_sample['message'][:300]}")
            else:
                s.status = "unsupported"
                s.reason = "not applicable to this target: " + ("; ".join(s.reasons[:3]) or res.get("note", ""))
        elif s.empty_rounds >= 3:
            s.status = "holds"
        return
    s.empty_rounds = 0
    if s.examples >= max_examples:
        s.status = "holds"


def _size(f: dict[str, Any]) -> tuple[int, int, int]:
    ins = f["inputs"]
    lm = ins.get("loss_mask")
    if lm is not None:
        return len(lm), len(lm[0]) if lm else 0, int(sum(sum(r) for r in lm))
    first = next(iter(ins.values()))
    return len(first), 0, 0


def _provenance(spec, commit: str | None, seed: int | None) -> str:
    cmd = f"sentinel hunt --target {spec.name}"
    if spec.repo:
        cmd += f" --repo {spec.repo}"
    if spec.commit:
        cmd += f" --commit {spec.commit}"
    if spec.plant:
        cmd += f" --plant {spec.plant}"
    return f"{cmd} (commit {commit or 'n/a'}, seed {seed if seed is not None else 'random'})"



_WARM: set[str] = set()


def warm(prop: str | None = None, exclude: dict[str, list[Any]] | None = None) -> None:
    """Prepare the warm worker before it forks a round, so rounds do not each pay it:
    imports, the property's strategy, and Hypothesis's own first-run caches (a dry `find`
    that never calls the target: no target code runs outside the forked child)."""
    import hypothesis  # noqa: F401
    import hypothesis.database  # noqa: F401
    from hypothesis import HealthCheck, find, settings
    from hypothesis.errors import NoSuchExample

    from . import runner, spec  # noqa: F401
    key = f"{prop}|{sorted((exclude or {}).items())!r}"
    if prop is None or key in _WARM:
        return
    _WARM.add(key)
    try:
        find(PROPERTIES[prop].strategy(exclude), lambda ex: False,
             settings=settings(max_examples=2, database=None, deadline=None, suppress_health_check=list(HealthCheck)))
    except NoSuchExample:
        pass
