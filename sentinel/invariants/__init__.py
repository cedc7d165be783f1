"""Invariant families. Each is a pydantic model of its YAML body; `REGISTRY` maps the YAML
key to the family. Invariant code is target-free: it never imports a trainer."""

from .base import Invariant, Outcome, RunObservation
from .exact import Close, Equals
from .gradient import Detached, Gradient
from .masking import Finite, MaskedInvariance, PaddingInvariant
from .relations import Agree, UnchangedUnder
from .state import Unmutated
from .structure import GroupIsolation, PermutationEquivariant, SequenceUniform

REGISTRY: dict[str, type[Invariant]] = {c.family: c for c in (
    Equals, Close, MaskedInvariance, Finite, PaddingInvariant, SequenceUniform, PermutationEquivariant,
    GroupIsolation, Unmutated, Gradient, Detached, Agree, UnchangedUnder)}

__all__ = ["REGISTRY", "Invariant", "Outcome", "RunObservation"]
