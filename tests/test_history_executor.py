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


def test_an_interrupt_stops_the_pool_task_it_would_have_waited_for(monkeypatch):
    """`sentinel mutate -j N` runs N shards of hundreds of mutants in pool processes; an interrupt
    (Ctrl-C, or CI's `timeout` sending SIGTERM) left the CLI waiting in the pool's shutdown until
    every shard ended, for minutes. Now the pool processes are interrupted (their own clean-up runs)
    and killed if they outlast the grace period: here a task that would sleep 60 s."""
    import time

    monkeypatch.setattr(executors, "DRIVERS", ())
    t0 = time.monotonic()
    pids: list[int] = []
    try:
        with executors.LocalExecutor(1) as ex:
            fut = ex.submit(60, time.sleep)
            while not ex._pool._processes:  # started with the first submit
                time.sleep(0.05)
            pids = list(ex._pool._processes)
            time.sleep(2.0)  # the task is running (the pool process imported what it needs)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert time.monotonic() - t0 < 2.0 + executors.STOP_GRACE_S + 10
    assert fut.done()
    assert pids and not any(os.path.exists(f"/proc/{pid}") and _running(pid) for pid in pids)


def _running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
