"""The two sides of a differential hunt, seen from the driver: a target checked out, its
worker, and a session with the worker's forked child (a `{"type": "session"}` job,
`hunt.worker.session.serve`).

A side is started in its own thread (checkout, worker start, session); both sides answer
each request concurrently: `Sides.ask` sends the same request to both, then reads both.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener
from typing import Any

from ...errors import SideDied
from ...process import WorkerDied, WorkerHandle
from ...report import ExceptionInfo, Target
from ...runner import LOAD_TIMEOUT, TargetSpec, checkout_root, evaluate, job, plan
from ...spec import Scenario

CONNECT_TIMEOUT = 120.0  # seconds for a side's forked child to call back


@dataclass
class Side:
    """One target of a differential hunt."""

    name: str  # "base" | "head"
    spec: TargetSpec
    target: Target
    timeout: float
    root: str | None = None
    worker: WorkerHandle | None = None
    conn: Connection | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the session's hello: boundaries, deviations
    env: dict[str, Any] = field(default_factory=dict)
    startup_s: float = 0.0
    job_extra: dict[str, Any] = field(default_factory=dict)  # more for the session's job (sentinel mutate: its mutant)

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def ok(self) -> bool:
        return self.conn is not None

    def start(self, stack: ExitStack, session_s: float, session: bool = True) -> None:
        """Check out, start the worker, open the session (unless `session` is False); on
        failure target.load_error says why."""
        t0 = time.perf_counter()
        self.root = checkout_root(stack, self.spec, self.target)
        if self.target.load_error is not None:
            return
        header = {"target": self.spec.name, "root": self.root, "device": self.spec.device, "timeout": self.timeout,
                  "options": {"plant": self.spec.plant, "compile": self.spec.compile}}
        try:
            self.worker = WorkerHandle(header)
            hello = self.worker.receive(LOAD_TIMEOUT)
        except WorkerDied as e:
            self.target.load_error = ExceptionInfo(type="WorkerDied", message=str(e))
            return
        if hello["event"] == "load_error":
            self.target.load_error = ExceptionInfo(**hello["error"])
            self.worker.close()
            self.worker = None
            return
        info, self.env = hello["target_info"], hello["environment"]
        t = self.target
        t.version, t.stubs, t.import_s = info.get("version"), info.get("stubs", []), info.get("import_s")
        t.device = self.env.get("device", self.spec.device)
        if session:
            self.open(session_s)
        self.startup_s = time.perf_counter() - t0

    def open(self, session_s: float) -> None:
        """Open a session with the worker (a forked child), and read its hello."""
        self.conn = self._session(session_s)
        if self.conn is not None:
            self.info = self.conn.recv()["hello"]

    def _session(self, session_s: float) -> Connection | None:
        """Ask the worker for a session child and wait for it to call back."""
        key = secrets.token_bytes(16)
        got: list[Connection] = []
        done = threading.Event()
        listener = folder = None
        try:  # the socket's folder goes whatever happens meanwhile (an interrupt, a worker that died)
            if sys.platform.startswith("linux"):  # an abstract socket: no file, so nothing a SIGKILL leaves behind
                address = f"\0sentinel-session-{secrets.token_hex(8)}"
            else:
                folder = tempfile.mkdtemp(prefix="sentinel-session-")
                address = os.path.join(folder, "s")
            listener = Listener(address, family="AF_UNIX", authkey=key)

            def accept() -> None:
                try:
                    got.append(listener.accept())
                except Exception:  # noqa: BLE001 - a bad handshake: no session
                    pass
                done.set()
            threading.Thread(target=accept, daemon=True).start()
            self.worker.send({"type": "session", "scenario": f"session:{self.name}",
                              "session": {"address": address, "authkey": key.hex()},
                              "time_limit": session_s, **self.job_extra})
            if not done.wait(CONNECT_TIMEOUT) or not got:
                self.target.load_error = ExceptionInfo(type="WorkerDied", message="the side's session never called back")
                self.worker.kill()
                self.worker = None
        finally:
            if listener is not None:
                listener.close()  # unlinks a socket file
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        return got[0] if got else None

    def close(self) -> dict[str, Any] | None:
        """End the session; the worker stays for `verify` until `stop`. The session child's
        result (None: no session, or its worker died)."""
        if self.conn is None:
            return None
        try:
            self.conn.send({"op": "stop"})
            self.conn.close()
        except OSError:
            pass
        self.conn = None
        if self.worker is not None:
            try:
                return self.worker.receive(30)
            except WorkerDied:
                self.worker = None
        return None

    def verify(self, sc: Scenario) -> str | None:
        """The scenario's verdict on this side, run as `sentinel run` runs it (None: no worker)."""
        if self.worker is None:
            return None
        try:
            runs = plan(sc)
            self.worker.send(job(sc, runs))
            return evaluate(sc, runs, self.worker.receive(self.timeout + 30), self.key).verdict
        except WorkerDied:
            self.worker = None
            return None

    def stop(self) -> None:
        self.close()
        if self.worker is not None:
            self.worker.close()
            self.worker = None


class Sides:
    """Both sides: started together, asked together."""

    def __init__(self, base: Side, head: Side):
        self.base, self.head = base, head
        self.pool = ThreadPoolExecutor(2)

    def start(self, stack: ExitStack, session_s: float) -> None:
        list(self.pool.map(lambda s: s.start(stack, session_s), (self.base, self.head)))

    def ask(self, request: dict[str, Any]) -> tuple[Any, Any]:
        """The same request to both sides, answered concurrently."""
        for s in (self.base, self.head):
            try:
                s.conn.send(request)
            except (OSError, AttributeError):
                raise SideDied(f"{s.name} ({s.key}): its session is gone") from None
        out = []
        for s in (self.base, self.head):
            try:
                out.append(s.conn.recv())
            except (EOFError, OSError):
                why = s.worker._why() if s.worker is not None else "no worker"
                raise SideDied(f"{s.name} ({s.key}): {why}") from None
        return out[0], out[1]

    def head_reached(self) -> bool | None:
        """Whether the head's mutant ran its change since the last ask (`reach.take`)."""
        s = self.head
        try:
            s.conn.send({"op": "reached"})
            return s.conn.recv().get("reached")
        except (EOFError, OSError, AttributeError):
            why = s.worker._why() if s.worker is not None else "no worker"
            raise SideDied(f"{s.name} ({s.key}): {why}") from None

    def stop(self) -> None:
        for s in (self.base, self.head):
            s.stop()
        self.pool.shutdown(wait=False)
