"""A toy invariant family with one hunt property, declared outside sentinel the way a plugin
would (tests/test_hunt_property.py). Importing this module registers it; the test unregisters
it afterwards, so the rest of the session sees only the real families."""

from __future__ import annotations

import numpy as np

from sentinel.invariants.base import Invariant, Outcome, hunted


class ToyShape(Invariant):
    """Every token output has the shape of `like` (a toy family: the property this test adds)."""

    family = "toy_shape"
    hunt = (hunted("kl", doc="a toy property: the KL has the shape of the log-probs", body={"like": "log_probs"}),)
    like: str = "log_probs"

    def evaluate(self, obs, sc):
        want = sc.inputs[self.like].shape
        for name, out in obs["base"].outputs.items():
            if np.shape(out) != want:
                return Outcome("violated", f"{name} has shape {np.shape(out)}, {self.like} {want}",
                               list(np.shape(out)), list(want))
        return Outcome("held")
