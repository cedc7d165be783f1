"""Whether a mutant's change was reached: a marker the mutant's compiled source calls before the
statement that holds its change (`mutants._mark`), recorded in the forked child that runs it.

A survivor whose change never ran is reach work (an option pinned, an input never drawn, a
branch that needs several processes); one whose change ran and was not told apart is a
missing check. The marker is a call of a builtin name (`MARKER`) that `arm` binds in the
mutant's child only: the mutant's code keeps its module's globals, and a name no module
defines falls through to builtins. It sets a byte of an anonymous shared mapping, so a
process the child forks that runs the change counts too (never an under-count). Under
torch.compile the marker is a call dynamo defers past its graph (a logging function), not a
graph break: a break would split the mutant's graph apart from the unmutated one's, and under
`fullgraph=True` fail it.
"""

from __future__ import annotations

import builtins
import mmap
import sys

MARKER = "__sentinel_reached__"
_flag: mmap.mmap | None = None
_ever = False  # fired before the flag's last `take`


def _hit() -> None:
    _flag[0] = 1


def arm() -> None:
    """In a mutant's forked child, before its code runs: a fresh flag, the marker bound."""
    global _flag, _ever
    _flag, _ever = mmap.mmap(-1, 1), False  # MAP_SHARED | MAP_ANONYMOUS: seen by the processes this child forks
    setattr(builtins, MARKER, _hit)
    dynamo = sys.modules.get("torch._dynamo.config")  # imported at load by a target that compiles
    if dynamo is not None and hasattr(dynamo, "reorderable_logging_functions"):
        dynamo.reorderable_logging_functions.add(_hit)


def reached() -> bool | None:
    """Whether the marker fired in this child (None: no mutant armed here)."""
    return None if _flag is None else _ever or bool(_flag[0])


def take() -> bool | None:
    """Whether the marker fired since the last take, the flag cleared for the next (a mutant's
    hunt session asks after a boundary's probe round); `reached` still says if it ever did."""
    global _ever
    if _flag is None:
        return None
    hit = bool(_flag[0])
    _flag[0] = 0
    _ever = _ever or hit
    return hit
