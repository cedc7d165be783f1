"""Helpers the real adapters share: one meaning per name, whatever the target.

- rows:      `rows` / `unrows` (canonical ``[B, T]`` <-> one whole response per sequence; no
  position is cut, masked head and tail included);
- signatures: `parameters`, `signature_text`, `bind` (a canonical call bound to a target
  signature that drifts between versions);
- lookups:   `lookup` (a function by name in the target's loaded modules, else `Unsupported`),
  `resolve` (what a declared ``module:qualname`` call names in this process);
- location:  `locate` (a checkout, or the installed package), `first_on_path`, `version_facts`,
  `module_exists`, `pip_hint` (the command that installs a target's extra);
- groups:    `group_ids`, `group_layout`, `unpermute` (canonical ``group`` ids -> the
  group-by-group row order a trainer wants, and back);
- spying:    `spy` (record the calls of a target function, calling through);
- logging:   `keep_host_logging` (undo what a target's import does to the host's logging).

Nothing here decides a verdict or knows a particular trainer.
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
from typing import Any, Callable, Iterator

import torch

from .base import TargetLoadError, Unsupported
from .shims import is_stub

# --- canonical rows <-> per-sequence tensors ---------------------------------------------


def rows(t: torch.Tensor) -> list[torch.Tensor]:
    """One tensor per sequence: each whole row, every position (masked ones included), as a
    clone, so a target's in-place change is seen afterwards and autograd reaches `t`."""
    return [r.clone() for r in t]


def unrows(parts: list[torch.Tensor] | tuple[torch.Tensor, ...], like: torch.Tensor) -> torch.Tensor:
    """Inverse of `rows`: per-sequence tensors (of the row length) back into a ``[B, T]`` batch
    (keeping their autograd graph); an empty batch gives an empty float tensor shaped like `like`."""
    if not parts:
        return torch.zeros(like.shape, dtype=torch.float32, device=like.device)
    return torch.stack([p.reshape(-1) for p in parts])


# --- signatures ---------------------------------------------------------------------------


def parameters(fn: Callable) -> dict[str, inspect.Parameter]:
    """A target function's parameters ({} when it has no inspectable signature)."""
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def signature_text(fn: Callable) -> str:
    """`qualname(signature)` for drift messages."""
    try:
        return f"{getattr(fn, '__qualname__', fn)}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return repr(fn)


def bind(fn: Callable, boundary: str, required: dict[str, Any], optional: dict[str, Any] | None = None,
         aliases: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Keyword arguments for `fn` (a function or a config class) at this target version.

    required: passed as given (None included) under the name, or the first of its
      `aliases` the signature has; a name it has neither way is signature drift.
    optional: None means "leave the target's default" (not passed); any other value is
      passed where the signature has the name or takes ``**kwargs``, and is signature
      drift where it does not (never silently dropped).
    A parameter without a default that nothing supplies is drift too.
    Drift raises `Unsupported` naming the signature and the boundary."""
    params = parameters(fn)
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    out: dict[str, Any] = {}
    for key, value in required.items():
        names = (key, *((aliases or {}).get(key, ())))
        hit = next((n for n in names if n in params), None)
        if hit is None:
            raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r} (boundary {boundary!r})")
        out[hit] = value
    for key, value in (optional or {}).items():
        if value is None:
            continue
        if key not in params and not has_var_kw:
            raise Unsupported(f"signature drift: {signature_text(fn)} has no parameter {key!r}, so {key}={value!r} "
                              f"cannot be applied (boundary {boundary!r})")
        out[key] = value
    for name, p in params.items():
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in out:
            raise Unsupported(f"signature drift: {signature_text(fn)} requires {name!r}, which the adapter cannot "
                              f"supply (boundary {boundary!r})")
    return out


# --- lookups ------------------------------------------------------------------------------


def lookup(mods: dict[str, types.ModuleType], name: str, modules: tuple[str, ...], *, target: str, boundary: str,
           version: str, errors: dict[str, str] | None = None) -> Callable:
    """The callable `name` from the first of `modules` (loaded, in `mods`) that has it;
    else `Unsupported` naming the files searched, the version and, for a module that did
    not import, why (`errors`)."""
    for mod in modules:
        fn = getattr(mods.get(mod), name, None)
        if callable(fn):
            return fn
    where = " or ".join(m.replace(".", "/") + ".py" for m in modules)
    why = "".join(f" ({errors[m]})" for m in modules if errors and m in errors)
    raise Unsupported(f"{target} has no {name} in {where} at {version}{why} (needed by boundary {boundary!r})")


def resolve(call: str) -> Any:
    """The object a declared call (``"module:qualname"``, as in `@implements`) names in this
    process, importing its module if need be; None where the module does not import or
    lacks the name (a target version without it)."""
    module, _, qualname = call.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - any import failure means: not here
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# --- locating a target --------------------------------------------------------------------


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


# --- groups -------------------------------------------------------------------------------


def group_ids(group: torch.Tensor | None, group_size: int | None, n: int, *, ungrouped: str = "one") -> list[int]:
    """Each row's group: the canonical ``group`` ids, else consecutive chunks of
    `group_size`, else one group for the batch (``ungrouped="one"``) or one per row ("each")."""
    if group is not None:
        return [int(g) for g in group.reshape(-1).tolist()]
    if group_size:
        return [i // int(group_size) for i in range(n)]
    return [0] * n if ungrouped == "one" else list(range(n))


def group_layout(ids: list[int]) -> tuple[list[int], list[int]]:
    """(row order that makes each group's rows consecutive, groups in order of first
    appearance; the group sizes in that order)."""
    members: dict[int, list[int]] = {}
    for i, g in enumerate(ids):
        members.setdefault(g, []).append(i)
    return [i for rows_ in members.values() for i in rows_], [len(r) for r in members.values()]


def unpermute(x: torch.Tensor, order: list[int]) -> torch.Tensor:
    """Rows laid out in `order` (see `group_layout`) put back in canonical order."""
    if order == sorted(order):
        return x
    out = torch.empty_like(x)
    out[torch.tensor(order, device=x.device)] = x
    return out


# --- spying -------------------------------------------------------------------------------


@contextlib.contextmanager
def spy(module: Any, name: str,
        before: Callable[[dict[str, Any]], None] | None = None) -> Iterator[list[tuple[dict[str, Any], Any]]]:
    """Replace ``module.name`` (a module's or class's attribute, or the entry `name` of a dict
    such as a trainer's function registry) by a call-through wrapper for the duration; yields
    the list of (bound arguments, result) of every call. `before` sees the bound arguments
    before the real call (to copy what the call may change). Target code that looks the name
    up at call time reaches the wrapper. Where there is no `name`, nothing changes (no calls)."""
    calls: list[tuple[dict[str, Any], Any]] = []
    if isinstance(module, dict):
        get, put = module.get, module.__setitem__
    else:
        get, put = (lambda k, d=None: getattr(module, k, d)), (lambda k, v: setattr(module, k, v))
    real = get(name, None)
    if real is None:
        yield calls
        return
    sig = inspect.signature(real)

    def arguments(args: tuple, kwargs: dict) -> dict[str, Any]:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return {}
        bound.apply_defaults()
        return dict(bound.arguments)

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        if before is not None:
            before(arguments(args, kwargs))
        out = real(*args, **kwargs)
        calls.append((arguments(args, kwargs), out))
        return out

    put(name, wrapper)
    try:
        yield calls
    finally:
        put(name, real)


# --- the host's logging -------------------------------------------------------------------


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
