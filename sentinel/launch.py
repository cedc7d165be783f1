"""Console entry point: for commands that run targets, start the worker process first.

A worker's start is mostly `import torch` (~1 s); the CLI's own imports and scenario
loading take ~0.5 s more. Started before them (`process.prestart`), the zygote (or, without
fork, a spare worker) imports torch while the CLI gets ready, and `process.WorkerHandle` has
its worker forked there (or adopts the spare). Commands that never
start a worker (list, report, schema, --help) spawn nothing. No library code imports this
module: it is the top of the import graph.
"""

from __future__ import annotations

import os
import sys

# how many workers each command starts at once (compare: base and head side by side); history
# 0: no spare before its result cache says which commits need one (a re-scan from it needs none),
# but the zygote: a first scan's first wave otherwise waits for torch after the CLI's start
WORKER_COMMANDS = {"run": 1, "gate": 1, "compare": 2, "bisect": 1, "matrix": 1, "hunt": 1, "mutate": 1, "history": 0}


def option_value(args: list[str], long: str, short: str | None = None) -> str | None:
    """The last value of an option in the command line (`--opt V`, `--opt=V`, `-s V`, `-sV`, as the
    CLI's parser takes the last), read without the parser (not imported yet)."""
    found = None
    for i, a in enumerate(args):
        if a in (long, short) and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(long + "="):
            found = a.split("=", 1)[1]
        elif short and a.startswith(short) and len(a) > len(short) and not a.startswith("--"):
            found = a[len(short):]
    return found


def target_named(args: list[str]) -> str | None:
    """The target the command names (matrix's `T=REPO@REV` as T): the zygote imports its declared
    libraries while the CLI starts. A wrong guess costs only time."""
    found = option_value(args, "--target", "-t")
    return found.split("=", 1)[0] if found else None


def entry() -> None:
    args = sys.argv[1:]
    if args and args[0] in WORKER_COMMANDS and "--help" not in args:
        from . import zygote  # first, before any other import: its torch import is the command's critical path
        if not (args[0] == "history" and option_value(args, "--executor") == "ray"):  # Ray's tasks start their own
            zygote.start(target_named(args))
    if args and args[0] in WORKER_COMMANDS and "--help" not in args:
        from . import cleanup, process
        # before the first worker: an interrupt from now on kills the workers and cleans up
        cleanup.install_signal_handlers()
        cleanup.on_interrupt(process.stop_all)
        process.keep_hypothesis_home()  # before the spares start: they inherit the environment
        if WORKER_COMMANDS[args[0]]:
            process.prestart(min(WORKER_COMMANDS[args[0]], os.cpu_count() or 1))
    try:
        from .cli import entry as cli_entry  # after the spares: they import torch meanwhile
    except KeyboardInterrupt:
        sys.exit(130)  # the spares are killed at exit
    try:
        cli_entry()
    except SystemExit as e:
        _leave(e.code)
    _leave(0)


def _leave(code: object) -> None:
    """Exit as `sys.exit(code)` does, less the interpreter's teardown of every module the CLI
    imported (~0.1 s after the answer is out): the exit handlers still run (workers, zygote,
    temporary folders) and the output is flushed. Where a thread other than a daemon is still
    running, the ordinary exit waits for it."""
    import threading
    if any(not t.daemon and t is not threading.main_thread() for t in threading.enumerate()):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    import atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, as the ordinary exit ignores it
            pass
    os._exit(status & 0xFF)
