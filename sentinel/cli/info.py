"""Commands that read or write files and never run a target: report, check, init, list, schema."""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

import typer
from ..inert import markup
from rich.table import Table
from rich.text import Text

from .. import boundaries
from ..adapters import excuses
from ..adapters.options import is_trainer
from ..catalog import catalog_path
from ..invariants import REGISTRY
from ..report import schema_text, write_atomic
from ..schema import scenario_schema_text
from ..spec import ScenarioModel
from .. import targets as target_registry
from ..errors import TargetError, UsageError

from .common import app, out, err, usage_error, _load


def _format(name: str) -> str:
    from .. import views
    try:
        views.get(name)
    except UsageError as e:
        raise typer.BadParameter(str(e)) from None
    return name


@app.command()
def report(
    file: Path = typer.Argument(..., help="A JSON report written by run, gate, compare, matrix, hunt, history, mutate, or a bisect log (bisect -o)."),
    format: str = typer.Option("text", "--format", "-f", callback=_format, help="text (tables and per-token grids), markdown (a pull-request section), junit, json, html (one self-contained page), github (::error annotations at each violated invariant's scenario line, for a GitHub Actions step), or a registered format (sentinel/views/registry.py)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="text: show passing scenarios too."),
) -> None:
    """Render a report of any kind: terminal view, PR-ready markdown, JUnit XML, or an HTML page.

    [cyan]sentinel report reports/latest.json --format markdown >> pr.md[/]

    [cyan]sentinel report reports/latest.json --format html -o report.html[/]
    """
    from .. import views
    if not file.exists():
        raise usage_error(f"no such report: {file}")
    try:
        view = views.load(file)
    except Exception as e:  # noqa: BLE001 - pydantic or JSON errors alike
        raise usage_error(f"{file} is not an RL-Sentinel report: {str(e).splitlines()[0]}") from None
    fmt = views.get(format)
    if output:
        write_atomic(output, fmt.render(view, verbose=verbose, source=str(file)))
    elif fmt.show is not None:
        fmt.show(view, out, verbose=verbose)
    else:
        sys.stdout.write(fmt.render(view, verbose=verbose, source=str(file)))
    # the report's own exit code, so `sentinel report X` can gate a CI step too
    code = view.exit_code()
    if code:
        what = (f"{view.headline()}" if view.report is None or view.kind in ("hunt", "history", "mutate") else
                "nothing ran: every scenario unsupported or excluded" if view.report.nothing_ran() else
                f"{view.report.statistics.violated} violated, {view.report.statistics.errors} error(s)")
        err.print(f"{markup(str(file))}: {markup(what)} (exit {code})", highlight=False)
    raise typer.Exit(code)


@app.command()
def check(
    paths: List[Path] = typer.Argument(..., help="Scenario files or folders (searched for *.yaml)."),
) -> None:
    """Validate scenario files without running anything: exit 0, or 2 naming file and line.

    What the pre-commit hook runs (.pre-commit-hooks.yaml): [cyan]sentinel check scenarios/[/]
    """
    scenarios = _load(paths)
    files = {sc.file for sc in scenarios}
    err.print(f"{len(scenarios)} scenario(s) in {len(files)} file(s): valid", highlight=False)


init_app = typer.Typer(help="Write a project file: [cyan]sentinel init ci[/] (a GitHub Actions workflow).",
                       no_args_is_help=True, rich_markup_mode="rich")
app.add_typer(init_app, name="init")


@init_app.command("ci")
def init_ci(
    target: Optional[List[str]] = typer.Option(None, "--target", "-t", help="A target to gate (repeatable): your adapter as module:Class, or a trainer name (sentinel list targets). Default: reference."),
    repo_path: Optional[str] = typer.Option(None, "--repo-path", help="The trainer's checkout inside your repository, relative to its root (. when the repository is the trainer): passed to gate as --repo."),
    install: Optional[str] = typer.Option(None, "--install", help="What CI pip-installs for rl-sentinel: a wheel committed to the repository (vendor/rl_sentinel-X-py3-none-any.whl) or a VCS URL (git+https://HOST/ORG/rl-sentinel@TAG). Default: where this rl-sentinel came from, when CI can reach it."),
    path: Optional[List[str]] = typer.Option(None, "--path", "-p", help="Scenario files or folders to gate (repeatable). Default: ./scenarios when it exists, else the bundled catalog."),
    branch: Optional[str] = typer.Option(None, "--branch", help="The branch pushes to which are gated. Default: origin's default branch, else init.defaultBranch, else main."),
    timeout_minutes: int = typer.Option(30, "--timeout-minutes", min=1, help="The job's time limit."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing workflow file."),
) -> None:
    """Write .github/workflows/rl-sentinel.yml: install, a gate per target, the markdown reports
    in the job summary, ::error annotations on the scenario lines, JSON and JUnit uploaded.

    [cyan]sentinel init ci --target mytrainer_adapter:MyAdapter --install git+https://github.com/ORG/rl-sentinel@v0.2.0[/]

    [cyan]sentinel init ci --target verl --repo-path . --install vendor/rl_sentinel-0.2.0-py3-none-any.whl[/]
    """
    from .. import scaffold, workflow
    root = Path.cwd()
    try:
        spec = workflow.check_install(install, root) if install else workflow.default_install()
        text = workflow.Workflow(install=spec, targets=target or ["reference"], repo_path=repo_path, paths=path or [],
                                 branch=branch or workflow.default_branch(root), timeout_minutes=timeout_minutes).text()
        written = scaffold.write(Path(workflow.PATH), text, force)
    except UsageError as e:
        raise usage_error(str(e)) from None
    err.print(f"wrote {markup(str(written))} (installs {markup(spec)}): commit it, then pushes to the default "
              "branch and every pull request run the gate", highlight=False)


new_app = typer.Typer(help="Start something new from a template: [cyan]sentinel new adapter mytrainer[/].",
                      no_args_is_help=True, rich_markup_mode="rich")
app.add_typer(new_app, name="new")


@new_app.command("adapter")
def new_adapter(
    name: str = typer.Argument(..., help="Your trainer's name, e.g. mytrainer."),
    folder: Path = typer.Option(Path("."), "--dir", help="Where to write the two files."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
) -> None:
    """Write NAME_adapter.py (a commented adapter with one boundary, kl, that runs as written) and
    test_NAME_adapter.py (it runs the catalog's KL scenarios through the real worker).

    Then: [cyan]sentinel run <catalog>/kl --target NAME_adapter:NameAdapter[/] from that folder.
    """
    from .. import scaffold
    try:
        written = [scaffold.write(folder / f, text, force) for f, text in scaffold.adapter_files(name).items()]
    except UsageError as e:
        raise usage_error(str(e)) from None
    for p in written:
        err.print(f"wrote {markup(str(p))}", highlight=False)
    module = written[0].stem
    err.print(f"next: python -m pytest {markup(str(written[1]))}   and   "
              f"sentinel list boundaries --target {module}:{module.title().replace('_', '')}", highlight=False)


class What(str, Enum):
    scenarios = "scenarios"
    boundaries = "boundaries"
    targets = "targets"
    invariants = "invariants"
    plants = "plants"


@app.command("list")
def list_(
    what: What = typer.Argument(What.scenarios, help="scenarios, boundaries, targets, invariants or plants."),
    paths: Optional[List[Path]] = typer.Option(None, "--path", "-p", help="Scenario files or folders (default: the bundled catalog)."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="boundaries: the trainer functions this target's adapter calls for each (read from its code; nothing is imported from the trainer)."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="boundaries --target: the checkout its declared deviations are checked against (default: $SENTINEL_<T>_REPO, else the installed package)."),
) -> None:
    """List the catalog's scenarios, the canonical boundaries, targets, invariant families or planted bugs.

    [cyan]sentinel list boundaries --target verl[/] shows which verl functions each boundary calls.
    """
    t = Table(show_lines=False, title_justify="left")
    if what == What.boundaries and target:
        _mapping_table(t, target)
        out.print(t)
        _deviations_table(target, repo)
        return
    if what == What.scenarios:
        t.title = "scenarios"
        for c in ("id", "boundary", "invariants", "file"):
            t.add_column(c, overflow="fold")
        for sc in _load(paths or [catalog_path()]):
            t.add_row(sc.id, sc.boundary, ", ".join(i.family for i in sc.invariants), Text(_rel(sc.file)))
    elif what == What.boundaries:
        t.title = markup("boundaries (port: kind [shape] dtype, B rows, T tokens, V vocabulary; "
                         "option = default: allowed values (what it does))")
        for c in ("boundary", "inputs", "outputs", "options"):
            t.add_column(c, overflow="fold")
        for b in boundaries.BOUNDARIES.values():
            opts = "\n".join(f"{o.name} = {json.dumps(o.default)}: {o.allowed()}" + (f" ({o.doc})" if o.doc else "")
                             for o in b.options)
            t.add_row(b.name, _ports(b.inputs), _ports(b.outputs), markup(opts, lines=True))
    elif what == What.targets:
        t.title = "targets"
        for c in ("target", "located by", "install", "loss-path files (history)", "what"):
            t.add_column(c, overflow="fold")
        for info in target_registry.registry().values():
            extra = f"pip install 'rl-sentinel[{info.extra}]'" if info.extra else ""
            install = "; ".join(x for x in (extra, info.install) if x)
            try:
                files = target_registry.loss_path_files(info.name)
            except Exception:  # noqa: BLE001 - an adapter that cannot be imported here still gets its row
                files = ()
            t.add_row(info.name, markup(info.located_by), markup(install), markup("\n".join(files) or "-"),
                      markup(f"{info.description} ({info.adapter})"))
    elif what == What.invariants:
        t.title = "invariant families"
        t.add_column("family")
        t.add_column("checks", overflow="fold")
        for k, cls in sorted(REGISTRY.items()):
            t.add_row(k, " ".join((cls.__doc__ or "").split()))
    else:
        PLANTS = target_registry.plants()
        t.title = "planted bugs (sentinel gate --plant NAME)"
        for c in ("plant", "trips", "what"):
            t.add_column(c, overflow="fold")
        for k, p in sorted(PLANTS.items()):
            t.add_row(k, ", ".join(p.trips), p.description)
    out.print(t)


def _mapping_table(t: Table, target: str) -> None:
    """Boundary -> the target functions its adapter calls, or why it declines it."""
    try:
        adapter = target_registry.adapter_class(target)
    except (TargetError, ImportError) as e:
        raise usage_error(str(e)) from None
    t.title = markup(f"boundaries on {target} ({target_registry.adapter_spec(target)}; port: kind [shape] dtype)")
    t.add_column("boundary", no_wrap=True)  # the row's key: never folded or squeezed out
    for c in ("inputs", "outputs", "calls", "adapter method"):
        t.add_column(c, overflow="fold", min_width=12)
    reach = {b: _reach(adapter, b) for b in adapter.mapping()}
    if any(reach.values()):  # only where the adapter pins options or adds hunt values
        # wrapped, not no_wrap: a long reason on one line squeezed every other column to nothing
        t.add_column("options pinned / hunt domains", overflow="fold", ratio=2)
    for b, m in adapter.mapping().items():
        calls = "\n".join(m["calls"]) if m["calls"] else f"declined: {m['declined']}"
        # the steps of the trainer's chain the adapter runs itself, each with why (composing.trainer_step)
        calls += "".join(f"\nadapter runs {f}: {why}" for f, why in m.get("steps", {}).items())
        spec = boundaries.get(b)
        t.add_row(b, _ports(spec.inputs), _ports(spec.outputs), markup(calls), m["method"] or "",
                  *([reach[b]] if any(reach.values()) else []))


def _deviations_table(target: str, repo: Path | None) -> None:
    """Each declared deviation: the function it excuses, the body hash it was declared for,
    the hash at the checkout (read from the file, no import) and whether it applies there."""
    adapter = target_registry.adapter_class(target)
    if not adapter.deviations:
        return
    info = target_registry.registry().get(target)
    env = os.environ.get(info.repo_env) if info and info.repo_env else None
    root = repo or (Path(env) if env else None)
    t = Table(title=markup(f"declared deviations of {target} at {root or 'the installed package'} "
                           "(declare body=<hash at checkout> to tie one to the code it excuses)"), title_justify="left")
    for c in ("deviation", "boundary", "source", "declared hash", "hash at checkout", "applies"):
        t.add_column(c, overflow="fold")
    for name, d in adapter.deviations.items():
        st = excuses.standing(d.source, d.body, d.commits, [root] if root else [], root)
        applies = "yes" if st["applies"] else f"no: {st['skipped']}"
        if not d.source and not d.commits:
            applies += " (not tied to code)"
        t.add_row(name, d.boundary, d.source or "-", " or ".join(d.body) or "-", st["hash_now"] or "-",
                  markup(applies))
    out.print(t)


def _reach(adapter: Any, boundary: str) -> str:
    """The options the adapter pins on `boundary` (with why) and the hunt values it adds."""
    pins = [f"{k}: pinned, {r}" for k, r in adapter.pins(boundary).items()] if hasattr(adapter, "pins") else []
    domains = [f"{k}: trainer option, default {vs[0]!r}, hunt also draws {', '.join(map(repr, vs[1:]))}"
               if is_trainer(k) else f"{k}: hunt also draws {', '.join(map(repr, vs))}"
               for k, vs in (getattr(adapter, "option_domains", {}).get(boundary) or {}).items()]
    return markup("\n".join(pins + domains), lines=True)


def _ports(ports: tuple[boundaries.Port, ...]) -> str:
    """One line per port: `name: kind [shape] dtype`, so a scalar and a per-token `clipfrac` read apart."""
    return markup("\n".join(f"{p.name}: {p.contract()}" for p in ports), lines=True)


def _rel(f: str) -> str:
    try:
        return str(Path(f).relative_to(Path.cwd()))
    except ValueError:
        return f


class SchemaKind(str, Enum):
    scenario = "scenario"
    report = "report"


@app.command()
def schema(
    kind: SchemaKind = typer.Argument(SchemaKind.scenario, help="scenario (for editors) or report."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
) -> None:
    """Print a JSON Schema: scenario files (point your editor's YAML support at it) or reports."""
    if kind == SchemaKind.report:
        text = schema_text()
    else:
        text = scenario_schema_text(ScenarioModel.model_json_schema())
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)


