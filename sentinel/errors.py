"""Every error RL-Sentinel raises on purpose, under one root.

Catch `SentinelError` to handle any of them; the CLI maps each to its exit code (a bad
scenario or usage: 2; a target that cannot be loaded or run: 3). Errors that describe a
*target* (Unsupported, TargetLoadError) are raised by adapters inside the worker and
travel back to the runner as an `ExceptionInfo` record.
"""

from __future__ import annotations


class SentinelError(Exception):
    """The root of every error this project raises on purpose."""


class UsageError(SentinelError):
    """A bad command line: an unknown target, a missing --repo, conflicting options."""


class KnownError(UsageError):
    """A `sentinel hunt --known` path that is neither a hunt report nor scenario files."""


class RegistryError(SentinelError):
    """A registry entry declared twice: an invariant family name two classes claim, or a hunt
    property name two families (or one family twice) declare."""


class GitError(SentinelError):
    """A revision that cannot be resolved or checked out."""


class WorkerDied(SentinelError):
    """The worker process ended or went silent before answering."""


class SideDied(WorkerDied):
    """A differential hunt's side ended its session mid-hunt (its target crashed, or its
    worker was killed): the search cannot go on with one side."""


class ChannelError(WorkerDied):
    """Target code wrote on the worker's channel (sentinel/channel.py): its answers cannot be
    trusted, so the worker is ended."""


class TargetError(SentinelError):
    """Something about a target: it cannot be loaded, or lacks a boundary."""


class TargetLoadError(TargetError):
    """The target could not be located or imported; the message names what is missing."""


class MissingDependency(TargetLoadError):
    """A third-party package a call needs is not installed in this environment (an extra, e.g.
    tensordict for verl's batched log-probs): this environment's limit, not the target's answer.
    The target's own package failing to import stays a TargetLoadError: that is the target's."""


class Unsupported(TargetError):
    """The boundary (or this config of it) does not exist at this target version."""


class PreconditionUnmet(TargetError):
    """The input is one the target's real data path never produces: an adapter's declared
    precondition (sentinel/adapters/contract.py `Precondition`) excludes it. Not `Unsupported` (the function
    and option exist) and not a failure: the call is never made."""

    def __init__(self, name: str, reason: str, link: str = ""):
        self.name, self.reason, self.link = name, reason, link
        super().__init__(f"precondition {name!r}: {reason}" + (f" ({link})" if link else ""))

    def __reduce__(self):  # picklable with its fields
        return (type(self), (self.name, self.reason, self.link))


# The error type an adapter defect is reported as (sentinel/adapters/defects.py): the adapter's
# fault at that version (a keyword the trainer's function lacks, a broken output contract), never
# the target's; a compare, history or differential hunt does not count it against the target.
ADAPTER_DEFECT = "AdapterDefect"
# Error types that are the harness's, not the target's answer to an input: an adapter defect, and
# a third-party package the call needs that this environment lacks (MissingDependency). A
# differential hunt rejects an example one side answered so; it is never a difference.
NOT_THE_TARGETS = (ADAPTER_DEFECT, MissingDependency.__name__)


class ContractError(TargetError):
    """A boundary call returned something its output contract forbids (sentinel/contracts.py)."""
