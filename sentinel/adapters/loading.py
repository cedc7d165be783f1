"""Locating and importing a target: a checkout or the installed package, one version per
process, its version facts, and the host's logging kept as it was.

`locate`, `first_on_path`, `module_exists`, `bare_package`, `module_files`, `version_facts`,
`pip_hint` (the command that installs a target's extra), `keep_host_logging` (undo what a
target's import does to the host's logging), `source_of` (a target function's source, read once).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import logging
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Iterator

from sentinel.errors import TargetLoadError

from .shims import is_stub


def locate(target: str, package: str, marker: str, root: Path | None, *, hint: str | None = None,
           one_version: bool = True) -> Path:
    """The folder that holds `package`: the checkout `root`, else where the installed
    package lives. `marker` is a module of the package that must be there
    (``"slime.utils.ppo_utils"``). With `one_version`, a different copy of `package`
    already imported in this process is a load error (one interpreter, one version)."""
    if root is None:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise TargetLoadError(f"{target} target: no --repo given and no installed `{package}` package found"
                                  + (f" (install it: {hint})" if hint else ""))
        found = Path(list(spec.submodule_search_locations)[0]).resolve().parent
    else:
        found = Path(root).expanduser().resolve()
    file = marker.replace(".", "/") + ".py"
    if not (found / file).is_file():
        raise TargetLoadError(f"{target} target: {found} is not a {target} checkout (module {marker}, "
                              f"file {file}, is missing)")
    loaded = sys.modules.get(package)
    if one_version and loaded is not None and not is_stub(loaded):
        where = Path(list(getattr(loaded, "__path__", [""]))[0] or ".").resolve()
        if where != found / package:
            raise TargetLoadError(f"{target} target: another {package} is already imported from {where}; "
                                  f"one interpreter can hold one {package} version")
    return found


def pip_hint(extra: str, then: str = "") -> str:
    """The one command that installs the light packages target extra `extra` needs (and `then`)."""
    return f"pip install 'rl-sentinel[{extra}]'" + (f" && {then}" if then else "")


def module_exists(root: Path, name: str) -> bool:
    """Whether module `name` has a file under `root` (a module absent at a version is
    `Unsupported` where a boundary needs it; one that is there but fails to import is a load error)."""
    base = Path(root).joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def bare_package(name: str, root: Path) -> types.ModuleType:
    """Register package `name` from the checkout `root` without executing its ``__init__``
    (which may wire a whole runtime), or a folder without ``__init__.py`` as that package (so
    an installed copy elsewhere on the path cannot shadow it). A name the ``__init__`` would
    have re-exported (``from .arguments import x``) is imported from its submodule on first
    use, so code that reads it from the package still finds it."""
    if name in sys.modules:
        return sys.modules[name]
    path = Path(root).joinpath(*name.split("."))
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(path)]
    mod = importlib.util.module_from_spec(spec)
    mod.__path__ = [str(path)]
    mod.__file__ = None
    exports = _reexports(path / "__init__.py")

    def __getattr__(attr: str) -> Any:
        if attr in exports:
            return getattr(importlib.import_module(f"{name}.{exports[attr]}"), attr)
        raise AttributeError(f"module {name!r} (entered without its __init__) has no attribute {attr!r}")

    mod.__getattr__ = __getattr__
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(importlib.import_module(parent), child, mod)
    return mod


def _reexports(init: Path) -> dict[str, str]:
    """name -> submodule, for each ``from .sub import name`` at the top of an ``__init__.py``."""
    import ast
    try:
        tree = ast.parse(init.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {(a.asname or a.name): node.module for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module for a in node.names}


def first_on_path(folder: Path) -> None:
    """Put `folder` first on ``sys.path`` (moved there if it is already further down)."""
    if str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.path.insert(0, str(folder))


def module_files(mods, root: Path) -> list[str]:
    """Where each loaded module came from, relative to the checkout `root` where it lies inside."""
    files = []
    for m in mods:
        try:
            files.append(str(Path(m.__file__).resolve().relative_to(root)))
        except (TypeError, ValueError):
            files.append(str(m.__file__))
    return files


def version_facts(root: Path, package_version: str | None, with_commit: bool = True) -> dict[str, Any]:
    """{"package_version", "commit", "version": "<package>+g<sha9>"} for a checkout."""
    facts: dict[str, Any] = {}
    if package_version:
        facts["package_version"] = package_version
    if with_commit:
        try:
            sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
            if sha:
                facts["commit"] = sha
        except (OSError, subprocess.SubprocessError):
            pass
    parts = (facts.get("package_version"), facts.get("commit", "")[:9])
    facts["version"] = "+g".join(x for x in parts if x) or "unknown"
    return facts


@contextlib.contextmanager
def keep_host_logging() -> Iterator[None]:
    """A target's import may reconfigure process-wide logging (``logging.basicConfig``,
    ``dictConfig``, even a new ``Logger.root`` / ``Logger.manager``): put the host's root
    logger, its handlers and level, and the disabled flags of the loggers that existed
    before, back afterwards. The target's own loggers keep their handlers."""
    root, manager = logging.Logger.root, logging.Logger.manager
    handlers, level = list(logging.root.handlers), logging.root.level
    disabled = {n: lg.disabled for n, lg in manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    try:
        yield
    finally:
        logging.Logger.root, logging.Logger.manager = root, manager
        logging.root.handlers[:] = handlers
        logging.root.setLevel(level)
        for name, flag in disabled.items():
            lg = manager.loggerDict.get(name)
            if isinstance(lg, logging.Logger):
                lg.disabled = flag


def source_of(obj: Any) -> str:
    """`inspect.getsource(obj)`, read once per object and code: adapters test a trainer function's
    source for what its version reads on every call, and reading a long one (verl's
    _forward_micro_batch) tokenizes its file, ~5 ms a time. Keyed by the code that getsource reads
    (a decorated function's inner one) as well, since a mutant replaces a function's `__code__` in
    place. The text is the file's as first read (the loaded code's: no trainer file is edited under
    a live function). Raises as getsource does (OSError, TypeError); `obj` is hashable."""
    inner = inspect.unwrap(obj) if callable(obj) else obj
    return _source(obj, getattr(inner, "__code__", None))


@functools.lru_cache(maxsize=512)
def _source(obj: Any, code: Any) -> str:
    return inspect.getsource(obj)
