"""One side of a differential hunt, inside the worker (its forked child): a session that
answers the parent's requests until it says stop.

The parent draws every example (`hunt/driver/differential.py`) and sends the same batch to both sides;
each side calls its target once per example (`sentinel.observe`, the path `sentinel run`
takes) and sends back the observations: outputs, gradients, inputs after the call, or why
it could not (Unsupported, an exception). Requests and answers travel as pickles over a
`multiprocessing.connection` the parent listens on (authenticated, local), not over the
worker's JSON lines: a batch of arrays per round trip, no text encoding.

Requests: {"op": "observe", "boundary", "examples", "grads"} -> one answer per example;
{"op": "properties", "examples", "names", "origins"} -> per example, each property's verdict there
(what classifies a difference as fixed / regressed / changed); {"op": "reached"} -> whether a
mutant's change ran since the last such request (sentinel/mutate/reach.py; None: no mutant);
{"op": "stop"}.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from sentinel.errors import PreconditionUnmet, Unsupported

from sentinel.adapters.defects import as_error

from ...observe import observe
from .. import properties
from .check import NotApplicable, check, observable_of


def _observe(adapter, device, boundary: str, ex, grads: list[tuple[str, str]]) -> dict[str, Any]:
    try:
        obs, function = observe(adapter, device, boundary, ex.inputs, ex.config, grads)
    except Unsupported as e:
        return {"status": "unsupported", "reason": (str(e).splitlines() or ["Unsupported"])[0][:300]}
    except PreconditionUnmet as e:  # an input this side's trainer never receives: no call was made
        return {"status": "excluded", "reason": f"precondition {e.name}: {e.reason}"[:300]}
    except Exception as e:  # noqa: BLE001 - the target raised on this input: an answer too
        defect = as_error(adapter, boundary, e)  # or the adapter's own fault: no answer of the target's
        error = defect or {"type": type(e).__name__, "message": str(e)}
        return {"status": "error", "type": error["type"], "message": error["message"][:500]}
    after = {n: a.astype(ex.inputs[n].dtype) for n, a in obs["inputs_after"].items()}
    return {"status": "ok", "outputs": obs["outputs"], "grads": obs["grads"], "inputs_after": after,
            "extras": obs["extras"], "function": function}


def _properties(adapter, device, ex, names: list[str], origins: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    out = {}
    for name in names:
        try:
            outcome, _, _, inv = check(properties.get(name, (origins or {}).get(name)), ex, adapter, device)
        except (NotApplicable, Unsupported, PreconditionUnmet):
            continue
        except Exception as e:  # noqa: BLE001
            out[name] = {"verdict": "error", "message": f"{type(e).__name__}: {str(e)[:200]}"}
            continue
        if outcome.verdict in ("held", "violated"):
            out[name] = {"verdict": outcome.verdict, "message": outcome.message,
                         "observable": observable_of(inv, outcome) if outcome.verdict == "violated" else None,
                         "invariant": inv.summary()}
    return out


def hello(adapter) -> dict[str, Any]:
    """What the parent needs to know of this side before it draws: its boundaries, the
    deviations from the reference its adapter declares (each with whether it applies at this
    checkout) and its option_domains (hunt values)."""
    here = getattr(adapter, "deviations_here", None)
    domains = {b: {k: list(vs) for k, vs in d.items()} for b, d in getattr(type(adapter), "option_domains", {}).items()}
    return {"boundaries": adapter.supported(), "deviations": here() if here else {}, "domains": domains}


def serve(adapter, device, job: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Answer the parent's requests until it says stop (or goes away)."""
    from multiprocessing.connection import Client
    t0 = time.monotonic()
    sess = job["session"]
    conn = Client(sess["address"], family="AF_UNIX", authkey=bytes.fromhex(sess["authkey"]))
    conn.send({"hello": hello(adapter)})
    served = 0
    with np.errstate(all="ignore"):
        while True:
            try:
                req = conn.recv()
            except (EOFError, OSError):
                break
            op = req.get("op")
            if op == "stop":
                break
            if op == "observe":
                answer = [_observe(adapter, device, req["boundary"], ex, [tuple(g) for g in req["grads"]])
                          for ex in req["examples"]]
            elif op == "properties":  # names: one list for every example, or one list per example
                per = req["names"] if req["names"] and isinstance(req["names"][0], list) else \
                    [req["names"]] * len(req["examples"])
                answer = [_properties(adapter, device, ex, names, req.get("origins"))
                          for ex, names in zip(req["examples"], per)]
            elif op == "reached":
                from ...mutate import reach
                answer = {"reached": reach.take()}
            else:
                answer = {"error": f"unknown request {op!r}"}
            served += len(req.get("examples", []))
            conn.send(answer)
    conn.close()
    return {"status": "ok", "property": "session", "served": served, "duration_s": time.monotonic() - t0}
