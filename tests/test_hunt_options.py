"""Options read = options varied (issue 19, item 1): the args an adapter hands a trainer are
recording proxies; the hunt report lists per boundary the options the trainer's code read,
varied, pinned (with the adapter's reason) and read but never varied."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from sentinel import targets
from sentinel.adapters import options
from sentinel.adapters.options import pin, recorded, recording
from toy_package import install

TRAINER = '''
def normalise(rewards, args):
    out = rewards.clone()
    if args.leave_one_out:  # mapped from mean_leave1out: no hunt values of its own
        out = out * 1.0
    if args.center:
        out = out - rewards.mean()
    if args.eps > 1e-5:
        out = out + 0.0
    if args.first_bonus:  # a trainer-only option (no boundary config has it), with a planted bug:
        out = out + rewards[0]  # the first row's reward added to every row (not permutation-equivariant)
    assert args.device_kind == "cpu"
    return out


def read(args, *names):
    """Reads done by trainer code (a unit test hands it recorded objects)."""
    return [args[n] if isinstance(args, dict) else getattr(args, n) for n in names]
'''

ADAPTER = '''
from argparse import Namespace

from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.adapters.options import pin, recorded
from sentinel.adapters.trainer import TrainerAdapter

DOMAINS = {DOMAINS}


class ToyOptsAdapter(TrainerAdapter):
    name = "toyopts"
    description = "a toy trainer that reads an args namespace (tests/test_hunt_options.py)"
    package, marker = "toyopts", "toyopts.norm"
    modules = lookup_modules = ("toyopts.norm",)
    loss_path_files = ("toyopts/norm.py",)
    pinned = pin("reward_norm", "device_kind", reason="the toy trainer runs on CPU only")
    option_domains = DOMAINS

    @implements("reward_norm", calls=("toyopts.norm:normalise",))
    def b_reward_norm(self, inputs, config):
        # a trainer option reaches the adapter as config["trainer:first_bonus"] where the adapter declares it
        args = recorded(Namespace(center=config["mean_level"] is not None, leave_one_out=bool(config["mean_leave1out"]),
                                  eps=config["eps"] or 1e-6, device_kind="cpu", backend="torch",
                                  first_bonus=config.get("trainer:first_bonus", False)))
        assert args.backend == "torch" and args.center in (True, False)  # the adapter's own reads: not counted
        fn = self._fn("normalise", boundary="reward_norm")
        return BoundaryResult({{"rewards": fn(inputs["rewards"].double(), args)}}, function=self._ref(fn))
'''


def _install(tmp_path: Path, monkeypatch, domains: str) -> Path:
    return install(tmp_path, monkeypatch, {"toyopts": {"norm.py": TRAINER},
                                           "toyopts_sentinel": {"adapter.py": ADAPTER.format(DOMAINS=domains)}},
                   "toyopts_sentinel-0.1", "toyopts = toyopts_sentinel.adapter:ToyOptsAdapter")


@pytest.fixture
def toy(tmp_path, monkeypatch):
    yield _install(tmp_path, monkeypatch, "{}")
    targets.registry.cache_clear()


@pytest.fixture
def toy_with_domain(tmp_path, monkeypatch):
    yield _install(tmp_path, monkeypatch, '{"reward_norm": {"mean_leave1out": (False, True)}}')
    targets.registry.cache_clear()


def sentinel(*args: str, columns: int = 250, cwd: Path | None = None) -> subprocess.CompletedProcess:
    # a hunt writes its findings' scenarios under ./reports/hunt: a test's hunt runs in its tmp_path
    return subprocess.run([sys.executable, "-m", "sentinel.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": str(columns)}, cwd=cwd)


def _hunt(tmp_path: Path) -> dict:
    out = tmp_path / "hunt.json"
    r = sentinel("hunt", "--target", "toyopts", "--property", "reward_norm.permutation_equivariant",
                 "--time", "6", "--seed", "1", "-n", "60", "-o", str(out), cwd=tmp_path)
    assert out.is_file(), r.stdout + r.stderr
    report = json.loads(out.read_text())
    (entry,) = [o for o in report["hunt"]["options"] if o["boundary"] == "reward_norm"]
    return entry


def test_the_hunt_lists_options_read_varied_pinned_and_read_not_varied(toy, tmp_path):
    entry = _hunt(tmp_path)
    # the trainer's reads only: `backend`, read by the adapter alone, is not there
    assert set(entry["options_read"]) == {"center", "leave_one_out", "eps", "device_kind", "first_bonus"}, entry
    assert set(entry["options_varied"]) == {"center", "eps"}, entry
    assert entry["options_pinned"] == {"device_kind": "the toy trainer runs on CPU only"}
    assert entry["options_read_not_varied"] == ["first_bonus", "leave_one_out"]
    listed = sentinel("list", "boundaries", "--target", "toyopts", columns=1000)
    assert "device_kind: pinned, the toy trainer runs on CPU only" in listed.stdout, listed.stdout


def test_a_declared_domain_makes_the_read_option_varied(toy_with_domain, tmp_path):
    entry = _hunt(tmp_path)
    assert entry["options_read_not_varied"] == ["first_bonus"], entry  # a trainer option: no domain here
    assert "leave_one_out" in entry["options_varied"] and sorted(entry["options_read"]["leave_one_out"]) == [False, True]


def test_a_pin_without_a_reason_is_refused_when_the_adapter_is_defined():
    from sentinel.adapters.contract import Adapter
    with pytest.raises(TypeError, match="without a reason"):
        type("NoReason", (Adapter,), {"pinned": pin("kl", "kl_type", reason="  ")})
    with pytest.raises(TypeError, match="option_domains"):
        type("BadDomain", (Adapter,), {"option_domains": {"kl": {"kl_type": ("k9",)}}})


@dataclasses.dataclass
class _Cfg:
    clip: float = 0.2
    inner: dict = dataclasses.field(default_factory=lambda: {"mode": "a"})


def _trainer_module(tmp_path, name: str):
    """TRAINER as the module `name`.code in a folder of its own (a trainer root), and the
    options log drained."""
    trainer = tmp_path / name
    trainer.mkdir()
    (trainer / "code.py").write_text(TRAINER)
    sys.path.insert(0, str(tmp_path))
    try:
        code = importlib.import_module(f"{name}.code")
    finally:
        sys.path.remove(str(tmp_path))
    options.drain()
    return trainer, code


def test_the_proxy_records_reads_from_trainer_files_only(tmp_path):
    trainer, code = _trainer_module(tmp_path, "trainer")
    ns = argparse.Namespace(a=1, b=2)
    with recording("kl", [str(trainer)]):
        args = recorded(ns)
        assert isinstance(args, argparse.Namespace) and args is not ns
        assert args.b == 2  # this test's own read: not the trainer's
        assert code.read(args, "a") == [1]
        simple = recorded(types.SimpleNamespace(x=True))
        assert isinstance(simple, types.SimpleNamespace) and code.read(simple, "x") == [True]
        cfg = recorded(_Cfg())
        assert isinstance(cfg, _Cfg) and code.read(cfg, "clip") == [0.2]
        assert code.read(code.read(cfg, "inner")[0], "mode") == ["a"]  # nested: a dotted name
        d = recorded({"k": "v", "unread": 0})
        assert isinstance(d, dict) and code.read(d, "k") == ["v"]
    assert recorded(ns) is ns  # outside a recording: the object itself
    # a nested config is recorded by its own reads ("inner.mode"), not as an option "inner"
    assert options.drain() == {"kl": {"a": [1], "clip": [0.2], "inner.mode": ["a"], "k": ["v"], "x": [True]}}


CATALOG_EPS = """id: toy-eps
title: a large eps (the hunt draws 1e-5 and 1e-6 only)
boundary: reward_norm
config: {mean_level: batch, std_level: null, eps: 1.0e-3}
inputs: {rewards: [1.0, 2.0, 3.0]}
invariants:
  - permutation_equivariant: {}
"""
CATALOG_KL = """id: toy-kl
title: a scenario of a boundary the hunt does not hunt
boundary: gspo_kl
inputs: {log_probs: [[-0.5]], old_log_probs: [[-0.6]], loss_mask: [[1]]}
invariants:
  - sequence_uniform: {output: seq_kl}
"""


@pytest.mark.parametrize("catalog", [None, CATALOG_EPS])
def test_hunt_coverage_counts_the_branches_of_the_mapped_function(toy, tmp_path, catalog):
    """normalise has four `if`s, each two ways: 8 branches. The hunt (no domain for
    mean_leave1out, no trainer option first_bonus) never takes `leave_one_out` or `first_bonus`
    true, and eps is drawn at 1e-5 and 1e-6 only, so `eps > 1e-5` never holds: 5 covered, the
    three others listed with their condition. The catalog's scenarios of the hunted boundary
    (./scenarios, as `sentinel gate` finds it) run first under coverage: one with eps 1e-3 takes
    the third branch."""
    work = tmp_path / "work"
    (work / "scenarios").mkdir(parents=True)
    (work / "scenarios" / "toy.yaml").write_text(catalog or CATALOG_KL)
    out = tmp_path / "hunt.json"
    # bounded by its 60 examples, not the clock: the same branches under load
    r = sentinel("hunt", "--target", "toyopts", "--property", "reward_norm.permutation_equivariant", "--time", "120",
                 "--seed", "1", "-n", "60", "--coverage", "-o", str(out), cwd=work)
    assert out.is_file(), r.stdout + r.stderr
    hunt = json.loads(out.read_text())["hunt"]
    (cov,) = hunt["coverage"]
    assert cov["function"] == "toyopts.norm:normalise"
    assert cov["branches_total"] == 8, cov  # four ifs; an assert is not a branch arc for coverage.py
    assert hunt.get("coverage_scenarios", 0) == (1 if catalog else 0)  # gspo_kl is not hunted here
    assert cov["branches_covered"] == (6 if catalog else 5), cov
    untaken = [("if args.leave_one_out", 1), ("if args.eps > 1e-5", 1), ("if args.first_bonus", 1)]
    assert [(b["condition"].split(":")[0], len(b["missing"])) for b in cov["uncovered"]] == \
        [u for u in untaken if not catalog or "eps" not in u[0]]
    assert cov["branches_unreachable"] == []


# --- trainer options: an axis no boundary config has --------------------------------------

@pytest.fixture
def toy_with_trainer_option(tmp_path, monkeypatch):
    yield _install(tmp_path, monkeypatch, '{"reward_norm": {"trainer:first_bonus": (False, True)}}')
    targets.registry.cache_clear()


def _hunt_report(tmp_path: Path) -> dict:
    out = tmp_path / "hunt.json"
    r = sentinel("hunt", "--target", "toyopts", "--property", "reward_norm.permutation_equivariant",
                 "--time", "6", "--seed", "1", "-n", "60", "-o", str(out), cwd=tmp_path)
    assert out.is_file(), r.stdout + r.stderr
    return json.loads(out.read_text())


def _violations(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["verdict"] == "violated"]


def test_a_trainer_option_is_drawn_and_the_bug_behind_it_found(toy_with_trainer_option, tmp_path):
    report = _hunt_report(tmp_path)
    (entry,) = [o for o in report["hunt"]["options"] if o["boundary"] == "reward_norm"]
    assert "first_bonus" in entry["options_varied"] and entry["options_read_not_varied"] == ["leave_one_out"], entry
    found = _violations(report)
    assert found, report["results"]
    assert all(json.dumps(r).count('"trainer:first_bonus": true') for r in found), found
    listed = sentinel("list", "boundaries", "--target", "toyopts", columns=1000)
    assert "trainer:first_bonus: trainer option, default False, hunt also draws True" in listed.stdout, listed.stdout


def test_without_the_trainer_option_the_bug_behind_it_is_not_reached(toy, tmp_path):
    assert _violations(_hunt_report(tmp_path)) == []


def test_a_trainer_option_is_refused_by_an_adapter_that_does_not_declare_it():
    """The reference (and a referee) has no such config: Unsupported, never a silent default."""
    import torch

    from sentinel.adapters.contract import Adapter
    from sentinel.errors import Unsupported
    adapter = targets.adapter_class("reference")(None, torch.device("cpu"))
    adapter.load()
    ins = {"rewards": torch.tensor([1.0, 2.0]), "mask": torch.ones(2), "group": torch.zeros(2, dtype=torch.long)}
    adapter.call("reward_norm", dict(ins), {})  # the default config runs
    with pytest.raises(Unsupported, match="no trainer option trainer:first_bonus=True"):
        adapter.call("reward_norm", dict(ins), {"trainer:first_bonus": True})
    with pytest.raises(TypeError, match="trainer:<name>"):  # a trainer option is spelled as one
        type("Unprefixed", (Adapter,), {"option_domains": {"kl": {"beta": (0.0, 0.1)}}})


def test_a_default_trainer_option_is_left_out_of_the_drawn_config():
    """A default draw is the config a catalog scenario has (same signature, same referee answer)."""
    from hypothesis import find

    from sentinel import strategies as S
    from sentinel.spec import load_text
    s = S.configs("kl", **{"trainer:beta": [0.0, 0.04]})
    assert "trainer:beta" not in find(s, lambda c: True)
    assert find(s, lambda c: "trainer:beta" in c)["trainer:beta"] == 0.04
    doc = ("id: t\ntitle: t\nboundary: kl\nconfig: {kl_type: k1, 'trainer:beta': 0.04}\n"
           "inputs: {log_probs: [[0.0, 0.0]], ref_log_probs: [[0.0, 0.0]], loss_mask: [[1, 0]]}\n"
           "invariants: [{finite: {outputs: [kl]}}]\n")
    (sc,) = load_text(doc, "<t>")
    assert sc.config["trainer:beta"] == 0.04


def test_every_config_key_is_drawn_off_its_default_whatever_its_place():
    """The config is drawn as one integer; read as plain mixed-radix digits, Hypothesis's bias
    to small integers left the first keys at their first value (TRL's loss_type off its default
    in 11 % of draws listed first, 75 % listed last). Each key now leaves its first value about
    as often as a uniform draw would, first or last."""
    from hypothesis import HealthCheck, given, settings

    from sentinel import strategies as S
    table = {f"trainer:o{i}": list(range(n)) for i, n in enumerate([6, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 6])}
    seen: list[dict] = []

    @settings(max_examples=300, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(S.configs("kl", **table))
    def draw(c):
        seen.append(c)
    draw()
    for k, vs in table.items():
        off = sum(1 for c in seen if c.get(k, 0) != 0) / len(seen)
        assert off > 0.6 * (1 - 1 / len(vs)), (k, off)


def test_a_formula_does_not_judge_a_config_that_holds_a_trainer_option():
    """A differential finding is explained only by properties that admit its config: a canonical
    formula judging a trainer option's output (AReaL's rejection sampling masks tokens on purpose)
    once labelled the unplanted side of a planted AReaL hunt the violator ("fixed")."""
    from sentinel.hunt.properties import PROPERTIES
    plain, optioned = {"metric_agg": "token-mean"}, {"metric_agg": "token-mean", "trainer:rejection_sampling": "x"}
    assert PROPERTIES["metrics.ratio_mean"].admits(plain)
    assert not PROPERTIES["metrics.ratio_mean"].admits(optioned)
    finite = next(p for n, p in PROPERTIES.items() if n.startswith("metrics.") and p.family == "finite")
    assert finite.admits(optioned)  # a family that holds whatever the option does still judges it


@dataclasses.dataclass
class _Holder:
    norm: _Cfg | None = None


def test_an_optional_nested_config_read_set_and_unset_is_varied(tmp_path):
    trainer, code = _trainer_module(tmp_path, "trainer2")
    for held in (None, _Cfg()):  # AReaL's adv_norm: a NormConfig or None
        with recording("kl", [str(trainer)]):
            code.read(recorded(_Holder(held)), "norm")
    assert options.drain() == {"kl": {"norm": [None, "<_Cfg>"]}}
    with recording("kl", [str(trainer)]):  # read only as a config: its fields are the options
        code.read(recorded(_Holder(_Cfg())), "norm")
    assert options.drain() == {"kl": {}}


def test_an_unreachable_arc_is_named_by_where_it_jumps(tmp_path):
    """A declared "CONDITION -> DESTINATION" covers that arc only: the real branch of the same
    line stays uncovered (reachable), the guard's raise is unreachable with its reason."""
    from sentinel.coverage import _declared
    src = tmp_path / "m.py"
    src.write_text("def f(op):\n    if op == 'var':\n        return 1\n    raise ValueError(op)\n")
    line = "if op == 'var':"
    arcs = {"if op == 'var' -> raise ValueError": "a guard"}
    assert _declared(arcs, str(src), line, [3, 4]) == {"": [3], "a guard": [4]}
    assert _declared({"if op == 'var'": "every arc"}, str(src), line, [3, 4]) == {"every arc": [3, 4]}


def test_an_extra_is_refused_where_no_family_reads_it():
    from sentinel.spec import load_text
    from sentinel.yamlfile import SpecError
    text = """id: x
title: x
boundary: kl
inputs: {log_probs: [[-0.5, 0.0]], ref_log_probs: [[-0.6, 0.0]], loss_mask: [[1, 0]]}
invariants:
  - masked_invariance: {outputs: [kl, "returned:metrics.raw_sum"]}
"""
    with pytest.raises(SpecError, match="read by equals and close only"):
        load_text(text)
    load_text(text.replace('masked_invariance: {outputs: [kl, "returned:metrics.raw_sum"]}',
                           'close: {output: "returned:metrics.raw_sum", expected: 0.0}'))
