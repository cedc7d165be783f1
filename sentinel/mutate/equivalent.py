"""`equivalent.yaml`: the mutants a user has judged equivalent, each with its reason.

Kept beside the catalog (default `./equivalent.yaml`), a list of entries keyed as the report
names a mutant:

    - function: sentinel_adapters.reference.ops:aggregate
      operator: clamp-denominator
      key: 3f0c2a9b1e
      reason: "m.sum() >= 1 here: the branch above returned for an empty mask"

A claim is honoured only with evidence: the mutant survived the catalog and a hunt that
compared at least N examples on every boundary it maps (`--equivalent-examples`): its hunt
runs past the budget until it has them, EVIDENCE_CAP_S more at most. A claim
for a mutant that is killed, or that no longer exists, is listed as stale in the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import UsageError

FIELDS = ("function", "operator", "key", "reason")
EVIDENCE_CAP_S = 120.0  # hunt seconds past --budget a claimed mutant may take to compare its N examples


@dataclass(frozen=True)
class Claim:
    function: str
    operator: str
    key: str
    reason: str
    where: str  # FILE:LINE

    @property
    def id(self) -> str:
        return f"{self.function}#{self.operator}@{self.key}"


def load(path: Path) -> dict[str, Claim]:
    """mutant id -> its claim; UsageError naming FILE:LINE for a bad entry."""
    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise UsageError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if root is None:
        return {}
    if not isinstance(root, yaml.SequenceNode):
        raise UsageError(f"{path}:{root.start_mark.line + 1}: expected a list of mutants (function, operator, key, reason)")
    out: dict[str, Claim] = {}
    for item in root.value:
        at = f"{path}:{item.start_mark.line + 1}"
        if not isinstance(item, yaml.MappingNode):
            raise UsageError(f"{at}: an entry is a mapping with {', '.join(FIELDS)}")
        d = {k.value: v for k, v in item.value}
        unknown = sorted(set(d) - set(FIELDS))
        missing = [f for f in FIELDS if f not in d]
        if unknown or missing:
            raise UsageError(f"{at}: " + "; ".join(([f"unknown field(s) {', '.join(unknown)}"] if unknown else []) +
                                                   ([f"missing {', '.join(missing)}"] if missing else [])))
        bad = [f for f in FIELDS if not isinstance(d[f], yaml.ScalarNode) or not str(d[f].value).strip()]
        if bad:
            raise UsageError(f"{path}:{d[bad[0]].start_mark.line + 1}: {bad[0]} must be a non-empty text")
        c = Claim(*(str(d[f].value).strip() for f in FIELDS), where=at)
        if c.id in out:
            raise UsageError(f"{at}: {c.id} is listed twice (first at {out[c.id].where})")
        out[c.id] = c
    return out
