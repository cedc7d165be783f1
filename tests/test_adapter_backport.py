"""adapters/backport.py: a target's Python 3.12 type-parameter syntax loads on an older
interpreter, lines in place, values unchanged; code that compiles is left alone."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sentinel.adapters.backport import rewrite

SOURCE = textwrap.dedent('''\
    """A module written for Python 3.12."""
    from dataclasses import dataclass


    class Base:
        pass


    class Meta(type):
        pass


    def first[T](xs: list[T]) -> T:
        return xs[0]


    @dataclass
    class Box[T]:
        value: T

        def get[U](self, f: U) -> T:  # a generic method
            return self.value


    class Pair[A, B: int](Base, metaclass=Meta):
        pass


    class Many[*Ts, **P](Base):
        pass


    type Alias = list[int]
    type Grid[T] = list[list[T]]


    def scale(
        x,
    ):
        return 2 * x
''')


def test_rewrite_keeps_lines_and_compiles_here():
    out, params = rewrite(SOURCE)
    assert out.count("\n") == SOURCE.count("\n")  # every statement stays on its line
    compile(out, "<rewritten>", "exec")
    assert ("", "T") in params and ("", "U") in params and ("*", "Ts") in params and ("**", "P") in params
    flat = {" ".join(line.split()) for line in out.splitlines()}
    assert "class Pair (Base, __sentinel_Generic__[A, B], metaclass=Meta):" in flat
    assert "class Box (__sentinel_Generic__[T]):" in flat and "def first (xs: list[T]) -> T:" in flat
    assert "Alias = list[int]" in flat and "Grid = list[list[T]]" in flat
    assert rewrite("x = 1\ntype = 3\n")[0] == "x = 1\ntype = 3\n"  # `type` as a plain name is left alone


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 reads the syntax itself")
def test_a_package_using_it_imports_and_computes_the_same(tmp_path):
    pkg = tmp_path / "pep695pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(SOURCE)
    (pkg / "plain.py").write_text("def twice(x):\n    return 2 * x\n")
    code = textwrap.dedent(f"""
        import sys, typing
        sys.path.insert(0, {str(tmp_path)!r})
        from sentinel.adapters.backport import backport_type_params
        assert backport_type_params("pep695pkg")
        from pep695pkg import mod, plain
        assert mod.first([3, 4]) == 3 and mod.Box(5).get(None) == 5 and mod.scale(4) == 8
        assert isinstance(mod.T, typing.TypeVar) and mod.Box[int](1).value == 1
        assert mod.Alias == list[int] and issubclass(mod.Pair, mod.Base) and type(mod.Pair) is mod.Meta
        assert mod.scale.__code__.co_firstlineno == {SOURCE.splitlines().index("def scale(") + 1}
        assert plain.twice(3) == 6 and not hasattr(plain, "__sentinel_Generic__")
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]
    assert not any((pkg / "__pycache__").glob("mod.*.pyc"))  # a rewritten module is never cached
