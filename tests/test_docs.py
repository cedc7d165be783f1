"""The docs site: every command shown in docs/ runs, and the generated reference pages cover
the code they are generated from.

Each fenced `bash` or `console` block in docs/ carries a marker in an HTML comment on the line
before it (invisible on the site):

    <!-- run -->                      every command runs and exits 0
    <!-- run: exit=1 -->              ... every command exits 1 (a command's own `# exit N` comment wins)
    <!-- run: needs=slime -->         ~/src/slime is $SENTINEL_SLIME_REPO; skipped without it
    <!-- run: needs=pkg:verl -->      skipped where the package verl is not installed
    <!-- run: slow -->                only with `pytest -m slow`
    <!-- not run: REASON -->          only for package installs and a Ray cluster (checked below)

A block runs in a fresh temporary folder holding a copy of the catalog (`scenarios/`), against
the reference unless it names a target. In a `console` block the lines after `$ COMMAND` are
its output: each must appear in what the command printed (box-drawing and spacing aside; `...`
inside a line stands for any text, a line of `...` for lines left out).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
CHECKOUTS = {"slime": ("~/src/slime", "SENTINEL_SLIME_REPO"), "areal": ("~/src/AReaL", "SENTINEL_AREAL_REPO"),
             "verl": ("~/src/verl", "SENTINEL_VERL_REPO"), "openrlhf": ("~/src/OpenRLHF", "SENTINEL_OPENRLHF_REPO"),
             "trl": ("~/src/trl", "SENTINEL_TRL_REPO")}
NOT_RUN_OK = re.compile(r"^(pip install|python -m pip install|RAY_ADDRESS=ray://)")
_FENCE = re.compile(r"^(?P<marker><!-- (?P<kind>run|not run)(?::\s*(?P<args>.*?))? -->\n)?"
                    r"```(?P<lang>bash|console|sh|shell)\n(?P<body>.*?)^```$", re.M | re.S)


@dataclass
class Block:
    page: str
    line: int
    lang: str
    body: str
    kind: str | None  # "run", "not run" or None (unmarked)
    args: str = ""
    exit: int = 0
    needs: list[str] = field(default_factory=list)
    slow: bool = False

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _pages() -> list[tuple[str, str, int]]:
    """(name, text, where its blocks start): docs/, and the README after its first block (the two
    commands, which .ci/run runs as they stand and test_readme_is_short_and_links_into_the_docs checks)."""
    pages = [(str(p.relative_to(DOCS)), p.read_text(encoding="utf-8"), 0) for p in sorted(DOCS.rglob("*.md"))]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = readme.index("```bash\n")
    return [*pages, ("README.md", readme, readme.index("```\n", first + 8) + 4)]


def blocks() -> list[Block]:
    found = []
    for name, text, start in _pages():
        for m in _FENCE.finditer(text, start):
            b = Block(name, text.count("\n", 0, m.start("lang")) + 1, m["lang"], m["body"], m["kind"], m["args"] or "")
            for word in b.args.split():
                if word.startswith("exit="):
                    b.exit = int(word[5:])
                elif word.startswith("needs="):
                    b.needs += word[6:].split(",")
                elif word == "slow":
                    b.slow = True
            found.append(b)
    return found


def commands(b: Block) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown after it) in the block's order."""
    out: list[tuple[str, list[str]]] = []
    if b.lang == "console":
        for line in b.body.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif out:
                out[-1][1].append(line)
        return out
    joined = b.body.replace("\\\n", " ")
    return [(line, []) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


ALL = blocks()
RUN = [b for b in ALL if b.kind == "run"]


def test_every_shell_block_is_marked():
    unmarked = [b.id for b in ALL if b.kind is None]
    assert not unmarked, f"shell blocks without a run marker: {unmarked}"
    for b in ALL:
        if b.kind == "not run":
            bad = [c for c, _ in commands(b) if not NOT_RUN_OK.match(c)]
            assert not bad, f"{b.id}: only installs may be left unrun: {bad}"
    assert len(RUN) >= 15  # the docs are mostly runnable


def _norm(line: str) -> str:
    line = re.sub(r"[│╭╮╰╯─┃━┏┓┗┛┡┩╇┳┻╋]", " ", line)
    return " ".join(line.split())


def _shown(expected: str, actual: str) -> bool:
    """Whether the shown output line `expected` appears in `actual` (`...` inside it: any text)."""
    want = _norm(expected)
    pattern = ".*?".join(re.escape(part.strip()) for part in want.split("..."))
    return any(re.search(pattern, _norm(line)) for line in actual.splitlines())


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "140",
           "PYTHONPATH": str(home)}
    env.pop("SENTINEL_MAX_ELEMENTS", None)
    return env


def _skip_reason(b: Block) -> str | None:
    for need in b.needs:
        if need.startswith("pkg:"):
            if importlib.util.find_spec(need[4:]) is None:
                return f"{b.id}: needs the package {need[4:]} installed"
        elif not os.environ.get(CHECKOUTS[need][1]):
            return f"{b.id}: needs a {need} checkout (set {CHECKOUTS[need][1]})"
    return None


def _execute(b: Block, folder: Path) -> list[tuple[str, list[str], int, subprocess.CompletedProcess]]:
    """Run the block's commands in order in `folder` -> (command, shown output, exit the docs
    say, what ran) for each, up to the first that exits otherwise."""
    shutil.copytree(ROOT / "scenarios", folder / "scenarios", ignore=shutil.ignore_patterns("__pycache__"))
    done = []
    for command, shown in commands(b):
        for name in b.needs:
            if name in CHECKOUTS:
                path, var = CHECKOUTS[name]
                command = command.replace(path, os.environ[var])
        p = subprocess.run(["bash", "-c", command], cwd=folder, env=_env(folder), capture_output=True,
                           text=True, timeout=900 if b.slow else 300)
        said = re.search(r"#.*\bexit (\d+)", command)  # `sentinel run bad.yaml   # exit 2`
        want = int(said[1]) if said else b.exit
        done.append((command, shown, want, p))
        if p.returncode != want:
            break
    return done


def _check(b: Block, done: list[tuple[str, list[str], int, subprocess.CompletedProcess]]) -> None:
    for command, shown, want, p in done:
        assert p.returncode == want, f"{b.id}: `{command}` exited {p.returncode}, the docs say {want}\n" \
                                     f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        missing = [s for s in shown if s.strip() and s.strip() != "..." and not _shown(s, p.stdout + p.stderr)]
        assert not missing, f"{b.id}: `{command}` did not print {missing}\n{p.stdout[-4000:]}\n{p.stderr[-2000:]}"


@pytest.fixture(scope="module")
def doc_runs(request, tmp_path_factory):
    """The selected fast blocks, each in its own folder, up to three at a time, no more than the
    cores (each block's commands in order): ~35 CLI processes that mostly wait on their workers,
    run one after another before."""
    chosen = {item.callspec.params["b"].id: item.callspec.params["b"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_doc_commands_run"}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(3, os.cpu_count() or 1))
    runs = {bid: pool.submit(_execute, b, tmp_path_factory.mktemp("doc")) for bid, b in chosen.items()
            if _skip_reason(b) is None}
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("b", [b for b in RUN if not b.slow], ids=lambda b: b.id)
def test_doc_commands_run(b, doc_runs):
    if reason := _skip_reason(b):
        pytest.skip(reason)
    _check(b, doc_runs[b.id].result())


@pytest.mark.slow
@pytest.mark.parametrize("b", [b for b in RUN if b.slow], ids=lambda b: b.id)
def test_slow_doc_commands_run(b, tmp_path):
    if reason := _skip_reason(b):
        pytest.skip(reason)
    _check(b, _execute(b, tmp_path))


def test_shown_output_matching_can_fail():
    assert _shown("FAIL  ... hold · 1 violated", "FAIL  47 hold · 1 violated · 0 error")
    assert not _shown("FAIL  ... hold · 2 violated", "FAIL  47 hold · 1 violated · 0 error")
    assert _shown("row   t0    t1", "│ row   t0    t1   t2     │")


# --- the generated reference pages ---------------------------------------------------------

def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_covers_every_command_and_option():
    import typer

    from sentinel.cli import app

    page = _hooks().cli_markdown()

    def walk(cmd, path):
        ctx = cmd.context_class(cmd, info_name=path[-1])
        if len(path) > 1:
            assert f"## `{' '.join(path)}`" in page, path
        for p in cmd.get_params(ctx):
            if p.param_type_name == "option" and not p.hidden:
                assert f"`{', '.join(p.opts + p.secondary_opts)}`" in page, (path, p.opts)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), ["sentinel"])
    assert "[cyan]" not in page and "[/]" not in page


def test_boundaries_reference_gives_every_port_its_kind_and_shape():
    from sentinel import boundaries

    page = _hooks().boundaries_markdown()
    for b in boundaries.BOUNDARIES.values():
        section = page.split(f"## `{b.name}`", 1)[1].split("\n## ", 1)[0]
        for p in (*b.inputs, *b.outputs):
            assert f"| `{p.name}` | {p.kind} | `{p.shape}` | {p.dtype} |" in section, (b.name, p.name)


def test_report_and_api_references_cover_the_models_and_public_names():
    import sentinel
    from sentinel.report import json_schema

    hooks = _hooks()
    report = hooks.report_schema_markdown()
    assert all(f"## {name}" in report for name in json_schema()["$defs"])
    api = hooks.api_markdown()
    assert all(f"::: {target.replace(':', '.')}" in api for target in sentinel._API.values())


def test_nav_names_every_page():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for n in node:
                yield from pages(n)
        else:
            for v in node.values():
                yield from pages(v)

    listed = set(pages(nav))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} | set(_hooks().GENERATORS)
    assert listed == on_disk, (listed - on_disk, on_disk - listed)


def test_readme_is_short_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 120
    first = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert first[0].split("#")[0].strip().endswith("sentinel gate")  # the catalog on the reference
    assert first[1].startswith("python -m pytest -q")                 # the tests
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link
