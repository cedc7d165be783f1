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

from . import cleanup, process

# how many workers each command starts at once (compare: base and head side by side); history
# 0: none before its result cache says which commits need one (a re-scan from it needs none)
WORKER_COMMANDS = {"run": 1, "gate": 1, "compare": 2, "bisect": 1, "matrix": 1, "hunt": 1, "mutate": 1, "history": 0}


def entry() -> None:
    args = sys.argv[1:]
    if args and args[0] in WORKER_COMMANDS and "--help" not in args:
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
    cli_entry()
