"""The worker: the only process that imports torch and target code.

Protocol (JSON lines): the runner writes a header {target, root, device, options, timeout, key}
then one job per scenario; the worker answers {"event": "phase"} notes while it loads the target
(so a load that blocks is reported by phase), {"event": "ready" | "load_error"}, then one
{"event": "result"} per job. Every answer is a line signed with the header's key, and a forked
child signs its lines with a key of its own (sentinel/channel.py): what target code writes on
a file descriptor it inherited is never taken for an answer. Each job runs in a forked child of the warmed worker,
so a crash, `sys.exit` or hang costs one scenario, and module-level state a target mutates
dies with the child instead of leaking into the worker.

{"type": "batch", "jobs": [...]} (what the runner sends) runs many scenarios in one forked
child, one result each as it comes: a fork per scenario cost ~15 ms of copy-on-write faults
and teardown against ~2 ms of the scenario itself (benchmarks/bench_gate.py). A crash, exit,
hang or forged line still costs only the scenario that was running: it gets the answer a fork
of its own would have given, and the scenarios after it run on in a fresh fork; so do they
after a scenario that left something behind the next could see (sentinel/leftovers.py). The
child waits for the worker to pass each answer on before it starts the next scenario: one
that kills the worker costs no answer already given.

Job types (`JOBS`, the one dispatch): a scenario (no type, or "scenario") runs its boundary
calls; {"type": "hunt"} is one round of `sentinel hunt` (sentinel/hunt/worker/round.py): the
forked child runs Hypothesis on one property with the adapter in-process (many examples per
round trip), streaming {"event": "progress"} lines before its one result; {"type": "session"}
is a differential hunt's side (sentinel/hunt/worker/session.py): the child answers the
driver's batches over a connection of its own until told to stop; {"type": "mutate-sources"}
reads the functions the boundaries call (`sentinel mutate`).

CUDA is isolated the same way: the warm worker imports torch and the target but never
initialises CUDA (`torch.cuda.is_available` asks NVML), so each forked child initialises
its own CUDA context and dies with it. Nothing outlives the run: the worker ends when its
parent process is gone (a watchdog on the parent pid), each child runs in its own process
group with a parent-death signal, and the group is killed once the child has answered. The
worker is a child subreaper (sentinel/reaper.py): a grandchild that left the group with
setsid() is re-parented to the worker and killed with the rest, and a child that exits is
noticed even while such a grandchild holds its pipe open.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import platform
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

# before torch is imported (observe imports it): is_available() must not initialise CUDA,
# or no forked child could use it
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

from . import channel, reaper, targets  # noqa: E402
# imported here, not in each scenario's child, where an import is paid again per scenario
from .coverage import measuring  # noqa: E402
from .leftovers import Baseline  # noqa: E402
from .adapters.defects import as_error  # noqa: E402
from .observe import observe  # noqa: E402
from .tensors import decode, encode  # noqa: E402

PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    """This process gets `sig` when the thread that forked it ends (Linux); no-op elsewhere."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


def _error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc) or repr(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}



@functools.cache
def machine_facts() -> tuple[str, str]:
    """The platform string and the CPU's name; the zygote asks first, so its forks inherit them
    (the CPU's name runs `uname -p`, the platform string reads the interpreter's binary)."""
    return platform.platform(), platform.processor() or platform.machine()

class Worker:
    def __init__(self, header: dict[str, Any], out, key: bytes, private: tuple[int, ...] = ()):
        self.header, self.out, self.key = header, out, key
        self.private = private  # the worker's own channels: a forked child closes them

    def send(self, msg: dict[str, Any]) -> None:
        self.out.write(channel.frame(self.key, msg))
        self.out.flush()

    def phase(self, what: str) -> None:
        self.send({"event": "phase", "what": what})

    # --- start-up ----------------------------------------------------------------------
    def load(self) -> None:
        h = self.header
        if not h.get("options", {}).get("compile"):
            os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # slime's torch.compile costs ~20 s/function on CPU
        import torch
        torch.set_num_threads(1)  # tiny tensors; and no OpenMP team exists before fork()
        if h.get("coverage"):
            import coverage  # noqa: F401 - once here, not in each measured child

        from sentinel.errors import TargetLoadError
        dev = h.get("device", "cpu")
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise TargetLoadError("--device cuda was asked for but torch sees no CUDA device")
        self.torch, self.device = torch, torch.device(dev)
        self.phase(f"while importing the adapter of {h['target']}")
        adapter_cls = targets.adapter_class(h["target"])
        root = Path(h["root"]) if h.get("root") else None
        from .checkouts import owned
        if root is not None and not owned(root):  # the user's own tree (--head WORKTREE): no __pycache__ there
            sys.dont_write_bytecode = True
        self.adapter = adapter_cls(root, self.device, h.get("options") or {})
        t0 = time.perf_counter()
        self.phase(f"in {adapter_cls.__name__}.load()")
        info = self.adapter.load() or {}
        info.setdefault("stubs", list(self.adapter.stubs))
        info["import_s"] = round(time.perf_counter() - t0, 4)
        info["boundaries"] = self.adapter.supported()
        info["declined"] = {b: m["declined"] for b, m in type(self.adapter).mapping().items() if m["declined"]}
        info["preconditions"] = {n: p.reason for n, p in type(self.adapter).preconditions.items()}
        # forked isolation needs a worker that never touched CUDA; an adapter that did while
        # loading gets its scenarios run in this process (and the report says so)
        self.fork_ok = hasattr(os, "fork") and not (self.device.type == "cuda" and torch.cuda.is_initialized())
        if not self.fork_ok:
            info["isolation"] = "in-process: the adapter initialised CUDA while loading"
        env = {"python": platform.python_version(), "torch": torch.__version__, "platform": machine_facts()[0],
               "device": str(self.device), "device_name": self._device_name()}
        self.send({"event": "ready", "target_info": info, "environment": env})

    def _device_name(self) -> str:
        if self.device.type != "cuda":
            return machine_facts()[1]
        # asked in a child, so that this process stays CUDA-free
        res = self._forked(lambda emit: {"status": "ok", "name": self.torch.cuda.get_device_name(self.device)},
                           120.0, "CUDA did not initialise within 120 s", "while initialising CUDA")
        if res.get("status") != "ok":
            from sentinel.errors import TargetLoadError
            raise TargetLoadError(f"CUDA cannot be used here: {res['error']['message']}")
        return res["name"]

    # --- one scenario ------------------------------------------------------------------
    def execute(self, job: dict[str, Any]) -> dict[str, Any]:
        from sentinel.errors import PreconditionUnmet, Unsupported
        t0 = time.perf_counter()
        runs, function = {}, None
        try:
            for run in job["runs"]:
                obs, fn = self._run(job["boundary"], run)
                runs[run["name"]] = obs
                function = function or fn
        except PreconditionUnmet as e:  # the trainer never receives this input: no call was made
            return {"status": "excluded", "precondition": e.name, "reason": str(e), "runs": runs,
                    "function": function, "duration_s": time.perf_counter() - t0}
        except Unsupported as e:
            return {"status": "unsupported", "reason": str(e), "runs": runs, "function": function,
                    "duration_s": time.perf_counter() - t0}
        except BaseException as e:  # noqa: BLE001 - sys.exit in target code is an error verdict too
            if isinstance(e, KeyboardInterrupt):
                raise
            # the adapter's own fault (a keyword this version lacks, a broken contract): named by its line
            defect = as_error(self.adapter, job["boundary"], e)
            error = {**_error(e), **defect} if defect else _error(e)
            return {"status": "error", "error": error, "runs": runs, "function": function,
                    "duration_s": time.perf_counter() - t0}
        return {"status": "ok", "runs": runs, "function": function, "duration_s": time.perf_counter() - t0}

    def _run(self, boundary: str, run: dict[str, Any]) -> tuple[dict[str, Any], dict | None]:
        inputs = {n: decode(enc) for n, enc in run["inputs"].items()}
        obs, function = observe(self.adapter, self.device, boundary, inputs, run["config"], run["grads"],
                                  run.get("casts"), run.get("extras", ()))
        return {"outputs": {n: encode(a) for n, a in obs["outputs"].items()},
                "requires_grad": obs["requires_grad"],
                "grads": {k: None if g is None else encode(g) for k, g in obs["grads"].items()},
                "inputs_after": {n: encode(a) for n, a in obs["inputs_after"].items()},
                "extras": {n: encode(obs["extras"][n]) for n in run.get("extras", ()) if n in obs["extras"]}}, function

    def isolated(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run a job in a forked child; a crash, exit or timeout becomes an error result."""
        timeout = float(self.header.get("timeout", 60))
        return {"runs": {}, **self._forked(self._with_mutant(job, lambda emit: self._measured(job)), timeout,
                                           f"target code ran past the {timeout:g} s timeout",
                                           "before returning a result")}

    def batch(self, job: dict[str, Any]) -> None:
        """Scenario jobs in one forked child (see the module docstring), each answered as it ends,
        where the adapter declares its calls leave no state (`Adapter.stateless`) and on CPU (a
        CUDA error can leave the context unusable for the rest of the process). Otherwise, and
        under coverage or a mutant (their per-job set-up), each keeps a fork of its own."""
        todo = list(job["jobs"])
        if (self.header.get("coverage") or any(j.get("mutant") for j in todo)
                or not getattr(self.adapter, "stateless", "") or self.device.type != "cpu"):
            for j in todo:
                self._answer(j, self.isolated(j))
            return
        timeout = float(self.header.get("timeout", 60))
        while todo:
            def run_all(emit: Callable[[dict[str, Any]], None], jobs: tuple = tuple(todo)) -> dict[str, Any]:
                start = Baseline(self.torch, self.adapter)
                for j in jobs:
                    start.restore()
                    if not emit({**self.execute(j), "event": "answer"}) or start.left():
                        break  # the next scenario gets a fresh fork
                return {"status": "ok", "event": "batch-end"}

            res = self._forked(run_all, timeout, f"target code ran past the {timeout:g} s timeout",
                               "before returning a result", each=lambda msg: self._answer(todo.pop(0), msg))
            if res.get("event") != "batch-end" and todo:  # it ended the scenario running then; the rest go on
                self._answer(todo.pop(0), {"runs": {}, **res})

    def _answer(self, job: dict[str, Any], result: dict[str, Any]) -> None:
        self.send({**result, "event": "result", "scenario": job["scenario"]})

    def _measured(self, job: dict[str, Any]) -> dict[str, Any]:
        """execute(job), under branch coverage of the trainer's files where the header names a
        coverage folder (`sentinel hunt --coverage` runs the catalog this way first)."""
        roots = self.adapter.trainer_roots() if hasattr(self.adapter, "trainer_roots") else []
        with measuring(self.header.get("coverage"), roots):
            return self.execute(job)

    # --- one hunt round (sentinel hunt) ------------------------------------------------
    def hunt(self, job: dict[str, Any]) -> dict[str, Any]:
        """A hunt round in a forked child; its progress lines are forwarded as they come."""
        from .hunt.worker.round import SHRINK_TIME, run_round, warm  # hypothesis, strategies: once, before fork
        warm(job.get("property"), job.get("exclude"), job.get("pin"), job.get("origin"), self.adapter)
        limit = float(job.get("time_limit", 10.0)) + float(job.get("shrink_time", SHRINK_TIME)) + \
            float(self.header.get("timeout", 60))
        return self._forked(self._with_mutant(job, lambda emit: run_round(self.adapter, self.device, job, emit)), limit,
                            f"hunt round ran past {limit:g} s", "during a hunt round")

    def session(self, job: dict[str, Any]) -> dict[str, Any]:
        """A differential hunt's side: a forked child serving the driver until it says stop."""
        from .hunt.worker.session import serve
        limit = float(job.get("time_limit", 10.0)) + float(self.header.get("timeout", 60))
        return self._forked(self._with_mutant(job, lambda emit: serve(self.adapter, self.device, job, emit)), limit,
                            f"hunt round ran past {limit:g} s", "during a hunt round")

    # --- sentinel mutate ------------------------------------------------------------------
    @staticmethod
    def _with_mutant(job: dict[str, Any], fn: Callable) -> Callable:
        """fn, run after the job's mutant (sentinel mutate) is put in place: in the forked
        child only, so the warm worker serves the next mutant unchanged. Its result says
        whether the mutant's change ran (`mutate.reach`)."""
        if not job.get("mutant"):
            return fn
        from .mutate import reach
        from .mutate.apply import apply  # in the worker, once: not in every mutant's child

        def mutated(emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
            apply(job["mutant"])
            return {**fn(emit), "reached": reach.reached()}
        return mutated

    def mutate_sources(self, job: dict[str, Any]) -> dict[str, Any]:
        """The functions the adapter's boundaries call, with their source (in a child)."""
        from .mutate.apply import sources
        root = Path(self.header["root"]) if self.header.get("root") else None
        return self._forked(lambda emit: {"status": "ok", **sources(self.adapter, root)},
                            float(self.header.get("timeout", 60)), "reading the mapped functions timed out",
                            "while reading the mapped functions")

    def _forked(self, fn: Callable[[Callable[[dict[str, Any]], None]], dict[str, Any]], timeout: float,
                timeout_message: str, crash_when: str,
                each: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """fn(emit) in a forked child: its {"event": "progress"} messages are forwarded to the
        runner as they come, its return value is the result. An exception, exit, crash or a
        child still running after `timeout` s is an {"status": "error"} result. Without fork
        (no os.fork, or CUDA initialised at load) fn runs here and an exception is the error
        result. The child runs in its own process group, killed once it has answered, and then
        every descendant it left (one that left the group too) is killed. each: called with every
        {"event": "answer"} line (a batch's per-scenario result), which restarts the timeout."""
        if not getattr(self, "fork_ok", hasattr(os, "fork")):
            def here(msg: dict[str, Any]) -> None:
                (each if each is not None and msg.get("event") == "answer" else self.send)(msg)
            try:
                return fn(here)
            except Exception as e:  # noqa: BLE001
                return {"status": "error", "error": _error(e)}
        key = channel.new_key()
        before = frozenset(reaper.descendants(os.getpid()))  # processes the adapter's load() started
        r, w = os.pipe()
        ack_r, ack_w = os.pipe() if each is not None else (None, None)
        pid = os.fork()
        if pid == 0:  # child
            # what the worker holds is the child's only to read: frozen, the child's cyclic GC never
            # walks it (a walk writes every object's GC header: copy-on-write faults, page by page)
            gc.freeze()
            os.setpgid(0, 0)  # its own group: whatever it forks is killed with it
            _die_with_parent()
            os.close(r)
            if ack_w is not None:
                os.close(ack_w)
            # the worker's job stream and protocol pipe are not the child's: target code can
            # neither read the next jobs nor write on the protocol, and if the worker dies the
            # runner sees EOF at once, not when this child finishes
            for fd in self.private:
                os.close(fd)
            sink = os.fdopen(w, "wb")

            def emit(msg: dict[str, Any]) -> bool:
                """Send msg; for an answer, wait until the worker passed it on (False: it could not say)."""
                sink.write(channel.frame(key, msg))
                sink.flush()
                if ack_r is None or msg.get("event") != "answer":
                    return True
                try:
                    if not os.read(ack_r, 1):
                        os._exit(0)  # the worker is gone: nobody reads on
                except OSError:  # target code closed it: the scenarios after run in a fresh fork
                    return False
                return True
            try:
                try:
                    line = channel.frame(key, fn(emit))
                except BaseException as e:  # noqa: BLE001 - sys.exit in target code is an error result too
                    line = channel.frame(key, {"status": "error", "error": _error(e)})
                sink.write(line)
                sink.close()
            finally:
                os._exit(0)
        os.close(w)
        if ack_r is not None:
            os.close(ack_r)
        deadline = time.monotonic() + timeout
        try:
            how, value, status = self._collect(r, pid, key, deadline, each, timeout, ack_w)
        finally:
            for fd in (r, ack_w):
                if fd is not None:
                    os.close(fd)
        if how == "ended" and status is None:  # EOF: the child is ending, or closed the pipe and runs on
            status = _wait_child(pid, deadline)
            how = "timeout" if status is None else how
        _kill_group(pid)
        if status is None:
            _, status = os.waitpid(pid, 0)
        reaper.kill_descendants(os.getpid(), keep=before, reap=True)  # a grandchild that left the group
        if how == "result":
            return value
        if how == "timeout":
            return {"status": "error", "error": {"type": "Timeout", "message": timeout_message, "traceback": ""}}
        if how == "forged":
            return {"status": "error", "error": {"type": "ChannelError", "traceback": "", "message":
                    f"target {self.header.get('target')!r} wrote on the worker's result channel {crash_when}, "
                    f"so its answer cannot be trusted ({value})"}}
        how = (f"killed by signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exited with status {os.WEXITSTATUS(status)}")
        return {"status": "error", "error": {
            "type": "Crash", "message": f"the target process {how} {crash_when}", "traceback": ""}}

    def _collect(self, r: int, pid: int, key: bytes, deadline: float,
                 each: Callable[[dict[str, Any]], None] | None = None, timeout: float = 0.0,
                 ack: int | None = None) -> tuple[str, Any, int | None]:
        """Read the child's signed lines, forwarding progress, until one of: ("result", msg);
        ("forged", Forged) a line the child did not sign; ("timeout", None) past the deadline;
        ("ended", None) EOF, or the child exited with nothing more in the pipe (a grandchild
        may hold it open: its exit is not waited past). The third item: the child's wait
        status, when it was reaped here. An "answer" line goes to `each`, is acknowledged on `ack`
        and gives `timeout` s more."""
        buf, status, pidfd = b"", None, _pidfd(pid)
        try:
            while True:
                if status is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return "timeout", None, None
                    fds, wait = ([r], min(left, 0.05)) if pidfd is None else ([r, pidfd], left)
                else:  # the child is gone: take what is in the pipe already, wait for nothing more
                    fds, wait = [r], 0
                ready = select.select(fds, [], [], wait)[0]
                if r in ready:
                    chunk = os.read(r, 1 << 20)
                    if not chunk:
                        return "ended", None, status
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        try:
                            msg = channel.unframe(key, line)
                        except channel.Forged as e:
                            return "forged", e, status
                        if each is not None and msg.get("event") == "answer":
                            each(msg)
                            _acknowledge(ack)
                            deadline = time.monotonic() + timeout
                        elif msg.get("event") != "progress":
                            return "result", msg, status  # no need to wait for an EOF a grandchild may hold back
                        else:
                            self.send(msg)
                elif status is not None:
                    return "ended", None, status
                elif pidfd is None or pidfd in ready:
                    done, st = os.waitpid(pid, os.WNOHANG)
                    if done:
                        status = st
        finally:
            if pidfd is not None:
                os.close(pidfd)


# every job type the worker serves (see the module docstring); "batch" answers for itself
JOBS: dict[str, Callable[[Worker, dict[str, Any]], dict[str, Any]]] = {
    "scenario": Worker.isolated, "hunt": Worker.hunt, "session": Worker.session, "mutate-sources": Worker.mutate_sources}


def _acknowledge(fd: int | None) -> None:
    if fd is None:
        return
    try:
        os.write(fd, b".")
    except OSError:  # the child is gone, or closed it: its end is noticed by the reader
        pass


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (Linux 5.3+), else None (polled)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _wait_child(pid: int, deadline: float) -> int | None:
    """The child's wait status once it exits on its own before `deadline`, else None."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main() -> None:
    reaper.become_subreaper()
    reaper.watch_parent()  # a killed CLI leaves no orphan worker
    # The protocol owns the original stdout and stdin, on descriptors of their own; target code
    # gets stderr for stdout (anything it prints) and /dev/null for stdin (it cannot eat jobs).
    proto, jobs = os.fdopen(os.dup(1), "wb"), os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch  # noqa: F401 - most of a start (~1 s); a pre-started worker does it before its header comes
    line = jobs.readline()
    if not line:  # a pre-started worker nobody needed
        return
    header = json.loads(line)
    worker = Worker(header, proto, bytes.fromhex(header.pop("key")), (proto.fileno(), jobs.fileno()))
    try:
        worker.load()
    except BaseException as e:  # noqa: BLE001
        worker.send({"event": "load_error", "error": _error(e)})
        return
    for line in jobs:
        job = json.loads(line)
        if job.get("type") == "batch":
            worker.batch(job)
            continue
        result = JOBS[job.get("type") or "scenario"](worker, job)
        result.update(event="result", scenario=job["scenario"])
        worker.send(result)


if __name__ == "__main__":
    main()
