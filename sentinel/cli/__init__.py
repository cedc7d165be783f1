"""`sentinel`: run training-signal scenarios against RL trainers and read the verdicts.

Exit codes: 0 every scenario holds, 1 a violation, 2 bad usage or a bad scenario file,
3 a target error (and no violation), 5 nothing ran (every scenario unsupported or excluded;
a hunt's every property untested or stopped). sentinel/verdicts.py decides them.
"""

from __future__ import annotations

import inspect
import re
import sys

from .. import cleanup, git, process
from . import run  # noqa: F401, I001 - each registers its commands on the app, in --help's order
from . import hunt  # noqa: F401, E402
from . import history  # noqa: F401, E402
from . import mutate  # noqa: F401, E402
from . import info  # noqa: F401, E402
from . import export  # noqa: F401, E402
from . import cache  # noqa: F401, E402
from .common import app, err

__all__ = ["app", "entry"]


def _unwrap(doc: str) -> str:
    """A docstring as help text: paragraphs (blank-line separated) joined into one line each,
    so the terminal, not the source's line breaks, decides where lines wrap."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


for _command in app.registered_commands:
    if _command.callback is not None and _command.callback.__doc__:
        _command.callback.__doc__ = _unwrap(_command.callback.__doc__)


def entry() -> None:
    """Console script: an unexpected exception is a tool error (exit 3), never read as a violation.

    Ctrl-C, SIGTERM (CI's `timeout`) and SIGHUP all end the run the same way: workers killed,
    worktrees and temp files removed, exit 130. What an earlier, SIGKILLed run left behind is
    swept first (sentinel/cleanup.py)."""
    cleanup.install_signal_handlers()
    cleanup.on_interrupt(process.stop_all)
    git.sweep_stale()
    try:
        app()
    except SystemExit as e:
        if process.stopping() and e.code != 130:
            # the interrupt reached a layer that turned it into an outcome (a worker start it refused,
            # read as a target that could not be loaded: bisect's exit 2): the run was still stopped
            err.print("interrupted")
            sys.exit(130)
        raise
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception:  # noqa: BLE001
        err.print_exception()
        err.print("[bold magenta]rl-sentinel failed unexpectedly[/] (exit 3); please report this traceback")
        sys.exit(3)


