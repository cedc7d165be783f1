"""The zygote's own side (`python -m sentinel.zygote_server FD [TARGET]`): import torch (and TARGET's declared libraries), then fork a
worker per request; see sentinel/zygote.py for the whole picture and the CLI's side.

`python -m sentinel.zygote_server --listen PATH` is one zygote shared by every CLI process
that finds its socket in `SENTINEL_ZYGOTE_SOCKET` (a CI job or a test session that calls
`sentinel` hundreds of times imports torch once): each connection is served by a fork of it,
a private zygote as a CLI's own would be, which ends with the connection (the CLI's exit or
kill) and kills its workers then. The listener ends with the process that started it."""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
from typing import Any

from . import zygote
from .zygote import MSG_BYTES


def _import(names: list[str], done: set[str]) -> None:
    for name in names:
        if name not in done:
            done.add(name)
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - not installed here: the fork's own import will say so
                pass


def _become_worker(sock: socket.socket, fds: list[int], request: dict[str, Any], start_cwd: str) -> None:
    """In the fork: the CLI's pipes as 0, 1, 2, its environment and folder; then the worker."""
    sock.close()
    _unwake()
    os.setsid()
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    old_path = os.environ.get("PYTHONPATH", "")
    os.environ.clear()
    os.environ.update(request["env"])
    # the worker's own rule (sentinel/worker.py), which the CLI's environment does not carry:
    # torch.cuda.is_available asks NVML, so this process never initialises CUDA before its forks
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    os.chdir(request["cwd"])
    # sys.path as a new interpreter here would have it: the CLI's PYTHONPATH and folder
    new_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    gone = {p for p in old_path.split(os.pathsep) if p} - set(new_path)
    sys.path[:] = [request["cwd"] if p == start_cwd else p for p in sys.path if p not in gone]
    sys.path[1:1] = [p for p in new_path if p not in sys.path]
    importlib.invalidate_caches()
    from .worker import main
    try:
        main()
    finally:
        os._exit(0)


def _ready(targets: list[str] = ()) -> set[str]:
    """torch, the worker's code and `targets`' declared libraries, imported before any fork."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # as the worker: no CUDA before fork
    imported: set[str] = set()
    _import(["torch", "sentinel.worker"], imported)
    from .worker import machine_facts
    machine_facts()  # cached here once (a `uname -p` child and a read of the interpreter), not per fork
    if targets:
        from .targets import preload
        try:
            names = [n for t in targets for n in preload(t)]
        except Exception:  # noqa: BLE001 - a broken entry point: the fork's own load will say so
            names = []
        _import(names, imported)  # what a fork request would ask for, while the CLI is still starting
    return imported


_wake: tuple[int, int] | None = None  # a pipe that a SIGCHLD writes to: a worker's exit ends the wait at once


def _wake_on_exit() -> int:
    """The read end of a pipe that becomes readable when a fork exits: its exit is reported to
    the CLI at once, not at the next poll (the CLI waits for it after every run)."""
    global _wake
    _wake = os.pipe()
    for fd in _wake:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(_wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler: the wakeup fd needs one
    return _wake[0]


def _unwake() -> None:
    """In a fork: the zygote's SIGCHLD handling is not the worker's."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if _wake is not None:
        signal.set_wakeup_fd(-1)
        for fd in _wake:
            os.close(fd)


def serve(sock: socket.socket, imported: set[str], start_cwd: str) -> None:
    """Fork a worker per request on `sock` until it closes or this process's parent ends."""
    # no parent-death signal: it fires when the *thread* that started us ends (a pool thread);
    # the loop below notices the CLI's end instead
    parent = os.getppid()
    forks: set[int] = set()
    woken = _wake_on_exit()
    while True:
        for pid in list(forks):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, None
            if done:
                forks.discard(pid)
                _send(sock, {"exit": pid, "status": status})
        if os.getppid() != parent:
            break
        ready = select.select([sock, woken], [], [], 0.2)[0]
        if woken in ready:
            try:
                while os.read(woken, 512):
                    pass
            except BlockingIOError:
                pass
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MSG_BYTES, 3)
        except OSError:
            break
        if not data:
            break
        request = json.loads(data)
        if request.get("op") != "fork" or len(fds) != 3:
            for f in fds:
                os.close(f)
            continue
        _import(request.get("preload") or [], imported)
        pid = os.fork()
        if pid == 0:
            _become_worker(sock, fds, request, start_cwd)
        for f in fds:
            os.close(f)
        forks.add(pid)
        _send(sock, {"pid": pid})
    from . import reaper
    reaper.kill_descendants(os.getpid())  # every worker and what it left (a grandchild under it too)


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        pass


def listen(path: str) -> None:
    """The shared zygote: accept CLI connections on `path`, each served by a fork."""
    parent, start_cwd = os.getppid(), os.getcwd()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the finally below: no socket file left
    imported = _ready()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for stale in (path + ".tmp", path):
        if os.path.exists(stale):
            os.unlink(stale)
    server.bind(path + ".tmp")
    with open(path + ".json", "w") as f:
        json.dump(zygote.identity(), f)
    server.listen(64)
    os.rename(path + ".tmp", path)  # the path appears only once this listens: clients never wait
    server.settimeout(0.2)
    try:
        while os.getppid() == parent:
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:  # the connections' zygotes that ended
                    pass
            except ChildProcessError:
                pass
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            if os.fork() == 0:
                server.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the listener's own; a worker dies of SIGTERM
                serve(conn, imported, start_cwd)
                os._exit(0)
            conn.close()
    finally:
        server.close()
        for made in (path, path + ".json"):
            try:
                os.unlink(made)
            except OSError:
                pass
        from . import reaper
        reaper.kill_descendants(os.getpid(), reap=True)


if __name__ == "__main__":
    if sys.argv[1] == "--listen":
        listen(sys.argv[2])
    else:
        serve(socket.socket(fileno=int(sys.argv[1])), _ready(sys.argv[2:]), os.getcwd())
