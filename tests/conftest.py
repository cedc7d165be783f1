"""Session-wide test settings: the subprocesses share a bytecode cache of this session; the
checkout cache (sentinel/checkouts.py) lives in a folder of this session, so a test run never
fills or prunes the user's ~/.cache/rl-sentinel. A test that
needs its own cache sets SENTINEL_CACHE_DIR itself (monkeypatch), which wins. One shared zygote
serves the session's CLI calls (torch imported once, not per call)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest


@pytest.fixture(scope="session", autouse=True)
def _session_bytecode():
    """Where the environment says not to write bytecode (PYTHONDONTWRITEBYTECODE), each of the
    session's hundreds of CLI processes would compile the checkout's modules from source again
    (~0.35 s of CPU each): they share a bytecode cache in a folder of this session instead
    (PYTHONPYCACHEPREFIX), so nothing is written beside the sources and it is gone afterwards."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        yield
        return
    folder = tempfile.mkdtemp(prefix="sentinel-test-pyc-")
    saved = os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    try:
        yield
    finally:
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = saved
        shutil.rmtree(folder, ignore_errors=True)


def _session_folder(variable: str, prefix: str):
    """`variable` names a folder of this session, removed after it; a value the caller set is kept."""
    if os.environ.get(variable):
        yield
        return
    folder = tempfile.mkdtemp(prefix=prefix)
    os.environ[variable] = folder
    try:
        yield
    finally:
        os.environ.pop(variable, None)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _session_hypothesis_home():
    """A command that runs targets keeps Hypothesis's files in ./.sentinel/hypothesis
    (process.keep_hypothesis_home) unless HYPOTHESIS_STORAGE_DIRECTORY says where: the session's
    CLI calls made from the checkout left them there; they go to a folder of this session."""
    yield from _session_folder("HYPOTHESIS_STORAGE_DIRECTORY", "sentinel-test-hypothesis-")


@pytest.fixture(scope="session", autouse=True)
def _session_checkout_cache():
    # the caller's SENTINEL_CACHE_DIR (CI, a developer) is kept
    yield from _session_folder("SENTINEL_CACHE_DIR", "sentinel-test-cache-")


# Modules that watch the CLI's own process tree (a worker must be the CLI's descendant to be
# seen left behind) or the zygote itself: they keep a zygote per CLI process, as users have it.
OWN_ZYGOTE = {"test_cleanup", "test_faults", "test_isolation", "test_zygote", "test_shared_zygote"}


@pytest.fixture(scope="session", autouse=True)
def _shared_zygote(tmp_path_factory):
    """One zygote for the whole session (`python -m sentinel.zygote_server --listen`): each of
    the hundreds of CLI calls here forks its workers from it instead of importing torch again.
    Until it listens (a few seconds), a CLI starts its own; SENTINEL_ZYGOTE_SOCKET set by the
    caller is kept."""
    if os.environ.get("SENTINEL_ZYGOTE_SOCKET"):
        yield
        return
    path = str(tmp_path_factory.mktemp("zygote") / "z.sock")
    # started in its own folder: `-m` puts the folder first on sys.path, and from the repository
    # root that would be the source tree, not the installed package the CLI imports (then no CLI
    # would use it: the identity check)
    proc = subprocess.Popen([sys.executable, "-m", "sentinel.zygote_server", "--listen", path],
                            cwd=os.path.dirname(path), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            start_new_session=True)
    os.environ["SENTINEL_ZYGOTE_SOCKET"] = path
    try:
        yield
    finally:
        os.environ.pop("SENTINEL_ZYGOTE_SOCKET", None)
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module", autouse=True)
def _own_zygote(request):
    """Module-scoped, so the module's own module-scoped fixtures (a corpus run once) see it too;
    an in-process zygote client left by an earlier module is closed, as it may be the shared one."""
    if request.module.__name__.rsplit(".", 1)[-1] not in OWN_ZYGOTE:
        yield
        return
    from sentinel import zygote
    saved = os.environ.pop("SENTINEL_ZYGOTE_SOCKET", None)
    zygote.reset()
    try:
        yield
    finally:
        zygote.reset()
        if saved is not None:
            os.environ["SENTINEL_ZYGOTE_SOCKET"] = saved


@pytest.fixture(scope="session")
def plant_gate(tmp_path_factory):
    """`sentinel gate --plant opsm-token-level -o plant.json` (the console script, from its own
    folder), run once for the modules that read its result (test_cli, test_markdown_report):
    the whole catalog on a planted bug. The completed process and the report's path; read-only."""
    d = tmp_path_factory.mktemp("plant-gate")
    exe = os.path.join(os.path.dirname(sys.executable), "sentinel")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # as test_cli's env(): no wrapping width
    done = subprocess.run([exe if os.path.exists(exe) else shutil.which("sentinel"), "gate", "--plant",
                           "opsm-token-level", "-o", str(d / "plant.json")], cwd=d, capture_output=True, text=True,
                          timeout=300, env=env)
    return done, d / "plant.json"


# --- nothing left behind in the checkout ----------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what running tests may leave, as any pytest run does (ignored by .gitignore)
TEST_LEAVINGS = ("__pycache__", ".hypothesis/", ".pytest_cache/")
VENVS = (".venv", "venv", ".tox", ".nox")


def _checkout_files() -> set[str] | None:
    # every file, so a new one inside a folder that was there before counts too (.sentinel/, reports/hunt/);
    # a virtual environment inside the checkout (CI's .venv: tens of thousands of files) is left out
    r = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--ignored", "--untracked-files=all", "--",
                        ".", *(f":(exclude){v}" for v in VENVS)],
                       capture_output=True, text=True, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    if r.returncode:
        return None  # not a git checkout (an unpacked sdist): nothing to compare
    return {line[3:] for line in r.stdout.splitlines()
            if line[:2] in ("??", "!!") and not any(part in line[3:] for part in TEST_LEAVINGS)}


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller (or -n 0) watches; workers run tests
        session.config._sentinel_checkout = _checkout_files()


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, "_sentinel_checkout", None)
    after = _checkout_files() if before is not None else None
    if after is None or not (after - before):
        return
    # a test wrote into the checkout (a report, a build folder): beside a developer's own files it
    # is read back by other tests and lingers after the run; a test writes under its tmp_path
    new = sorted(after - before)
    more = f" and {len(new) - 10} more" if len(new) > 10 else ""
    session.config.get_terminal_writer().line(f"\ntests left {len(new)} file{'s' * (len(new) != 1)} in the checkout: "
                                              f"{', '.join(new[:10])}{more}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
