"""What a scenario leaves behind in the process that ran it, for a batch's forked child.

A batch (sentinel/worker.py) runs many scenarios in one fork, only for an adapter that
declares its calls leave no state (`Adapter.stateless`: the reference), on CPU. Before each,
`Baseline.restore` puts back what is cheap to put back (the random generators, grad and anomaly
modes, default dtype); after each, `Baseline.left` names what it cannot: a changed folder or
environment, a thread or child process still running, a timer or signal handler set, a rebound
global of the adapter's or the trainer's modules. Then the child ends after that scenario and
the next ones run in a fresh fork, as each did in a fork of its own before. Not seen, hence the
declaration: a mutable global changed in place (a list appended to, a dict entry set), and state
of modules outside those folders (torch's own).
"""

from __future__ import annotations

import inspect
import os
import random
import signal
import sys
import threading
from typing import Any

import numpy.random  # noqa: F401 - here, in the worker: imported in a batch's child it is paid per fork

from . import reaper


def _folders(adapter: Any) -> tuple[str, ...]:
    """The adapter's own folder and the trainer's (its `trainer_roots`), each ending in a separator."""
    roots = [os.path.dirname(inspect.getfile(type(adapter)))]
    if hasattr(adapter, "trainer_roots"):
        roots += adapter.trainer_roots()
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def _modules(folders: tuple[str, ...]) -> list[Any]:
    """The imported modules whose file lies under `folders`."""
    return [m for m in list(sys.modules.values())
            if (path := getattr(m, "__file__", None)) and os.path.realpath(path).startswith(folders)]


def _names(module: Any) -> dict[str, Any]:
    # the objects themselves, not their ids: a freed object's id can be reused by its replacement
    return dict(vars(module))


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k] is b[k] for k in a)


_SIGNALS = tuple(s for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGUSR1,
                             signal.SIGUSR2, signal.SIGHUP))


def _timers_and_handlers() -> tuple:
    return (signal.getitimer(signal.ITIMER_REAL), signal.getitimer(signal.ITIMER_VIRTUAL),
            signal.getitimer(signal.ITIMER_PROF), tuple(signal.getsignal(s) for s in _SIGNALS))


class Baseline:
    """The child's state at the fork: put back before each scenario, compared after it."""

    def __init__(self, torch: Any, adapter: Any):
        import numpy as np
        self.torch, self.np = torch, np
        self.saved = (torch.random.get_rng_state(), random.getstate(), np.random.get_state(),
                      torch.is_grad_enabled(), torch.get_default_dtype(), torch.is_anomaly_enabled())
        self.cwd, self.environ = os.getcwd(), dict(os.environ)
        self.threads = threading.active_count()
        self.signals = _timers_and_handlers()
        self.modules = [(m, _names(m)) for m in _modules(_folders(adapter))]

    def restore(self) -> None:
        rng, py, npr, grad, dtype, anomaly = self.saved
        self.torch.random.set_rng_state(rng)
        random.setstate(py)
        self.np.random.set_state(npr)
        self.torch.set_grad_enabled(grad)
        self.torch.set_default_dtype(dtype)
        self.torch.autograd.set_detect_anomaly(anomaly)

    def left(self) -> str | None:
        """What the last scenario changed that the next one could see, or None. A check that
        raises (the current folder deleted) says so: it never reaches the next scenario."""
        try:
            return self._left()
        except Exception as e:  # noqa: BLE001
            return f"a state that could not be read ({type(e).__name__})"

    def _left(self) -> str | None:
        if os.getcwd() != self.cwd:
            return "the current folder"
        if os.environ != self.environ:
            return "the environment"
        if threading.active_count() != self.threads:
            return "a thread"
        if reaper.descendants(os.getpid()):
            return "a child process"
        if _timers_and_handlers() != self.signals:
            return "a timer or signal handler"
        changed = next((m.__name__ for m, names in self.modules if not _same(_names(m), names)), None)
        return f"module {changed}'s globals" if changed else None
