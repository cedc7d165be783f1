"""The worker: the only process that imports torch and target code.

Protocol (JSON lines): the runner writes a header {target, root, device, options, timeout}
then one job per scenario; the worker answers {"event": "ready" | "load_error"} then one
{"event": "result"} per job. On CPU each job runs in a forked child of the warmed worker,
so a crash, `sys.exit` or hang costs one scenario, and module-level state a target mutates
dies with the child instead of leaking into the next scenario.

A job with {"type": "hunt"} (see sentinel/hunt/round.py) is one round of `sentinel hunt`: the
forked child runs Hypothesis on one property with the adapter in-process (many examples
per round trip), streaming {"event": "progress"} lines before its one result.

CUDA is isolated the same way: the warm worker imports torch and the target but never
initialises CUDA (`torch.cuda.is_available` asks NVML), so each forked child initialises
its own CUDA context and dies with it. Nothing outlives the run: the worker ends when its
parent process is gone (a watchdog on the parent pid), each child runs in its own process
group with a parent-death signal, and the group is killed once the child has answered, so
a grandchild the target forked can neither hold the answer back nor linger.
"""

from __future__ import annotations

import json
import os
import platform
import select
import signal
import sys
import time
import traceback
from pathlib import Path
import threading
from typing import Any, Callable

# before torch is imported (observe imports it): is_available() must not initialise CUDA,
# or no forked child could use it
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

from . import targets  # noqa: E402
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


def _watch_parent(interval: float = 0.5) -> None:
    """End this worker (and its children's groups die by their parent-death signal) once
    the process that started it is gone: a killed CLI leaves no orphan worker."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(interval)
    threading.Thread(target=watch, daemon=True, name="watch-parent").start()

def _error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc) or repr(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}


class Worker:
    def __init__(self, header: dict[str, Any], out):
        self.header, self.out = header, out

    def send(self, msg: dict[str, Any]) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    # --- start-up ----------------------------------------------------------------------
    def load(self) -> None:
        h = self.header
        if not h.get("options", {}).get("compile"):
            os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # slime's torch.compile costs ~20 s/function on CPU
        import torch
        torch.set_num_threads(1)  # tiny tensors; and no OpenMP team exists before fork()

        from sentinel_adapters.base import TargetLoadError
        dev = h.get("device", "cpu")
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise TargetLoadError("--device cuda was asked for but torch sees no CUDA device")
        self.torch, self.device = torch, torch.device(dev)
        adapter_cls = targets.adapter_class(h["target"])
        root = Path(h["root"]) if h.get("root") else None
        self.adapter = adapter_cls(root, self.device, h.get("options") or {})
        t0 = time.perf_counter()
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
        env = {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
               "device": str(self.device), "device_name": self._device_name()}
        self.send({"event": "ready", "target_info": info, "environment": env})

    def _device_name(self) -> str:
        if self.device.type != "cuda":
            return platform.processor() or platform.machine()
        # asked in a child, so that this process stays CUDA-free
        res = self._forked(lambda emit: {"status": "ok", "name": self.torch.cuda.get_device_name(self.device)},
                           120.0, "CUDA did not initialise within 120 s", "while initialising CUDA")
        if res.get("status") != "ok":
            from sentinel_adapters.base import TargetLoadError
            raise TargetLoadError(f"CUDA cannot be used here: {res['error']['message']}")
        return res["name"]

    # --- one scenario ------------------------------------------------------------------
    def execute(self, job: dict[str, Any]) -> dict[str, Any]:
        from sentinel_adapters.base import PreconditionUnmet, Unsupported
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
            return {"status": "error", "error": _error(e), "runs": runs, "function": function,
                    "duration_s": time.perf_counter() - t0}
        return {"status": "ok", "runs": runs, "function": function, "duration_s": time.perf_counter() - t0}

    def _run(self, boundary: str, run: dict[str, Any]) -> tuple[dict[str, Any], dict | None]:
        inputs = {n: decode(enc) for n, enc in run["inputs"].items()}
        obs, function = observe(self.adapter, self.device, boundary, inputs, run["config"], run["grads"])
        return {"outputs": {n: encode(a) for n, a in obs["outputs"].items()},
                "requires_grad": obs["requires_grad"],
                "grads": {k: None if g is None else encode(g) for k, g in obs["grads"].items()},
                "inputs_after": {n: encode(a) for n, a in obs["inputs_after"].items()}}, function

    def isolated(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run a job in a forked child; a crash, exit or timeout becomes an error result."""
        timeout = float(self.header.get("timeout", 60))
        return {"runs": {}, **self._forked(self._with_mutant(job, lambda emit: self.execute(job)), timeout,
                                           f"target code ran past the {timeout:g} s timeout",
                                           "before returning a result")}

    # --- one hunt round (sentinel hunt) ------------------------------------------------
    def hunt(self, job: dict[str, Any]) -> dict[str, Any]:
        """A hunt round in a forked child; its progress lines are forwarded as they come."""
        from .hunt.round import SHRINK_TIME, run_round, warm  # hypothesis, strategies: once, before fork
        warm(job.get("property"), job.get("exclude"), job.get("pin"))
        limit = float(job.get("time_limit", 10.0)) + float(job.get("shrink_time", SHRINK_TIME)) + \
            float(self.header.get("timeout", 60))
        return self._forked(self._with_mutant(job, lambda emit: run_round(self.adapter, self.device, job, emit)), limit,
                            f"hunt round ran past {limit:g} s", "during a hunt round")

    # --- sentinel mutate ------------------------------------------------------------------
    @staticmethod
    def _with_mutant(job: dict[str, Any], fn: Callable) -> Callable:
        """fn, run after the job's mutant (sentinel mutate) is put in place: in the forked
        child only, so the warm worker serves the next mutant unchanged."""
        if not job.get("mutant"):
            return fn

        def mutated(emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
            from .mutate.apply import apply
            apply(job["mutant"])
            return fn(emit)
        return mutated

    def mutate_sources(self) -> dict[str, Any]:
        """The functions the adapter's boundaries call, with their source (in a child)."""
        from .mutate.apply import sources
        root = Path(self.header["root"]) if self.header.get("root") else None
        return self._forked(lambda emit: {"status": "ok", **sources(self.adapter, root)},
                            float(self.header.get("timeout", 60)), "reading the mapped functions timed out",
                            "while reading the mapped functions")

    def _forked(self, fn: Callable[[Callable[[dict[str, Any]], None]], dict[str, Any]], timeout: float,
                timeout_message: str, crash_when: str) -> dict[str, Any]:
        """fn(emit) in a forked child: its {"event": "progress"} messages are forwarded to the
        runner as they come, its return value is the result. An exception, exit, crash or a
        child still running after `timeout` s is an {"status": "error"} result. Without fork
        (no os.fork, or CUDA initialised at load) fn runs here and an exception is the error
        result. The child runs in its own process group, killed once it has answered."""
        if not getattr(self, "fork_ok", hasattr(os, "fork")):
            try:
                return fn(self.send)
            except Exception as e:  # noqa: BLE001
                return {"status": "error", "error": _error(e)}
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.setpgid(0, 0)  # its own group: whatever it forks is killed with it
            _die_with_parent()
            # stdin is the worker's job stream: target code that reads it must not eat the next jobs
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            sys.stdin = open(0, closefd=False)
            os.close(r)
            # drop the protocol pipe: if the worker dies, the runner must see EOF at once,
            # not when this child finishes
            os.close(self.out.fileno())
            sink = os.fdopen(w, "w")

            def emit(msg: dict[str, Any]) -> None:
                sink.write(json.dumps(msg) + "\n")
                sink.flush()
            try:
                try:
                    line = json.dumps(fn(emit))
                except BaseException as e:  # noqa: BLE001 - sys.exit in target code is an error result too
                    line = json.dumps({"status": "error", "error": _error(e)})
                sink.write(line + "\n")
                sink.close()
            finally:
                os._exit(0)
        os.close(w)
        result, buf, deadline = None, b"", time.monotonic() + timeout
        with os.fdopen(r, "rb") as f:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([f], [], [], left)[0]:
                    _kill_group(pid)
                    os.waitpid(pid, 0)
                    return {"status": "error", "error": {"type": "Timeout", "message": timeout_message, "traceback": ""}}
                chunk = os.read(f.fileno(), 1 << 20)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf and result is None:
                    line, buf = buf.split(b"\n", 1)
                    msg = json.loads(line)
                    if msg.get("event") == "progress":
                        self.send(msg)
                    else:
                        result = msg  # the answer: no need to wait for an EOF a grandchild may hold back
                if result is not None:
                    break
        _, status = os.waitpid(pid, 0)
        _kill_group(pid)
        if result is not None:
            return result
        how = (f"killed by signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exited with status {os.WEXITSTATUS(status)}")
        return {"status": "error", "error": {
            "type": "Crash", "message": f"the target process {how} {crash_when}", "traceback": ""}}


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main() -> None:
    _watch_parent()
    # The protocol owns the original stdout; anything target code prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch  # noqa: F401 - most of a start (~1 s); a pre-started worker does it before its header comes
    line = sys.stdin.readline()
    if not line:  # a pre-started worker nobody needed
        return
    header = json.loads(line)
    worker = Worker(header, proto)
    try:
        worker.load()
    except BaseException as e:  # noqa: BLE001
        worker.send({"event": "load_error", "error": _error(e)})
        return
    for line in sys.stdin:
        job = json.loads(line)
        kind = job.get("type")
        result = worker.hunt(job) if kind == "hunt" else worker.mutate_sources() if kind == "mutate-sources" \
            else worker.isolated(job)
        result.update(event="result", scenario=job["scenario"])
        worker.send(result)


if __name__ == "__main__":
    main()
