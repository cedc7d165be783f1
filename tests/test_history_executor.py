"""Where the local executor runs a task (sentinel/history/executors.py). A history task runs in
a thread of the CLI: its work is its worker's, forked by the CLI's one zygote; before, a spawned
process pool started an interpreter and a zygote (torch, slime's preloads) per pool process.
Any other task (`sentinel mutate`'s shards, a hunt driver's CPU work) still gets a process.
`/proc/self` read by the task names the process that ran it."""

from __future__ import annotations

import os

from sentinel.history import executors
from sentinel.history.task import evaluate


def test_a_history_task_runs_in_the_cli_and_any_other_task_in_a_pool_process(monkeypatch):
    assert executors.DRIVERS == (evaluate,)  # the history task, submit's default
    monkeypatch.setattr(executors, "DRIVERS", (os.readlink,))
    with executors.LocalExecutor(2) as ex:
        assert ex.submit("/proc/self", os.readlink).result(60) == str(os.getpid())
        assert ex._pool is None  # no pool process was started for it
        monkeypatch.setattr(executors, "DRIVERS", ())
        assert ex.submit("/proc/self", os.readlink).result(120) != str(os.getpid())
