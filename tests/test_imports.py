"""The import graph of sentinel/ and adapters/ (installed as `sentinel_adapters`), read with ast.

No module imports, directly or through others, a module that imports it back: neither at
module level nor from inside a function (`if TYPE_CHECKING:` imports aside); a name taken
from a module's own package (`from . import NAME`) counts as importing that package; and the CLI's
module-level imports stay free of torch and Hypothesis (`sentinel list`, `--help` stay fast).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"sentinel": ROOT / "sentinel", "sentinel_adapters": ROOT / "adapters"}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for f in sorted(folder.rglob("*.py")):
            parts = [pkg, *f.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def _statements(body: list[ast.stmt], deep: bool):
    """Statements run at import time: the module body and the class bodies, `if`/`try`/`with`
    blocks included, `if TYPE_CHECKING:` blocks excluded; function bodies too when `deep`."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not deep:
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _statements(node.orelse, deep)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements([n for n in inner if isinstance(n, ast.stmt)] +
                                       [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body], deep)


def imports(name: str, path: Path, known: set[str], deep: bool = False) -> set[str]:
    """Modules `name` imports (at module level; anywhere when `deep`): ours by full name (with the packages above
    them that importing them runs), others by their top-level name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    names_from: set[str] = set()  # packages this module takes names (not submodules) from
    for node in _statements(ast.parse(path.read_text()).body, deep):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base == "__future__":
                continue
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(base)
                names_from.add(base)
    out = set()
    for mod in found:
        if mod.split(".")[0] not in PACKAGES:
            out.add(mod.split(".")[0])
            continue
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            dep = ".".join(parts[:i])
            # a module's own packages run before it anyway; a name taken from one of them
            # (`from . import NAME`) needs its __init__ to have run to the end: an edge
            if dep in known and (not (name == dep or name.startswith(dep + ".")) or dep in names_from and dep != name):
                out.add(dep)
    return out


def graph(deep: bool = False) -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods), deep) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in g[v]:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def reach(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(g.get(v, ()))
    return seen


def test_no_import_cycles():
    g = graph()
    assert "sentinel.cli" in g and "sentinel_adapters.reference" in g
    assert cycles(g) == []


def test_no_import_cycles_through_deferred_imports_either():
    """An import inside a function defers a cycle, it does not cut it."""
    assert cycles(graph(deep=True)) == []


def test_the_parent_side_imports_no_torch():
    """The CLI and the plant catalogue import neither torch nor Hypothesis; the hunt driver
    (Hypothesis strategies) no torch: only the worker process imports torch."""
    g = graph()
    for start in ("sentinel.cli", "sentinel.launch", "sentinel_adapters.reference.plants"):
        assert not {"torch", "hypothesis"} & reach(g, start), start
    assert "torch" not in reach(g, "sentinel.hunt")


def test_the_hunt_modules_say_the_process_they_run_in():
    """The hunt's driver (the CLI's process) never reaches its worker side (the worker's forked
    child, which imports torch through the adapter); the modules both use reach neither."""
    g = graph(deep=True)
    driver = [m for m in g if m.startswith("sentinel.hunt.driver")]
    worker = [m for m in g if m.startswith("sentinel.hunt.worker")]
    assert driver and worker
    for m in driver:
        assert not {w for w in worker if w in reach(g, m)} and "torch" not in reach(g, m), m
    for m in ("sentinel.hunt.properties", "sentinel.hunt.search", "sentinel.hunt.signature", "sentinel.hunt.known",
              "sentinel.hunt.differences"):
        assert not (reach(g, m) - {m}) & set(driver + worker), m


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


# The front: what a person or a CI step calls, and the layer that turns reports into text.
FRONT = ("sentinel.cli", "sentinel.launch", "sentinel.__main__", "sentinel.pytest_plugin", "sentinel.views")
TARGETS = ("sentinel_adapters",)  # the target packages, found through sentinel/targets.py's registry
FRAMEWORK = ("sentinel.adapters",)  # the adapter framework: contract, loading, binding, layout


def layer_violations(g: dict[str, set[str]]) -> dict[str, list[str]]:
    """Module -> the imports its layer forbids: the core (spec, invariants, runner, worker, hunt,
    history, mutate, export, ...) imports no target (it reaches one through the registry:
    module names as data, imported by the worker), no view and no CLI; a view imports no target
    and no CLI; the adapter framework and the targets import no hunt, view, CLI or runner."""
    out = {}
    for m, deps in g.items():
        if _under(m, *FRAMEWORK, *TARGETS):
            forbidden = ("sentinel.hunt", "sentinel.views", "sentinel.cli", "sentinel.runner")
        elif _under(m, "sentinel.views"):
            forbidden = (*TARGETS, "sentinel.cli")
        elif _under(m, "sentinel") and m != "sentinel" and not _under(m, *FRONT):
            forbidden = (*TARGETS, "sentinel.views", "sentinel.cli")
        else:
            continue
        if bad := sorted(d for d in deps if _under(d, *forbidden)):
            out[m] = bad
    return out


def test_layers_core_adapters_and_views_import_only_down():
    g = graph(deep=True)
    assert {"sentinel.runner", "sentinel.hunt.driver.engine", "sentinel.adapters.contract",
            "sentinel_adapters.reference.adapter", "sentinel.views.registry"} <= set(g)
    assert layer_violations(g) == {}


def test_the_layer_check_can_fail(tmp_path, monkeypatch):
    """A core module that imports a view, and an adapter that imports the hunt (deferred), are
    caught."""
    for pkg in ("sentinel", "sentinel/views", "sentinel/hunt", "adapters"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "sentinel" / "views" / "registry.py").write_text("")
    (tmp_path / "sentinel" / "hunt" / "properties.py").write_text("")
    (tmp_path / "sentinel" / "runner_x.py").write_text("from .views import registry\n")
    (tmp_path / "adapters" / "toy.py").write_text("def f():\n    from sentinel.hunt import properties\n")
    monkeypatch.setitem(PACKAGES, "sentinel", tmp_path / "sentinel")
    monkeypatch.setitem(PACKAGES, "sentinel_adapters", tmp_path / "adapters")
    assert layer_violations(graph(deep=True)) == {"sentinel.runner_x": ["sentinel.views", "sentinel.views.registry"],
                                                  "sentinel_adapters.toy": ["sentinel.hunt", "sentinel.hunt.properties"]}


def test_no_source_file_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in [*ROOT.joinpath("sentinel").rglob("*.py"), *ROOT.joinpath("adapters").rglob("*.py")]
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_a_new_family_is_one_class_with_its_hunt_properties():
    """Adding an invariant family touches its module and nothing else: the class registers
    itself, and the hunt finds its properties."""
    code = textwrap.dedent("""
        from sentinel.invariants import REGISTRY
        from sentinel.invariants.base import Invariant, Outcome, hunted

        class Toy(Invariant):
            family = "toy"
            hunt = (hunted("kl", "gae", doc="a toy family"),)

            def evaluate(self, obs, sc):
                return Outcome("held")

        from sentinel.hunt.properties import PROPERTIES
        from sentinel.spec import load_text
        assert REGISTRY["toy"] is Toy
        assert PROPERTIES["kl.toy"].family == "toy" and "gae.toy" in PROPERTIES
        (sc,) = load_text("id: t\\ntitle: t\\nboundary: kl\\ninputs: {log_probs: [[0.0]], ref_log_probs: [[0.0]], "
                          "loss_mask: [[1]]}\\ninvariants: [{toy: {}}]\\n")
        assert sc.invariants[0].family == "toy"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_every_package_folder_is_installed():
    """A package folder the build does not find works from a checkout and is absent from the
    wheel (sentinel.mutate was, once): setup.py's discovery names every folder with an
    __init__.py, each under its installed name, and pyproject.toml lists none by hand."""
    import importlib.util
    import tomllib
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("sentinel_setup", root / "setup.py")
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)  # not __main__: defines packages() without building
    found = setup_py.packages(root)
    on_disk = {str(p.parent.relative_to(root)) for top in ("sentinel", "adapters", "scenarios")
               for p in (root / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    assert set(found.values()) == on_disk
    assert found["sentinel_adapters"] == "adapters" and found["sentinel_catalog"] == "scenarios"
    assert all(name.split(".")[0] in setup_py.ROOTS for name in found)
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"].get("setuptools", {})
    assert "packages" not in tool and "package-dir" not in tool