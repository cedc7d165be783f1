"""A trainer checkout loaded in the test process for one module only."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def restored_imports(package: str) -> Iterator[None]:
    """`package` (and its submodules) and sys.path as they were before: a checkout's trainer
    package imported inside (TRL, verl) is taken out again, so later tests import the installed
    one as before. Other modules stay (torch registers its operators once per process)."""
    ours = lambda name: name == package or name.startswith(package + ".")  # noqa: E731
    before = {n: m for n, m in sys.modules.items() if ours(n)}
    path = list(sys.path)
    try:
        yield
    finally:
        for name in [n for n in sys.modules if ours(n)]:
            del sys.modules[name]
        sys.modules.update(before)
        sys.path[:] = path
