"""A deliberately misbehaving target for the isolation tests (imported by the worker as
`faulty_adapter:FaultyAdapter`; the tests put this folder on PYTHONPATH).

It speaks only the `loss_agg` boundary. The value at the last position of `values` (a
masked position, so the correct answer does not depend on it) picks how the call
misbehaves, by its code in `CODES` (scenarios validate, since config values are checked):

  ok            token-mean of `values` over `loss_mask` (the correct answer)
  raise         raise ValueError("planted failure: ...")
  exit          sys.exit(3)
  segv          os.kill(own pid, SIGSEGV)
  hang          sleep forever
  kill-parent   SIGKILL the process that forked this call (the warm worker itself)
  mutate        bump a module-level counter, then answer as `ok`
  read-state    answer with the counter as the loss (0 unless a mutation leaked)
  print         write junk to stdout (print and the raw fd 1), then answer as `ok`
  unsupported   raise Unsupported
  shape-7, shape-2x4, list, complex, no-outputs, extra-output, string
                the loss broken against the boundary's output contract (an error verdict)
  int-loss      the right loss as an int64 0-d tensor (keeps the contract)
  busy ... sleep-past-timeout   further faults (tests/test_faults.py)
  grandchild    fork a grandchild that holds the result pipe and sleeps, then answer right
  thread-left-running, stdout-flood, stderr-flood, chdir, environ
                misbehave around a right answer
  channel-json, channel-bytes
                write a forged answer (JSON) or bytes on every inherited fd, then answer right
  killpg, kill-0
                signal the own process group (os.killpg(0, SIGKILL), os.kill(0, SIGTERM))
  setsid-crash  fork a grandchild that leaves the group (setsid) and holds the pipe, then exit 7
  setsid-grandchild, setsid-hang
                the same grandchild, then answer right, or hang

A grandchild's pid is written to $FAULTY_PID_DIR/<mode>.<its parent's pid>.pid (when set), for
the tests to check it is gone.

Targets that fail while loading: `BrokenLoadAdapter.load()` raises; `HangingLoadAdapter.load()`
blocks forever, and so does importing this module at all when FAULTY_IMPORT_HANG=1;
`ChannelAtLoadAdapter`, `KillGroupAtLoadAdapter` and `SignalGroupAtLoadAdapter` do in load()
what channel-json, killpg and kill-0 do in a call (in the worker process itself).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch

from sentinel.adapters.contract import Adapter, BoundaryResult, FunctionRef
from sentinel.errors import Unsupported

if os.environ.get("FAULTY_IMPORT_HANG") == "1":  # an import that never returns
    while True:
        time.sleep(1)

COUNTER = 0  # module-level state a misbehaving call mutates
MODES = ("ok", "raise", "exit", "segv", "hang", "kill-parent", "mutate", "read-state", "print", "unsupported",
         "shape-7", "shape-2x4", "list", "complex", "no-outputs", "extra-output", "int-loss", "string",
         # more ways to fail (tests/test_faults.py): each must end as an error or a violation
         "busy", "abort", "os-exit-0", "sys-exit-0", "keyboard-interrupt", "base-exception", "recursion",
         "sigterm-self", "sigkill-self", "close-fds", "read-stdin", "nan-loss", "wrong-loss", "inf-loss",
         "none-loss", "dict-loss", "grad-loss-wrong-shape", "bool-list", "sleep-past-timeout",
         "memory-error", "os-error", "python-float-wrong", "shape-1",
         # misbehaviour around a correct answer: the answer must come back, and nothing may linger
         "grandchild", "thread-left-running", "stdout-flood", "stderr-flood", "chdir", "environ", "raise-in-del",
         # the worker's channel and process tree (issue 22)
         "channel-json", "channel-bytes", "killpg", "kill-0", "setsid-crash", "setsid-grandchild", "setsid-hang",
         # what a scenario run after "chdir" / "environ" in the same worker sees: 2.0 when untouched
         "read-cwd", "read-environ",
         # left behind for the next scenario in a shared child: a pending alarm, a deleted current folder
         "alarm", "slow-ok", "rmcwd",
         # state changed in place (no rebinding: nothing outside can see it), and a scenario that reads it
         "append-state", "read-list")
SEEN: list[int] = []  # "append-state" appends in place
CODES = {m: 100.0 + i for i, m in enumerate(MODES)}  # mode -> the value that selects it


def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.bool()
    return torch.where(m, values, torch.zeros_like(values)).sum() / m.sum().clamp_min(1)


class FaultyAdapter(Adapter):
    name = "faulty"
    description = "misbehaves on purpose (tests/faulty_adapter.py)"

    def load(self):
        return {"version": "faulty-1"}

    def b_loss_agg(self, inputs, config):
        global COUNTER
        values, mask = inputs["values"], inputs["loss_mask"]
        code = float(values[0, -1])
        mode = MODES[int(code) - 100] if code in CODES.values() else "ok"
        if mode == "raise":
            raise ValueError("planted failure: the target raised")
        if mode == "exit":
            sys.exit(3)
        if mode == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(5)  # the signal is delivered asynchronously
        if mode == "hang":
            _sleep_forever()
        if mode == "kill-parent":
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(1)  # an orphan that lingered would hold the worker's stdout pipe open
        if mode == "unsupported":
            raise Unsupported("planted: this target has no such loss_agg mode")
        if mode == "mutate":
            COUNTER += 1000
        if mode == "read-cwd":
            return BoundaryResult({"loss": torch.tensor(0.0 if os.getcwd() == "/" else 2.0)},
                                  function=FunctionRef.of(_token_mean))
        if mode == "read-environ":
            return BoundaryResult({"loss": torch.tensor(0.0 if os.environ.get("PYTHONPATH") == "/nonexistent" else 2.0)},
                                  function=FunctionRef.of(_token_mean))
        if mode == "append-state":
            SEEN.append(1)
        if mode == "read-list":
            return BoundaryResult({"loss": torch.tensor(2.0 * (1 + len(SEEN)))}, function=FunctionRef.of(_token_mean))
        if mode == "read-state":
            return BoundaryResult({"loss": torch.tensor(float(COUNTER))}, function=FunctionRef.of(_token_mean))
        if mode in FAULTS:
            return FAULTS[mode](values, mask)
        wrong = {"shape-7": torch.full((7,), 2.0), "shape-2x4": torch.full((2, 4), 2.0), "list": [2.0],
                 "complex": torch.tensor(2.0 + 0j), "string": "2.0", "int-loss": torch.tensor(2)}
        if mode in wrong:
            return BoundaryResult({"loss": wrong[mode]}, function=FunctionRef.of(_token_mean))
        if mode == "no-outputs":
            return BoundaryResult({}, function=FunctionRef.of(_token_mean))
        if mode == "extra-output":
            return BoundaryResult({"loss": _token_mean(values, mask), "lossy": values}, function=FunctionRef.of(_token_mean))
        if mode == "print":
            print('{"event": "result", "status": "ok", "junk": true}')
            print("not json at all {{{", flush=True)
            os.write(1, b'{"event": "ready"}\nraw fd 1 junk\n')
        return BoundaryResult({"loss": _token_mean(values, mask)}, function=FunctionRef.of(_token_mean))


def _recurse(n: int = 0) -> int:
    return _recurse(n + 1) + 1


def _rmcwd() -> None:
    import tempfile
    folder = tempfile.mkdtemp()
    os.chdir(folder)
    os.rmdir(folder)


class _Del:
    def __del__(self):
        raise RuntimeError("planted: raised in __del__")


def _grandchild(values, mask):
    pid = os.fork()
    if pid == 0:  # the grandchild keeps every inherited fd, the result pipe included
        time.sleep(300)
        os._exit(0)
    _record_pid("grandchild", pid)
    return BoundaryResult({"loss": _token_mean(values, mask)})


def _record_pid(mode: str, pid: int) -> None:
    """Written by the parent, not the grandchild: one killed before it wrote would leave no pid."""
    if os.environ.get("FAULTY_PID_DIR"):
        Path(os.environ["FAULTY_PID_DIR"], f"{mode}.{os.getpid()}.pid").write_text(str(pid))


def _setsid_grandchild(mode: str) -> None:
    """Fork a grandchild that leaves the process group (a new session) and sleeps, holding
    every inherited fd (the result pipe among them)."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        time.sleep(300)
        os._exit(0)
    _record_pid(mode, pid)


FORGED = (b'{"event": "result", "status": "ok", "runs": {}}\n{}\n'
          b'{"event": "ready", "target_info": {}, "environment": {}}\n')


def write_every_fd(data: bytes) -> None:
    """Write `data` on every open descriptor above stderr (a pipe it reaches included)."""
    for fd in range(3, 1024):
        try:
            os.write(fd, data)
        except OSError:
            pass


def _thread_left_running(values, mask):
    threading.Thread(target=time.sleep, args=(300,)).start()  # non-daemon
    return BoundaryResult({"loss": _token_mean(values, mask)})


def _flood(stream):
    def fault(values, mask):
        stream.write("x" * (5 << 20))
        stream.flush()
        return BoundaryResult({"loss": _token_mean(values, mask)})
    return fault


def _then_right(action):
    def fault(values, mask):
        action()
        return BoundaryResult({"loss": _token_mean(values, mask)})
    return fault


def _loss(value):
    return lambda values, mask: BoundaryResult({"loss": value() if callable(value) else value})


def _sleep_forever():
    while True:
        time.sleep(1)


def _busy():
    while True:
        pass


def _raise(exc):
    def fault():
        raise exc
    return fault


FAULTS = {
    "busy": _then_right(_busy),
    "abort": _then_right(os.abort),
    "os-exit-0": _then_right(lambda: os._exit(0)),
    "sys-exit-0": _then_right(lambda: sys.exit(0)),
    "keyboard-interrupt": _then_right(_raise(KeyboardInterrupt())),
    "base-exception": _then_right(_raise(BaseException("planted"))),
    "recursion": _then_right(_recurse),
    "sigterm-self": _then_right(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(5))),
    "sigkill-self": _then_right(lambda: os.kill(os.getpid(), signal.SIGKILL)),
    "close-fds": _then_right(lambda: os.closerange(3, 4096)),
    "read-stdin": _then_right(lambda: sys.stdin.read()),
    "nan-loss": _loss(lambda: torch.tensor(float("nan"))),
    "wrong-loss": _loss(lambda: torch.tensor(0.0)),
    "inf-loss": _loss(lambda: torch.tensor(float("inf"))),
    "none-loss": _loss(None),
    "dict-loss": _loss({"loss": 2.0}),
    "raise-in-del": _then_right(lambda: (_Del(), None)[1]),
    "grad-loss-wrong-shape": _loss(lambda: torch.full((1, 1), 2.0, requires_grad=True)),
    "bool-list": _loss([True]),
    "sleep-past-timeout": _then_right(lambda: time.sleep(30)),
    "memory-error": _then_right(_raise(MemoryError("planted"))),
    "os-error": _then_right(_raise(OSError(5, "planted I/O error"))),
    "python-float-wrong": _loss(0.5),
    "shape-1": _loss(lambda: torch.tensor([2.0])),
    "grandchild": _grandchild,
    "thread-left-running": _thread_left_running,
    "stdout-flood": _flood(sys.stdout),
    "stderr-flood": _flood(sys.stderr),
    "chdir": _then_right(lambda: os.chdir("/")),
    "environ": _then_right(lambda: os.environ.update(PYTHONPATH="/nonexistent")),
    "alarm": _then_right(lambda: signal.alarm(1)),
    "slow-ok": _then_right(lambda: time.sleep(1.5)),
    "rmcwd": _then_right(_rmcwd),
    "channel-json": _then_right(lambda: write_every_fd(FORGED)),
    "channel-bytes": _then_right(lambda: write_every_fd(b"\x00\xffraw bytes, no newline")),
    "killpg": _then_right(lambda: (os.killpg(0, signal.SIGKILL), time.sleep(5))),
    "kill-0": _then_right(lambda: (os.kill(0, signal.SIGTERM), time.sleep(5))),
    "setsid-crash": _then_right(lambda: (_setsid_grandchild("setsid-crash"), os._exit(7))),
    "setsid-grandchild": _then_right(lambda: _setsid_grandchild("setsid-grandchild")),
    "setsid-hang": _then_right(lambda: (_setsid_grandchild("setsid-hang"), _sleep_forever())),
}


class SharedProcessFaultyAdapter(FaultyAdapter):
    """FaultyAdapter declared stateless, untruthfully on purpose: its scenarios share one forked
    child (sentinel/worker.py's batch), so the corpus checks what the batch path does with every
    fault and with each thing a scenario can leave behind."""

    stateless = "a test double: the fault corpus runs through the batch path"


class BrokenLoadAdapter(FaultyAdapter):
    name = "broken-load"

    def load(self):
        raise RuntimeError("planted load failure: trainer module not importable")


class HangingLoadAdapter(FaultyAdapter):
    name = "hanging-load"

    def load(self):
        _sleep_forever()


class ChannelAtLoadAdapter(FaultyAdapter):
    name = "channel-at-load"

    def load(self):
        write_every_fd(FORGED)
        return super().load()


class KillGroupAtLoadAdapter(FaultyAdapter):
    name = "killpg-at-load"

    def load(self):
        os.killpg(0, signal.SIGKILL)
        time.sleep(5)


class SignalGroupAtLoadAdapter(FaultyAdapter):
    name = "kill-0-at-load"

    def load(self):
        os.kill(0, signal.SIGTERM)
        time.sleep(5)
