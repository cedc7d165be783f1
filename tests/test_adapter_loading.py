"""How a target's import path is satisfied (sentinel/adapters/shims.py, loading.py): a
missing heavy module is stubbed, a missing light one is a load error naming the pip extra
that installs it, and a package entered without its `__init__` still serves what that
`__init__` re-exports. Each case runs in a fresh interpreter (stubs are process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(tmp_path, body: str) -> subprocess.CompletedProcess:
    code = f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_heavy_is_stubbed_light_is_a_load_error_with_the_fix(tmp_path):
    pkg = tmp_path / "toytrainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "heavy.py").write_text("import no_such_runtime_xyz.cluster\nVALUE = 3\n")
    (pkg / "light.py").write_text("import no_such_light_xyz\n")
    p = _run(tmp_path, """
        from sentinel.errors import TargetLoadError
        from sentinel.adapters.shims import import_with_stubs
        from sentinel.adapters.loading import pip_hint
        stubs = []
        kw = dict(target="toy", own="toytrainer", allowed=None, light={"no_such_light_xyz"}, stubs=stubs,
                  hint="install it: " + pip_hint("toy"))
        assert import_with_stubs("toytrainer.heavy", **kw).VALUE == 3 and stubs == ["no_such_runtime_xyz"]
        try:
            import_with_stubs("toytrainer.light", **kw)
        except TargetLoadError as e:
            print(e)
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    msg = p.stdout.strip()
    assert "'no_such_light_xyz'" in msg and "pip install 'rl-sentinel[toy]'" in msg and "\n" not in msg


def test_bare_package_serves_its_reexports(tmp_path):
    pkg = tmp_path / "wired" / "backend"
    pkg.mkdir(parents=True)
    (tmp_path / "wired" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("import no_such_cluster_runtime\nfrom .arguments import padded_vocab\n")
    (pkg / "arguments.py").write_text("def padded_vocab(n):\n    return -(-n // 128) * 128\n")
    (pkg / "loss.py").write_text("from wired.backend import padded_vocab\n")
    p = _run(tmp_path, f"""
        from pathlib import Path
        from sentinel.adapters.loading import bare_package
        bare_package("wired.backend", Path({str(tmp_path)!r}))  # its __init__ never runs
        import wired.backend.loss as loss
        print(loss.padded_vocab(130))
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip() == "256"


def test_source_of_reads_once_per_function_and_code(monkeypatch):
    """Adapters test a trainer function's source on every call (what its version reads):
    `source_of` reads it once, and again once a mutant's code replaces the function's in place."""
    import functools
    import inspect

    import pytest

    from sentinel.adapters import loading

    def first():
        return 1

    def second():
        return 2

    real, reads = inspect.getsource, []
    monkeypatch.setattr(inspect, "getsource", lambda obj: reads.append(obj) or real(obj))
    assert loading.source_of(first) == loading.source_of(first) == real(first)
    assert len(reads) == 1
    first.__code__ = second.__code__  # as sentinel.mutate.apply places a mutant
    assert "return 2" in loading.source_of(first) and len(reads) == 2

    @functools.wraps(second)
    def wrapper():
        return second()

    loading.source_of(wrapper)
    second.__code__ = (lambda: 3).__code__  # a mutant of the decorated function: getsource unwraps to it
    assert "lambda: 3" in loading.source_of(wrapper) and len(reads) == 4
    with pytest.raises(TypeError):  # as getsource: not cached, raised each time
        loading.source_of(functools.partial(second))
