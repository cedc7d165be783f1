"""Inside the recording subprocess: run the scenario through the adapter with the trainer's
calls recorded, evaluate it as `sentinel run` does, and for each violated invariant find the
recorded call (and the place in what it returned or in its arguments after the call) whose
value is the violated observable, in one of `runtime.LAYOUTS`. The answer is plain data for
the bundle's code generation."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import re
import sys
import traceback
import types
from pathlib import Path
from typing import Any

import numpy as np

from ..invariants.base import is_extra
from . import rebuild, runtime
from .codegen import NotSource, Writer
from .record import HARNESS, Calls, ImportLog, candidates

RELATIONAL = ("masked_invariance", "agree", "unchanged_under", "group_isolation")


def _predicates(adapter, req: dict[str, Any]):
    from sentinel import targets
    adapters_dir = str(targets.module_file(targets.TARGETS_PACKAGE))
    if req["target"] == "reference":
        own = {str(targets.module_file(m)) for m in (targets.REFERENCE_OPS, targets.REFERENCE_PLANTS)}
        def is_trainer(f: str) -> bool:
            return str(Path(f).resolve()) in own if f.endswith(".py") else False
    else:
        roots = [str(Path(adapter.root).resolve())] if adapter.root else []
        pkg = req.get("package") or req["target"]
        if not roots:
            import importlib.util
            spec = importlib.util.find_spec(pkg)
            roots = [str(Path(p).resolve()) for p in (spec.submodule_search_locations or [])] if spec else []
        def is_trainer(f: str) -> bool:
            return any(f.startswith(r + "/") for r in roots) and not f.startswith(adapters_dir + "/")

    def is_adapter(f: str) -> bool:
        return (f.startswith(adapters_dir + "/") or f.startswith(HARNESS[0] + "/")) and not is_trainer(f)
    return is_trainer, is_adapter


def _module_is_trainer(is_trainer) -> Any:
    def allowed(mod: str) -> bool:
        m = sys.modules.get(mod)
        f = getattr(m, "__file__", None)
        return bool(f) and is_trainer(str(Path(f).resolve()))
    return allowed


def record(req: dict[str, Any]) -> dict[str, Any]:
    import torch

    from sentinel import targets
    from sentinel.observe import observe
    from sentinel.runner import evaluate, plan
    from sentinel.spec import load_file
    from sentinel.tensors import encode
    from sentinel.errors import PreconditionUnmet, Unsupported

    torch.set_num_threads(1)
    sc = next(s for s in load_file(req["scenario"]) if s.id == req["id"])
    cls = targets.adapter_class(req["target"])
    adapter = cls(Path(req["root"]) if req.get("root") else None, torch.device("cpu"), req.get("options") or {})
    with ImportLog() as imports:
        facts = adapter.load() or {}
    is_trainer, is_adapter = _predicates(adapter, req)
    writer = Writer(_module_is_trainer(is_trainer))
    runs = plan(sc)
    calls: dict[str, list[dict[str, Any]]] = {}
    live: dict[str, list[tuple[dict[str, Any], Any, list]]] = {}
    composed: dict[str, list] = {}  # the adapter's composition functions' calls, per run
    ran: set[str] = set()  # top-level modules whose code the recorded calls ran
    fresh: dict[str, list[set[int]]] = {}  # per run and call: the tensors it held when it returned
    observed: dict[str, dict[str, Any]] = {}
    res: dict[str, Any] = {"status": "ok", "runs": {}, "function": None, "duration_s": 0.0}
    try:
        for r in runs:
            # imports the trainer's functions make when called (slime's `from megatron.core import
            # mpu` inside the function body) reach the stubs and shims validate.py needs too
            with imports, Calls(is_trainer, is_adapter, writer) as rec:
                obs, fn = observe(adapter, torch.device("cpu"), sc.boundary, r.inputs, r.config, r.grads,
                                  r.casts, r.extras)
            calls[r.name], live[r.name], observed[r.name], composed[r.name] = rec.calls, rec.live, obs, rec.composed
            ran |= rec.used
            fresh[r.name] = rec.fresh
            res["function"] = res["function"] or fn
            res["runs"][r.name] = {"outputs": {n: encode(a) for n, a in obs["outputs"].items()},
                                   "requires_grad": obs["requires_grad"],
                                   "grads": {k: None if g is None else encode(g) for k, g in obs["grads"].items()},
                                   "inputs_after": {n: encode(a) for n, a in obs["inputs_after"].items()},
                                   "extras": {n: encode(obs["extras"][n]) for n in r.extras if n in obs["extras"]}}
    except PreconditionUnmet as e:
        res = {"status": "excluded", "precondition": e.name, "reason": str(e), "function": res["function"]}
    except Unsupported as e:
        res = {"status": "unsupported", "reason": str(e), "function": res["function"]}
    except Exception as e:  # noqa: BLE001 - an error verdict, as the worker gives it
        res = {"status": "error", "error": {"type": type(e).__name__, "message": str(e)}, "function": res["function"]}
    result = evaluate(sc, runs, res, req["target"])
    checks = []
    if res["status"] == "ok":
        inputs = {r.name: r.inputs for r in runs}
        for i, inv in enumerate(result.invariants):
            if inv.verdict == "violated":
                checks.append(_check(i, inv, sc, inputs, observed, calls, live, (composed, writer, fresh)))
    checks = _one_home(checks)
    used = set()
    for ch in checks:
        if ch.get("call"):  # the call, and the earlier calls validate.py replays before it
            used.add(ch["call"]["module"])
            if ch["call"].get("shared"):
                used |= {c["module"] for c in calls[ch["run"]][:ch["call_index"]] if "error" not in c}
    _import_again(adapter, imports, used, is_trainer)
    prelude = _prelude(imports, used, is_trainer, adapter, ran)
    return {"status": "ok", "result": result.model_dump(mode="json"), "facts": _plain_facts(facts),
            "calls": {k: [{x: y for x, y in c.items()} for c in v] for k, v in calls.items()},
            "checks": checks, "prelude": prelude, "root": str(adapter.root) if adapter.root else None,
            "standins": writer.standins}


def _plain_facts(facts: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in facts.items() if isinstance(v, (str, int, float, bool, list, type(None)))}


def _observation(obs: dict[str, Any], name: str, inputs: dict[str, np.ndarray]) -> np.ndarray | None:
    if name.startswith("input:"):
        return obs["inputs_after"].get(name[6:])
    if is_extra(name):
        return obs.get("extras", {}).get(name)
    return obs["outputs"].get(name)


def _where(sc, name: str, arr: np.ndarray, inputs: dict[str, np.ndarray], mask: str | None = "loss_mask"):
    port = sc.spec.output(name)
    if mask and port is not None and port.kind == "token" and mask in inputs and inputs[mask].shape == arr.shape:
        return inputs[mask].astype(bool)
    return None


def _check(index: int, inv, sc, inputs, observed, calls, live, built=({}, None, {})) -> dict[str, Any]:
    """How validate.py decides this violated invariant, and which recorded call shows it."""
    fam, body = inv.family, inv.config.get(inv.family, {}) or {}
    details = inv.details or {}
    ch: dict[str, Any] = {"invariant": index, "family": fam, "message": inv.message, "positions": inv.positions}
    if fam in ("equals", "close"):
        ch.update(kind="values", observable=body.get("output"), run="base", expected=inv.expected,
                  atol=body.get("atol", 0.0 if fam == "equals" else 1e-6),
                  rtol=body.get("rtol", 0.0 if fam == "equals" else 1e-5))
        mask = body.get("where")
        ch["where"] = inputs["base"][mask].astype(bool).tolist() if isinstance(mask, str) and mask in inputs["base"] else None
    elif fam == "gradient" and isinstance(body.get("of"), str) and isinstance(body.get("wrt"), str):
        run, mask = body.get("run", "base"), body.get("where")
        ch.update(kind="gradient", observable=f"grad:{body['of']}/{body['wrt']}", run=run, expected=inv.expected,
                  atol=float(body.get("atol", 1e-6)), rtol=float(body.get("rtol", 1e-5)),
                  where=inputs[run][mask].astype(bool).tolist() if isinstance(mask, str) and mask in inputs[run] else None)
        return _gradient(ch, body["of"], body["wrt"], inputs[run], observed[run], calls[run], live[run],
                         built[0].get(run, []), built[1], built[2].get(run))
    elif fam == "finite":
        run = f"~poison:{details.get('poison')}"
        ch.update(kind="finite", observable=details.get("observable"), run=run)
        arr = _observation(observed[run], ch["observable"], inputs[run])
        w = _where(sc, ch["observable"], arr, inputs[run]) if arr is not None else None
        ch["where"] = None if w is None else w.tolist()
    elif fam == "sequence_uniform":
        name = body.get("output")
        arr = _observation(observed["base"], name, inputs["base"])
        w = _where(sc, name, arr, inputs["base"]) if arr is not None else None
        ch.update(kind="uniform", observable=name, run="base", where=None if w is None else w.tolist(),
                  atol=1e-6, rtol=1e-5)
    elif fam == "unmutated":
        run = details.get("run", "base")
        ch.update(kind="values", observable=f"input:{details.get('input')}", run=run,
                  expected=np.asarray(inputs[run][details.get("input")], np.float64).tolist(), atol=0.0, rtol=0.0,
                  where=None)
    elif fam in RELATIONAL and details.get("observable"):
        name = details["observable"]
        run = next((r for r in observed if r != "base" and (a := _observation(observed[r], name, inputs[r])) is not None
                    and runtime.same_values(a, inv.observed)), None)
        if run is None:
            return {**ch, "unsupported": f"{fam}: the run that differs could not be told apart"}
        arr = _observation(observed[run], name, inputs[run])
        w = _where(sc, name, arr, inputs[run])
        ch.update(kind="relation", observable=name, run=run, base_run="base", where=None if w is None else w.tolist(),
                  atol=1e-5, rtol=1e-4)
    else:
        return {**ch, "unsupported": f"the {fam} family is not exported yet (row remappings need the adapter's "
                                     "own composition)"}
    if not ch.get("observable") or ch["observable"].startswith("grad:"):
        return {**ch, "unsupported": f"observable {ch.get('observable')!r}: gradients are not exported yet"}
    target = _observation(observed[ch["run"]], ch["observable"], inputs[ch["run"]])
    found = _match(target, calls[ch["run"]], live[ch["run"]], fresh=built[2].get(ch["run"]))
    if found is None:
        return {**ch, "unsupported": f"no recorded trainer call returns {ch['observable']} as it is observed "
                                     "(the adapter composes it from several calls)"}
    idx, path, layout = found
    call = calls[ch["run"]][idx]
    unplaced = [p["error"] for p in call.get("spies", ()) if "error" in p] if path.startswith("SPY") else []
    if unplaced:
        return {**ch, "unsupported": f"{ch['observable']} is seen inside {call['qualname']}, where validate.py "
                                     f"cannot watch: {unplaced[0]}"}
    if "error" in call or "error" in calls[ch["run"]][call.get("factory", idx)]:
        why = call.get("error") or calls[ch["run"]][call["factory"]]["error"]
        return {**ch, "unsupported": f"{call['qualname']} returns {ch['observable']}, but its call cannot be "
                                     f"written out: {why}"}
    if ch["kind"] == "relation":
        base = _observation(observed["base"], ch["observable"], inputs["base"])
        again = _match(base, calls["base"], live["base"], only=(idx, path, layout), fresh=built[2].get("base"))
        if again is None:
            return {**ch, "unsupported": "the base run's value is not at the same place of the same call"}
        ch["base_call"] = calls["base"][idx]
    ch.update(call=calls[ch["run"]][idx], call_index=idx, path=path, layout=layout, shape=list(np.shape(target)))
    return ch


def _gradient(ch, of, wrt, inputs, obs, calls, live, composed=(), writer=None, fresh=None) -> dict[str, Any]:
    """A gradient check: the recorded call that returns `of`, and the argument of that call
    that carries the input `wrt` (a tensor that requires grad, equal to the input in one of
    the layouts): validate.py makes that argument a leaf and differentiates `of` by it. Else
    an argument the adapter built from that input (`rebuild`): rebuilt there from a leaf."""
    found = _match(obs["outputs"].get(of), calls, live, fresh=fresh)
    if found is None:
        return {**ch, "unsupported": f"no recorded trainer call returns {of} as it is observed (the adapter composes "
                                     "it from several calls)"}
    idx, path, _ = found
    if "error" in calls[idx] or path.startswith("SPY"):
        return {**ch, "unsupported": f"{of} is not what a call validate.py can make returns "
                                     f"({calls[idx].get('error') or 'it is seen inside the call'})"}
    want = np.asarray(inputs[wrt], np.float64)
    for arg_path, value in candidates(None, live[idx][0]):
        if arg_path.startswith("ARGS") and (layout := rebuild.carries(value, want)) is not None:
            return {**ch, "call": calls[idx], "call_index": idx, "path": path, "wrt_path": arg_path,
                    "layout": layout, "shape": list(want.shape)}
    built = rebuild.rebuilt(calls[idx], live[idx][0], want, list(composed), writer) if writer else ""
    if isinstance(built, dict):
        return {**ch, **built, "call_index": idx, "path": path, "shape": list(want.shape)}
    return {**ch, "unsupported": f"no argument of {calls[idx]['qualname']} carries the input {wrt} as drawn (the "
                                 "adapter reshapes or reorders it on the way)" + (f"; {built}" if built else "")}


def _one_home(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two observables read from the same place of the same call are equal there only by
    coincidence (slime's in-place shaping makes the logged KL and the token rewards one tensor
    before 045310b2b; after it the place holds the KL alone): the place stays with the
    observable its key names (`['kl']` -> logged_kl), the others are not exported."""
    homes: dict[tuple, list[dict[str, Any]]] = {}
    for ch in checks:
        if ch.get("call") is not None:
            homes.setdefault(_home(ch), []).append(ch)
    out = []
    for ch in checks:
        if ch.get("call") is None:  # already not exported
            out.append(ch)
            continue
        group = homes[_home(ch)]
        names = {c["observable"] for c in group}
        key = re.findall(r"\w+", ch.get("path") or "")[-1:] or [""]
        if len(names) > 1 and not (key[0] and key[0] in ch["observable"].split("_")):
            others = ", ".join(sorted(names - {ch["observable"]}))
            ch = {k: v for k, v in ch.items() if k not in ("call", "base_call", "path", "layout", "shape")}
            ch["unsupported"] = (f"{ch['observable']}: the only recorded place with its values ({group[0]['path']}) "
                                 f"also holds {others} (equal at this commit, not the same quantity)")
        out.append(ch)
    return out


def _home(ch: dict[str, Any]) -> tuple:
    # a gradient check reads the derivative of the place, not the place
    return ch["run"], id(ch["call"]), ch["path"], ch["layout"], ch.get("wrt_path")


def _match(target, calls, live, only=None, fresh=None):
    """(call index, path, layout) of the first place holding `target`: a call that can be
    written out first; else one that cannot (the caller says why it is not exported). A tensor
    counts for a call only where that call held it when it returned (`fresh`: not one a later
    call put into the same object)."""
    import torch
    if target is None:
        return None
    shape = np.shape(target)
    broken = [("error" in c or "error" in calls[c.get("factory", i)]) for i, c in enumerate(calls)]
    for allow_broken in ((False,) if only else (False, True)):
        for idx, (args, result, spied) in enumerate(live):
            if broken[idx] != allow_broken or (only and only[0] != idx):  # pass 2: the broken ones
                continue
            for path, value in candidates(result, args, spied):
                if only and only[1] != path:
                    continue
                if fresh is not None and idx < len(fresh) and isinstance(value, torch.Tensor) \
                        and " / " not in path and id(value) not in fresh[idx]:  # (a quotient is made here)
                    continue
                for layout in runtime.LAYOUTS:
                    if only and only[2] != layout:
                        continue
                    try:
                        got = runtime.canonical(value, layout, shape)
                    except (ValueError, TypeError, IndexError):
                        continue
                    if runtime.same_values(got, target):
                        return idx, path, layout
    return None


def _import_again(adapter, imports: ImportLog, modules: set[str], is_trainer) -> None:
    """Import the recorded functions' modules once more from nothing, with the import log on:
    what validate.py's fresh import runs. The adapter's load imports in several tries (a missing
    module stubbed, then again), and a submodule a failed try left in sys.modules is not run
    again (verl's checkpoint_manager: its package's __init__, which imports accelerate, never
    ran to its end in the load). Here each try starts with the trainer's own modules out of
    sys.modules (its packages entered without __init__ stay), and any module missing here is
    stubbed (the recorded calls ran without it)."""
    from sentinel.adapters.shims import install_stubs
    if not adapter.root or not isinstance(getattr(adapter, "stubs", None), list):
        return

    def purge() -> None:
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None)
            if f and is_trainer(str(Path(f).resolve())):
                del sys.modules[name]

    importing = getattr(adapter, "_importing", None)
    with imports, (importing() if callable(importing) else contextlib.nullcontext()):
        for m in sorted(modules):
            for _ in range(64):
                purge()
                try:
                    importlib.import_module(m)
                    break
                except ModuleNotFoundError as e:
                    missing = (e.name or "").split(".")[0]
                    if not missing or missing == adapter.package or missing in adapter.stubs:
                        print(f"sentinel export: importing {m} again failed ({e})", file=sys.stderr)
                        break
                    adapter.stubs += [x for x in install_stubs([missing]) if x not in adapter.stubs]
                except Exception as e:  # noqa: BLE001 - the load's log stands; validate.py says what fails
                    print(f"sentinel export: importing {m} again failed ({type(e).__name__}: {e})", file=sys.stderr)
                    break


def _prelude(imports: ImportLog, modules: set[str], is_trainer, adapter, ran: set[str] = frozenset()) -> dict[str, Any]:
    """What validate.py sets up before importing the recorded functions' modules: permissive
    stubs for the stubbed modules their import path reached, the functional shims it reached
    (written out), the trainer packages entered without their __init__, the third-party
    modules that path imported for real (`optional`: stubbed only where not installed, as a
    maintainer's torch-only venv lacks transformers), and the names an old commit imports that
    the installed version dropped (`names`: [module, name], stubbed on the real module). A
    module of `optional` whose code the recorded calls ran (`ran`) is never stubbed (`needed`):
    where it is not installed, validate.py fails on it rather than call a stand-in."""
    from sentinel.adapters import shims
    reached: set[str] = set()
    for m in modules:
        reached |= imports.closure(m)
    stub_roots, shim_modules, bare, optional = set(), {}, [], set()
    roots = set(shims.stubbed_names())
    root = Path(adapter.root).resolve() if adapter.root else None
    for name in sorted(reached):
        mod = sys.modules.get(name)
        top = next((r for r in roots if name == r or name.startswith(r + ".")), None)
        if mod is None:  # gone from sys.modules since (verl's peft, which transformer_impl imports at load)
            if top:
                stub_roots.add(top)
            continue
        if shims.is_stub(mod) and type(mod).__name__ == "_StubModule" and top:
            stub_roots.add(top)
        elif getattr(mod, "__sentinel_stub__", False):
            shim_modules[name] = _shim_source(mod)
        elif root and getattr(mod, "__file__", "x") is None and getattr(mod, "__path__", None):
            path = Path(list(mod.__path__)[0]).resolve()
            if path.is_relative_to(root):
                bare.append([name, str(path.relative_to(root))])
        elif getattr(mod, "__file__", None) and is_trainer(str(Path(mod.__file__).resolve())):
            # what the trainer's own modules import (not what those libraries import in turn)
            for dep in imports.edges.get(name, ()):
                own = getattr(sys.modules.get(dep), "__file__", None)
                if own and is_trainer(str(Path(own).resolve())):  # the trainer's own module, however reached
                    continue  # (the reference's plants import its ops through importlib)
                top_mod = sys.modules.get(dep.split(".")[0])
                if top_mod is not None and not shims.is_stub(top_mod) and _third_party(dep, top_mod, is_trainer):
                    optional.add(dep.split(".")[0])
    names = [s.rsplit(".", 1) for s in getattr(adapter, "stubs", ()) if "." in s and s.rsplit(".", 1)[0] in reached
             and not shims.is_stub(sys.modules.get(s.rsplit(".", 1)[0]))
             and shims.is_stub(getattr(sys.modules.get(s.rsplit(".", 1)[0]), s.rsplit(".", 1)[1], None))]
    import torch.distributed as dist  # the adapter gave the trainer a one-rank group (slime's whitening)
    group = bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() == 1)
    optional -= stub_roots
    return {"stubs": sorted(stub_roots), "shims": shim_modules, "bare": bare,
            "optional": sorted(optional - ran), "needed": sorted(optional & ran), "names": sorted(names),
            "process_group": group}


# what every bundle's environment has for real: never stubbed
RUNTIME = frozenset({"torch", "numpy", "sentinel", "_pytest", "pytest"})


def _third_party(name: str, mod: types.ModuleType, is_trainer) -> bool:
    """A module installed beside the trainer (not the standard library, the runtime, or the trainer)."""
    top = name.split(".")[0]
    f = getattr(mod, "__file__", None)
    if top in RUNTIME or top in sys.stdlib_module_names or top.startswith("_") or not f:
        return False
    return not is_trainer(str(Path(f).resolve()))


def _shim_source(mod: types.ModuleType) -> dict[str, str]:
    """A functional shim module's public attributes as source: a function that returns a
    constant (the one-rank Megatron's world sizes) or declares what it answers on one process
    (`standalone`: a simulated-rank getter), a function of ours (its source), a submodule (by name)."""
    out = {}
    for k, v in vars(mod).items():
        if k.startswith("_"):
            continue
        if isinstance(v, types.ModuleType):
            out[k] = f"sys.modules[{v.__name__!r}]"
        elif isinstance(v, types.FunctionType):
            cells = [c.cell_contents for c in (v.__closure__ or ())]
            if hasattr(v, "standalone"):
                out[k] = f"lambda *a, **k: {v.standalone!r}"
            elif v.__name__ == "<lambda>" and len(cells) == 1 and isinstance(cells[0], (int, float, bool, type(None))):
                out[k] = f"lambda *a, **k: {cells[0]!r}"
            else:
                try:
                    out[k] = inspect.getsource(v)
                except (OSError, TypeError):
                    raise NotSource(f"shim {mod.__name__}.{k}") from None
    return out


def main() -> None:
    """One JSON request on stdin ({target, root, options, scenario, id, package}), one JSON
    answer on stdout (`record`'s, or {"status": "error", ...})."""
    req = json.load(sys.stdin)
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # slime's torch.compile: ~20 s per function on CPU
    try:
        answer = record(req)
    except Exception as e:  # noqa: BLE001 - the parent turns it into a clear error
        answer = {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    sys.stdout.write(json.dumps(answer, allow_nan=True))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
