"""Import shims: permissive stand-ins for heavy modules a target imports but never calls.

A trainer's loss-path modules usually sit in a package whose ``__init__`` pulls in the
whole runtime (ray, vllm, megatron, tracking clients, ...). The boundary functions never
touch those, so an adapter may replace them with stubs:

    stubbed = install_stubs(["ray", "vllm", "megatron"])   # -> names actually stubbed

A name is stubbed only when the real module cannot be found; a real install always wins.
A stub answers every attribute with a stub class (callable, subclassable, usable as a
decorator or a type hint), and every submodule (``import megatron.core.mpu``,
``from vllm.distributed import x``) resolves through one ``MetaPathFinder``.

A *name* an old commit imports from a heavy dependency whose installed version no longer has
it (``from transformers import AutoModelForVision2Seq``) is stubbed the same way, on the real
module (`import_with_stubs`; recorded as ``module.Name``): the newer install stays.

The stubs only have to survive import time. If target code *calls* a stub on a boundary
path, the adapter is wrong to stub that module: the call returns another stub, and the
resulting tensors will not be tensors, which fails loudly rather than silently.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import re
from typing import Any

from sentinel.errors import TargetLoadError

__all__ = ["block", "hidden", "import_with_stubs", "install_stubs", "is_stub", "stubbed_names"]

_STUB_MARK = "__sentinel_stub__"


def _is_special(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _StubMeta(type):
    """Metaclass of stub classes: class attributes are stubs too, ``Cls[...]`` works."""

    def __getattr__(cls, name: str) -> Any:
        if _is_special(name):
            raise AttributeError(name)
        sub = _stub_class(name, cls.__module__, f"{cls.__qualname__}.{name}")
        type.__setattr__(cls, name, sub)
        return sub

    def __getitem__(cls, item: Any) -> Any:  # Stub[int] in annotations
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # Used bare as a decorator (@ray.remote, @torch_npu.jit): hand the target back.
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        return super().__call__(*args, **kwargs)

    def __iter__(cls):
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __repr__(cls) -> str:
        return f"<stub class {cls.__module__}.{cls.__qualname__}>"


class _StubBase(metaclass=_StubMeta):
    """Instances accept any construction, attribute access and call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if _is_special(name):
            raise AttributeError(name)
        return _stub_class(name, type(self).__module__, f"{type(self).__qualname__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        return type(self)()

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __str__(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"<stub {type(self).__module__}.{type(self).__qualname__}>"


def _stub_class(name: str, module: str, qualname: str | None = None) -> type:
    cls = _StubMeta(name, (_StubBase,), {"__module__": module, _STUB_MARK: True})
    cls.__qualname__ = qualname or name
    return cls


class _StubModule(types.ModuleType):
    """A module whose every missing attribute is a stub class."""

    def __getattr__(self, name: str) -> Any:
        if _is_special(name):
            raise AttributeError(name)
        # A submodule imported earlier is already an attribute; anything else is a class.
        value = _stub_class(name, self.__name__)
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = _StubModule(spec.name)
        setattr(mod, _STUB_MARK, True)
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # a package: submodules resolve through the finder
        module.__all__ = []  # `from stub import *` imports nothing


class _StubFinder(importlib.abc.MetaPathFinder):
    """Claims the stubbed names and every dotted name below them."""

    def __init__(self) -> None:
        self.roots: set[str] = set()
        self.blocked: set[str] = set()  # dotted names below a stubbed root that must not import
        self.loader = _StubLoader()

    def claims(self, fullname: str) -> bool:
        return any(fullname == r or fullname.startswith(r + ".") for r in self.roots)

    def blocks(self, fullname: str) -> bool:
        return any(fullname == b or fullname.startswith(b + ".") for b in self.blocked)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if not self.claims(fullname) or self.blocks(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)


_FINDER = _StubFinder()


def _importable(name: str) -> bool:
    """True when a real module of this name can be found (without executing it, for a top
    level name; a dotted name needs its parents imported to be looked up)."""
    if _FINDER.claims(name):
        return False
    mod = sys.modules.get(name)
    if mod is not None:
        return not getattr(mod, _STUB_MARK, False)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def install_stubs(names: list[str]) -> list[str]:
    """Stub each module in `names` (dotted names allowed) whose real module is not importable.

    Returns the names actually stubbed by this call or an earlier one, in input order.
    Idempotent; a real module always wins over a stub.
    """
    stubbed = []
    for name in names:
        if _FINDER.claims(name):
            stubbed.append(name)
            continue
        if _importable(name):
            continue
        _FINDER.roots.add(name)
        stubbed.append(name)
    if _FINDER.roots and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return stubbed


def block(names: list[str]) -> None:
    """Make each dotted name (and everything below it) unimportable when its root is stubbed:
    ``import`` raises ModuleNotFoundError as if the real package lacked it. For target code that
    picks a path by trying an import (``try: from flash_attn.ops.triton.cross_entropy import ...
    except ImportError:`` falls back to plain torch), so a stubbed root does not send it down a
    path the stub cannot run. A real installed module is never affected."""
    _FINDER.blocked.update(names)
    for name in list(sys.modules):
        if any(name == b or name.startswith(b + ".") for b in names) and getattr(sys.modules[name], _STUB_MARK, False):
            del sys.modules[name]


@contextlib.contextmanager
def hidden(names: list[str]):
    """Hide the stubs of `names` (and their submodules) for the block: ``find_spec`` does not find
    them and they are out of ``sys.modules``. For a target that asks whether an optional package
    is installed (TRL: ``is_vllm_available()`` is find_spec, then its version) in a process where
    another target stubbed that package, as one test process loading several targets does. The
    block may stub a name again (import_with_stubs); afterwards the hidden stubs are back."""
    roots = [n for n in names if n in _FINDER.roots]
    saved = {k: m for k, m in sys.modules.items()
             if any(k == r or k.startswith(r + ".") for r in roots) and getattr(m, _STUB_MARK, False)}
    _FINDER.roots.difference_update(roots)
    for k in saved:
        del sys.modules[k]
    try:
        yield
    finally:
        _FINDER.roots.update(roots)
        for k, m in saved.items():
            sys.modules.setdefault(k, m)


def is_stub(obj: Any) -> bool:
    """True for a stub module, stub class or stub instance."""
    return bool(getattr(obj, _STUB_MARK, False) if isinstance(obj, (types.ModuleType, type))
                else getattr(type(obj), _STUB_MARK, False))


def stubbed_names() -> list[str]:
    """Every module name this process has stubbed so far."""
    return sorted(_FINDER.roots)


# the message Python gives `from M import N` when M exists but has no N
_NO_NAME = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)'")


def _stub_name(e: ImportError, own: str, may_stub, stubs: list[str]) -> bool:
    """For `from M import N` failing because the installed M (a dependency the adapter may
    stub) lacks N: make N a stub attribute of the real M, note ``M.N`` in `stubs`, True."""
    m = _NO_NAME.search(str(e))
    if m is None or isinstance(e, ModuleNotFoundError):
        return False
    module, name = m["module"], m["name"]
    root = module.split(".")[0]
    real = sys.modules.get(module)
    if root == own or real is None or is_stub(real) or not may_stub(root) or f"{module}.{name}" in stubs:
        return False
    setattr(real, name, _stub_class(name, module))
    stubs.append(f"{module}.{name}")
    return True


def import_with_stubs(name: str, *, target: str, own: str, allowed: set[str] | frozenset[str] | None,
                      stubs: list[str], hint: str = "options.extra_stubs adds one",
                      light: set[str] | frozenset[str] = frozenset()) -> types.ModuleType:
    """Import `name`, stubbing each missing top-level module on the way if it is `allowed`
    (the heavy dependencies a boundary never calls; None: any module but the `light` ones,
    which the target's pip extra installs for real); `stubs` collects what was stubbed.
    Anything else missing, or the target's own package (`own`), is a load error that names
    the module and `hint` (the command that installs it). A name an allowed module's installed
    version lacks (`from transformers import Gone`) is stubbed on that module (`_stub_name`), and
    a submodule it lacks (`transformers.deepspeed`) is stubbed by its dotted name."""
    def may_stub(root: str) -> bool:
        return root not in light if allowed is None else root in allowed

    for _ in range(64):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            missing = (e.name or "").split(".")[0]
            heavy = may_stub(missing)
            if not missing or missing == own or not heavy:
                what = "a light dependency of its import path" if missing in light else \
                    "not a heavy dependency the adapter may shim"
                raise TargetLoadError(
                    f"{target} target: importing {name} needs module {e.name!r}, which is not installed "
                    f"({what}; {hint})") from e
            if missing in stubs:
                raise TargetLoadError(f"{target} target: importing {name} failed inside stubbed {missing!r}: {e}") from e
            stubs += [x for x in install_stubs([missing]) if x not in stubs]
            if missing not in stubs and e.name and e.name != missing and e.name not in stubs:
                # a submodule the installed version no longer has (transformers.deepspeed): stubbed alone
                stubs += [x for x in install_stubs([e.name]) if x not in stubs]
                continue
            if missing not in stubs:
                raise TargetLoadError(f"{target} target: importing {name} failed on {e.name!r}: {e}") from e
        except ImportError as e:
            if not _stub_name(e, own, may_stub, stubs):
                raise
    raise TargetLoadError(f"{target} target: importing {name} kept failing")


def module_exists_anywhere(name: str) -> bool:
    """A real module of this name is importable. Another target's stub of its root (OpenRLHF and
    TRL stub flash_attn) is not one: in a process that loaded one of them first, verl's padding
    path took the stub's unpad_input, which returns nothing."""
    try:
        with hidden([name.split(".")[0]]):
            return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
