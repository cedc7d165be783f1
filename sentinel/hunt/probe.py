"""Where a config choice a target refuses may still run: both hunts' config probes (the
single-target round's `probe_config`, the differential hunt's `_probe_config`) try a choice the
target refuses beside the other keys' first choices in whole configs before they exclude it, as
a choice may run only beside several other changes at once (slime's group std: beside the group
mean and eps 1e-6, with group ids in the inputs). Torch-free: examples are drawn, never run, here.
"""

from __future__ import annotations

import copy
import itertools
import math
import random
from typing import Any

from hypothesis import HealthCheck, Phase, find, settings

from .. import strategies as S
from ..adapters.options import is_trainer

BESIDE = 16  # whole configs a choice refused alone (and in pairs) is tried in


def beside(b: str, choices: dict[str, list[Any]], key: str, value: Any) -> list[dict[str, Any]]:
    """Configs of boundary `b` with `key` = `value` and every other key set: all of them where
    there are at most BESIDE, else BESIDE drawn with a generator seeded by the boundary and the
    choice (the same configs in every run). A trainer option at its default is left unset, as
    the strategy leaves it."""
    others = {k: vs for k, vs in choices.items() if k != key}
    if math.prod(len(vs) for vs in others.values()) <= BESIDE:
        combos = [dict(zip(others, c)) for c in itertools.product(*others.values())]
    else:
        rnd = random.Random(f"{b}:{key}={value!r}")
        combos = [{k: rnd.choice(vs) for k, vs in others.items()} for _ in range(BESIDE)]
    return [{**{k: v for k, v in c.items() if not (is_trainer(k) and v == choices[k][0])}, key: value}
            for c in combos]


def first_of(strategy) -> S.Example | None:
    """The strategy's first example (its simplest; seeded), or None where it draws none."""
    found: list[S.Example] = []
    try:
        find(strategy, lambda ex: found.append(ex) or True, settings=settings(
            max_examples=5, database=None, deadline=None, phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck)), random=random.Random(0))
    except Exception:  # noqa: BLE001 - nothing drawn in that config
        pass
    return found[0] if found else None


_SIMPLEST: dict[tuple[str, str], Any] = {}  # (boundary, config) -> its first example


def simplest(b: str, config: dict[str, Any]) -> S.Example | None:
    """The first example of boundary `b`'s strategy in `config`, a copy of the one drawn the first
    time in this process: a mutate run's hunters probe every mutant's boundaries."""
    key = (b, repr(sorted(config.items())))
    if key not in _SIMPLEST:
        if len(_SIMPLEST) >= 4096:
            _SIMPLEST.clear()
        _SIMPLEST[key] = first_of(S.examples(b, config={k: [v] for k, v in config.items()}))
    ex = _SIMPLEST[key]
    return None if ex is None else copy.deepcopy(ex)
