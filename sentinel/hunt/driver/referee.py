"""The reference as referee of a differential finding no invariant family explains.

Two revisions of a trainer differ on an input and no family tells which side is wrong: the
bundled reference math is asked on the same input. Where the reference implements that
config and produces the observable that differs, the side that agrees with it is right:
head agrees and base does not -> `fixed`; the reverse -> `regressed`; neither (or both, which
a difference between them rules out only up to tolerance) -> `changed`, and the finding says
why. Where the reference has no such config (Unsupported), no such boundary or observable,
or the target declares a deviation from the reference there, the finding stays `changed` and
says which of these it was.

The reference runs in a third worker, started the first time a finding needs it (most hunts
never do), and stopped with the sides.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ... import verdicts
from ...report import Target
from ...runner import TargetSpec
from ..differences import Difference, deviation_for, differences, grads_for
from .sides import Side

REFERENCE = "reference"


@dataclass
class Ruling:
    """What the reference said on one differing input."""

    verdict: str  # fixed | regressed | changed
    reason: str  # why (always set: which side agrees, or why the reference cannot judge)
    reference: Any = None  # the reference's values of the observable (None: it gave none)

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reason": self.reason, "reference": self.reference}


def agrees(boundary: str, ex, side: dict[str, Any], ref: dict[str, Any], observable: str, atol: float,
           rtol: float) -> bool:
    """Whether one side's answer matches the reference's on `observable` (within the hunt's tolerance)."""
    return all(d.observable != observable for d in differences(boundary, ex, ref, side, atol, rtol))


def _present(answer: dict[str, Any], observable: str) -> bool:
    if observable == "exception":
        return True
    if observable.startswith("grad:"):
        return observable[5:] in answer.get("grads", {})
    if observable.startswith("input:"):
        return observable[6:] in answer.get("inputs_after", {})
    return observable in answer.get("outputs", {})


def rule(boundary: str, ex, d: Difference, base: dict[str, Any], head: dict[str, Any], ref: dict[str, Any],
         deviations: dict[str, dict[str, Any]], atol: float, rtol: float) -> Ruling:
    """The referee's verdict on difference `d` between `base` and `head` (session answers to `ex`),
    given the reference's answer `ref` and the deviations the target declares from it."""
    if ref["status"] == "unsupported":
        return Ruling("changed", f"the reference has no such config ({ref['reason']})")
    if ref["status"] == "excluded":
        return Ruling("changed", f"the reference excludes this input ({ref['reason']})")
    if ref["status"] == "error" and d.observable != "exception":
        return Ruling("changed", f"the reference raised {ref['type']} on this input: {ref['message'][:200]}")
    if not _present(ref, d.observable):
        return Ruling("changed", f"the reference does not produce {d.observable}")
    dev = deviation_for(deviations, boundary, d.observable, ex.config)
    if dev is not None:
        return Ruling("changed", f"the target declares deviation {dev!r} from the reference here")
    a = agrees(boundary, ex, base, ref, d.observable, atol, rtol)
    b = agrees(boundary, ex, head, ref, d.observable, atol, rtol)
    values = _values(ref, d.observable)
    verdict = verdicts.referee_verdict(a, b)
    reason = {"fixed": "head agrees with the reference, base does not",
              "regressed": "base agrees with the reference, head does not"}.get(
        verdict, "neither side agrees with the reference" if not (a or b) else "both sides agree with the reference")
    return Ruling(verdict, reason, values)


def _values(answer: dict[str, Any], observable: str) -> Any:
    if answer["status"] == "error":
        return f"{answer['type']}: {answer['message']}"
    kind, name = (("grads", observable[5:]) if observable.startswith("grad:") else
                  ("inputs_after", observable[6:]) if observable.startswith("input:") else ("outputs", observable))
    v = answer.get(kind, {}).get(name)
    return None if v is None else getattr(v, "tolist", lambda: v)()


class Referee:
    """The reference side, started on first use (`ask`), stopped with `stop`."""

    def __init__(self, timeout: float, session_s: float):
        self.timeout, self.session_s = timeout, session_s
        self.side: Side | None = None
        self.stack = ExitStack()

    def _started(self) -> Side:
        if self.side is None:
            spec = TargetSpec(REFERENCE, label=f"referee:{REFERENCE}")
            self.side = Side("referee", spec, Target(name=REFERENCE), self.timeout)
            self.side.start(self.stack, self.session_s)
        return self.side

    def ask(self, boundary: str, ex) -> dict[str, Any]:
        """The reference's answer to `ex` (a session answer: outputs, grads, inputs after), or
        an `unsupported` answer saying why the reference cannot answer at all."""
        side = self._started()
        if not side.ok:
            why = side.target.load_error.message if side.target.load_error else "no session"
            return {"status": "unsupported", "reason": f"the reference did not start: {why}"}
        if boundary not in side.info.get("boundaries", []):
            return {"status": "unsupported", "reason": f"the reference has no {boundary!r} boundary"}
        try:
            side.conn.send({"op": "observe", "boundary": boundary, "examples": [ex], "grads": grads_for(boundary)})
            return side.conn.recv()[0]
        except (EOFError, OSError) as e:
            return {"status": "unsupported", "reason": f"the reference's session ended: {e}"}

    def stop(self) -> None:
        if self.side is not None:
            self.side.stop()
        self.stack.close()
