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



def _mark_and_sleep(path: str) -> str:
    """A pool task that says it runs (under the pool process's handlers), then sleeps a minute."""
    import time
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)
    return "slept"


def test_an_interrupt_stops_the_pool_tasks_it_would_have_waited_for(monkeypatch, tmp_path):
    """`sentinel mutate -j N` runs shards of mutants in pool processes; an interrupt (Ctrl-C, or
    CI's `timeout` sending SIGTERM) left the CLI waiting in the pool's shutdown until every shard
    ended, for minutes. Now the running task is interrupted (its process's clean-up runs) and the
    task queued behind it starts no work: one pool process, two tasks that would sleep a minute each."""
    import time

    monkeypatch.setattr(executors, "DRIVERS", ())
    marks = [tmp_path / "first", tmp_path / "second"]
    try:
        with executors.LocalExecutor(1) as ex:
            futs = [ex.submit(str(m), _mark_and_sleep) for m in marks]
            procs = list(ex._pool._processes.values())
            deadline = time.monotonic() + 120
            while not marks[0].exists() and time.monotonic() < deadline:  # spawned and importing meanwhile
                time.sleep(0.05)
            assert marks[0].exists()
            t0 = time.monotonic()
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert time.monotonic() - t0 < executors.STOP_GRACE_S  # the clean-up path, not the grace period's kill
    assert all(f.done() for f in futs)
    assert isinstance(futs[0].exception(), KeyboardInterrupt)
    assert not marks[1].exists()  # the queued task ran nothing
    assert [p.exitcode for p in procs] == [0]
