"""`sentinel`: run training-signal scenarios against RL trainers and read the verdicts.

Exit codes: 0 every scenario holds, 1 a violation, 2 bad usage or a bad scenario file,
3 a target error (and no violation).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
import typer.core
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__, boundaries, cleanup, git, process, render, verdicts
from .catalog import catalog_path, display_path, local_catalog
from .invariants import REGISTRY
from .report import Report, dump, load, schema_text, write_atomic
from .schema import scenario_schema_text
from .spec import ScenarioModel, SpecError, load_paths
from . import targets as target_registry
from .errors import UsageError

TARGETS = target_registry.names()  # for help texts; sentinel/targets.py is the one list

# Typer's rich help shows a flag as taking `<bool>`; a flag takes no value, so show none.
_display_type = getattr(typer.core.TyperOption, "display_type_rich", None)
if _display_type is not None:
    typer.core.TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _display_type(self, ctx)

app = typer.Typer(
    name="sentinel", no_args_is_help=True, rich_markup_mode="rich", add_completion=False,
    pretty_exceptions_enable=False,
    help=(
        "Hunt quiet training-signal bugs in LLM RL trainers.\n\n"
        "A [bold]scenario[/] (YAML) names a [bold]boundary[/] (one loss-path function, e.g. opsm_mask), "
        "canonical inputs and the [bold]invariants[/] that must hold. [bold]sentinel run[/] calls a "
        "[bold]target[/]'s real code (`sentinel list targets`) in an isolated worker and writes a JSON "
        "[bold]report[/].\n\n"
        "Start: [cyan]sentinel gate[/] (the catalog on the bundled reference), "
        "[cyan]sentinel run scenarios/seeds/opsm-mixed-advantage.yaml --target slime --repo ~/src/slime[/], "
        "[cyan]sentinel report reports/latest.json --format markdown[/].\n\n"
        "Exit codes: 0 all hold · 1 a violation · 2 bad usage or scenario · 3 target error."),
)
out = Console() if sys.stdout.isatty() else Console(width=140)  # CI logs: wide enough for the tables
err = Console(stderr=True)


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class MatrixFormat(str, Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


class Format(str, Enum):
    text = "text"
    markdown = "markdown"
    junit = "junit"
    json = "json"
    html = "html"


def _version(value: bool) -> None:
    if value:
        out.print(f"rl-sentinel {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version.")) -> None:
    """Hunt quiet training-signal bugs in LLM RL trainers."""


def usage_error(msg: str) -> "typer.Exit":
    err.print(f"[bold red]error:[/] {escape(msg)}", soft_wrap=True)
    return typer.Exit(2)


def _load(paths: list[Path]):
    try:
        return load_paths(paths)
    except SpecError as e:
        for line in e.lines():
            err.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)  # FILE:LINE: stays on one line
        raise typer.Exit(2) from None


def _check_target(target: str, plant: str | None) -> None:
    try:
        target_registry.get(target)
    except UsageError as e:
        raise usage_error(str(e)) from None
    if plant:
        if target != "reference":
            raise usage_error("--plant applies to the reference target only")
        from sentinel_adapters.plants import PLANTS
        if plant not in PLANTS:
            raise usage_error(f"unknown plant {plant!r} (known: {', '.join(sorted(PLANTS))})")


@contextmanager
def _progress(as_json: bool, total: int):
    """Yield `tick(description)`: a progress bar on a terminal, one line per result in CI logs."""
    show = err.is_terminal and not as_json
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True, disable=not show) as progress:
        task = progress.add_task("starting worker", total=total)

        def tick(description: str) -> None:
            description = escape(description)  # names a target: user text, never markup
            progress.update(task, advance=1, description=description)
            if not show and not as_json:
                err.print(f"  {description}", highlight=False)
        yield tick


def _check_location(target: str, plant: str | None, repo: Path | None, commit: str | None) -> None:
    """Refuse, before any work starts, a target that cannot be located as given."""
    _check_target(target, plant)
    if commit and not repo:
        raise usage_error("--commit needs --repo")
    if repo is not None and not repo.exists():
        raise usage_error(f"--repo {repo} does not exist")
    if repo is None and target_registry.get(target).needs_repo:
        raise usage_error(f"{target} is not a package: give its checkout with --repo PATH")
    if commit:
        from . import git
        try:
            git.resolve(repo, commit)
        except git.GitError as e:
            raise usage_error(str(e)) from None


def _execute(scenarios, targets, *, output: Path | None, junit: Path | None, as_json: bool, timeout: float,
             verbose: bool = False) -> Report:
    from .runner import run
    with _progress(as_json, len(scenarios) * len(targets)) as tick:
        report = run(scenarios, targets, timeout=timeout, on_result=lambda r: tick(f"{r.target}: {r.id}: {r.verdict}"),
                     command=["sentinel", *sys.argv[1:]])
    _emit(report, output, junit, as_json, verbose)
    return report


def _emit(report: Report, output: Path | None, junit: Path | None, as_json: bool, verbose: bool = False) -> None:
    if output:
        write_atomic(output, dump(report))
    if junit:
        write_atomic(junit, render.junit(report))
    if as_json:
        sys.stdout.write(dump(report))
    else:
        render.console_report(report, out, verbose)
        for t in report.targets.values():
            if t.load_error:
                err.print(f"[bold magenta]target {escape(t.name)} could not be loaded:[/] {escape(t.load_error.message)}")
        if output:
            err.print(f"report written to {escape(str(output))}", highlight=False)


OUTPUT_HELP = "Write the JSON report here (atomically). Default: reports/latest.json; '-' for none."


def _output(o: Optional[str]) -> Path | None:
    if o == "-":
        return None
    return Path(o) if o else Path("reports") / "latest.json"


@app.command()
def run(
    paths: List[Path] = typer.Argument(..., help="Scenario files or folders (searched for *.yaml)."),
    target: str = typer.Option("reference", "--target", "-t", help=f"Target: {', '.join(TARGETS)}, or module:Class naming your own adapter."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="The target's checkout (slime, areal). Default for areal: the installed package."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Revision of --repo to run (checked out in a temporary worktree; your checkout is untouched)."),
    device: Device = typer.Option(Device.cpu, "--device", help="Where canonical inputs live: cpu, cuda, or auto (cuda when available)."),
    plant: Optional[str] = typer.Option(None, "--plant", help="Reference only: swap in one planted bug (see `sentinel list plants`)."),
    compile_: bool = typer.Option(False, "--compile", help="Keep the target's torch.compile (default: eager; compiling costs ~20 s per function on CPU)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout instead of tables."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one scenario's target code may run before it is an error."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every scenario's invariants, and tracebacks."),
) -> None:
    """Run scenarios on one target and write a JSON report.

    [cyan]sentinel run scenarios/seeds/opsm-mixed-advantage.yaml[/] (reference)\n
    [cyan]sentinel run scenarios/ --target slime --repo ~/src/slime --commit 045310b2b^[/]\n
    [cyan]sentinel run scenarios/ --target areal[/] (the installed areal package)
    """
    from .runner import TargetSpec
    _check_location(target, plant, repo, commit)
    scenarios = _load(paths)
    spec = TargetSpec(target, str(repo.resolve()) if repo else None, commit, device.value, plant, compile_)
    report = _execute(scenarios, [spec], output=_output(output), junit=junit, as_json=as_json, timeout=timeout,
                      verbose=verbose)
    raise typer.Exit(report.exit_code())


@app.command()
def gate(
    paths: Optional[List[Path]] = typer.Option(None, "--path", "-p", help="Scenario files or folders (default: ./scenarios when it exists, else the bundled catalog)."),
    target: str = typer.Option("reference", "--target", "-t", help="Target to gate (default: the bundled reference)."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="The target's checkout (needed where `sentinel list targets` says --repo)."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Revision of --repo to gate (checked out in a temporary worktree)."),
    plant: Optional[str] = typer.Option(None, "--plant", help="Reference only: run the gate against a planted bug, to see it fail."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here (for CI)."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one scenario's target code may run before it is an error."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every scenario's invariants, and tracebacks."),
) -> None:
    """Run a whole catalog; exit non-zero on any violation or error.

    The catalog is ./scenarios when the current folder has one (a repository gating its own
    scenarios), else the bundled one; the first line says which. On the reference every
    scenario must hold: [cyan]sentinel gate[/]. To watch it catch a real bug:
    [cyan]sentinel gate --plant opsm-token-level[/].
    """
    from .runner import TargetSpec
    _check_location(target, plant, repo, commit)
    if not paths:
        local = local_catalog()
        paths = [local or catalog_path()]
        if not as_json:
            err.print(f"catalog: {escape(display_path(paths[0]))} "
                      f"({'this folder' + chr(39) + 's scenarios' if local else 'bundled with rl-sentinel'})", highlight=False)
    scenarios = _load(paths)
    spec = TargetSpec(target, str(repo.resolve()) if repo else None, commit, device.value, plant)
    report = _execute(scenarios, [spec], output=_output(output), junit=junit, as_json=as_json, timeout=timeout,
                      verbose=verbose)
    code, why = verdicts.gate_exit_code((r.verdict for r in report.results), target)
    if why:
        err.print(f"[bold red]gate:[/] {why}")
    raise typer.Exit(int(code))


def _repo_target(target: str, repo: Path) -> str:
    _check_target(target, None)
    if not repo.exists():
        raise usage_error(f"--repo {repo} does not exist")
    return str(repo.resolve())


@app.command()
def compare(
    paths: List[Path] = typer.Argument(..., help="Scenario files or folders."),
    target: str = typer.Option(..., "--target", "-t", help="Target whose repository is compared (slime, areal, module:Class)."),
    repo: Path = typer.Option(..., "--repo", help="The target's repository (a bare one works too)."),
    base: str = typer.Option(..., "--base", help="Revision before the change (e.g. 045310b2b^)."),
    head: str = typer.Option(..., "--head", help="Revision after the change, or WORKTREE for the working tree with its uncommitted changes."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one scenario may run."),
) -> None:
    """Run scenarios at two revisions side by side: fixed, regressed, still-violated, holds-both, inconclusive.

    Both revisions are checked out into temporary worktrees and run in parallel; your
    checkout, branch, index and stash are untouched.\n
    [cyan]sentinel compare scenarios/seeds/ppo-kl-metric-aliasing.yaml --target slime --repo ~/src/slime --base 045310b2b^ --head 045310b2b[/]\n
    Then [cyan]sentinel report reports/latest.json --format markdown[/] gives the PR evidence.\n
    Exit: 0 fixed/holds-both only, 1 something regressed or still violated, 3 inconclusive.
    """
    from . import compare as cmp
    from . import git
    repo_s = _repo_target(target, repo)
    scenarios = _load(paths)
    try:
        for rev in (base, head):
            if rev == git.WORKTREE:
                if git._repo(Path(repo_s)).bare:
                    raise git.GitError(f"{repo} is a bare repository: it has no working tree for --head WORKTREE")
            else:
                git.resolve(Path(repo_s), rev)
    except git.GitError as e:
        raise usage_error(str(e)) from None
    with _progress(as_json, len(scenarios) * 2) as tick:
        rep = cmp.compare(scenarios, target, repo_s, base, head, device=device.value, timeout=timeout,
                          on_result=lambda r: tick(f"{r.target}: {r.id}: {r.verdict}"), command=["sentinel", *sys.argv[1:]])
    _emit(rep, _output(output), junit, as_json)
    raise typer.Exit(cmp.compare_exit_code(rep))


@app.command()
def bisect(
    path: Path = typer.Argument(..., help="A scenario file."),
    target: str = typer.Option(..., "--target", "-t", help="Target (slime, areal, module:Class)."),
    repo: Path = typer.Option(..., "--repo", help="The target's repository."),
    good: str = typer.Option(..., "--good", help="A revision with the old verdict."),
    bad: str = typer.Option(..., "--bad", help="A later revision with the new verdict."),
    scenario: Optional[str] = typer.Option(None, "--scenario", help="Scenario id, when the file holds several."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the bisect log as JSON here."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one scenario may run."),
) -> None:
    """Find the first commit whose verdict differs from --good's (git-bisect semantics).

    Commits where the target cannot be imported or run are skipped, not blamed.\n
    [cyan]sentinel bisect scenarios/seeds/ppo-kl-metric-aliasing.yaml --target slime --repo ~/src/slime --good 045310b2b~20 --bad 045310b2b[/]
    """
    from . import compare as cmp
    from . import git
    repo_s = _repo_target(target, repo)
    scs = _load([path])
    if scenario:
        scs = [s for s in scs if s.id == scenario]
        if not scs:
            raise usage_error(f"no scenario {scenario!r} in {path}")
    if len(scs) != 1:
        raise usage_error(f"{path} holds {len(scs)} scenarios: choose one with --scenario")

    def on_probe(p) -> None:
        err.print(f"  tried {p.commit[:10]} {p.verdict:<10} {escape(p.subject[:60])}", highlight=False)

    try:
        res = cmp.bisect(scs[0], target, repo_s, good, bad, device=device.value, timeout=timeout, on_probe=on_probe)
    except git.GitError as e:
        raise usage_error(str(e)) from None
    if output:
        write_atomic(output, json.dumps(cmp.bisect_report(res, scs[0], target, repo_s, ["sentinel", *sys.argv[1:]]), indent=2) + "\n")
    if res.first:
        out.print(f"[bold]{res.first.commit}[/] is the first commit where {scs[0].id} is "
                  f"[bold]{res.bad_verdict}[/] (was {res.good_verdict})")
        out.print(f"  {escape(res.first.subject)}")
    else:
        out.print(f"[yellow]skipped commits leave {len(res.candidates)} candidates:[/] " + " ".join(c[:10] for c in res.candidates))
    out.print(f"tried {len(res.probes)} revisions of {res.commits_in_range} in range, {res.duration_s:.1f} s")
    raise typer.Exit(0 if res.first else 3)


@app.command()
def matrix(
    targets: Optional[List[str]] = typer.Option(None, "--targets", "-t", help="Columns: NAME, NAME=REPO or NAME=REPO@REV (repeatable). Default: reference, the installed areal/verl packages, and checkouts named by SENTINEL_SLIME_REPO / SENTINEL_AREAL_REPO / SENTINEL_VERL_REPO."),
    paths: Optional[List[Path]] = typer.Option(None, "--path", "-p", help="Scenario files or folders (default: the bundled catalog)."),
    format: MatrixFormat = typer.Option(MatrixFormat.text, "--format", "-f", help="text, markdown or json."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Which invariants hold in which framework and version: invariants down, target@version across.

    Runs every scenario that applies to more than one target on every available target
    (in parallel, one worker per column). Cells that cannot run say why.\n
    [cyan]SENTINEL_SLIME_REPO=~/src/slime sentinel matrix --format markdown[/]
    """
    from . import matrix as mx
    from .runner import run as run_all
    if targets:
        cols = []
        for t in targets:
            spec = mx.parse_target(t)
            if spec.name not in TARGETS:
                raise usage_error(f"unknown target {spec.name!r} in --targets {t!r} (known: {', '.join(TARGETS)})")
            cols.append(mx.Column(spec.key, spec))
    else:
        cols = mx.default_columns()
    scenarios = mx.shared(_load(paths or [catalog_path()]), cols)
    runnable = [c.spec for c in cols if c.spec is not None]
    with _progress(format != MatrixFormat.text, len(scenarios) * len(runnable)) as tick:
        rep = run_all(scenarios, runnable, on_result=lambda r: tick(f"{r.target}: {r.id}: {r.verdict}"),
                      command=["sentinel", *sys.argv[1:]])
    table = mx.table(rep, scenarios, cols)
    rep = rep.model_copy(update={"extra": {"matrix": table}})
    dest = _output(output)
    if dest:
        write_atomic(dest, dump(rep))
    if format == MatrixFormat.json:
        sys.stdout.write(json.dumps(table, indent=2) + "\n")
    elif format == MatrixFormat.markdown:
        sys.stdout.write(mx.markdown(table))
    else:
        t = Table(title=f"conformance matrix · {len(scenarios)} scenarios", title_justify="left")
        t.add_column("scenario", overflow="fold")
        t.add_column("invariant")
        for c in table["columns"]:
            t.add_column(escape(c), overflow="fold")
        for r in table["rows"]:
            t.add_row(render.Text(r["scenario"]), render.Text(r["invariant"]), *[render.Text(v, render.STYLE.get(v, "dim")) for v in r["cells"].values()])
        out.print(t)
    if dest:
        err.print(f"report written to {escape(str(dest))}", highlight=False)


@app.command()
def report(
    file: Path = typer.Argument(..., help="A JSON report written by run, gate or compare."),
    format: Format = typer.Option(Format.text, "--format", "-f", help="text (tables and per-token grids), markdown (a pull-request section), junit, json, html (one self-contained page)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="text: show passing scenarios too."),
) -> None:
    """Render a report: terminal view, PR-ready markdown, JUnit XML, or an HTML page.

    [cyan]sentinel report reports/latest.json --format markdown >> pr.md[/]

    [cyan]sentinel report reports/latest.json --format html -o report.html[/]
    """
    if not file.exists():
        raise usage_error(f"no such report: {file}")
    try:
        rep = load(file)
    except Exception as e:  # noqa: BLE001 - pydantic or JSON errors alike
        raise usage_error(f"{file} is not an RL-Sentinel report: {str(e).splitlines()[0]}") from None
    if format == Format.text:
        if output:
            with open(output, "w", encoding="utf-8") as f:
                render.console_report(rep, Console(file=f, width=120), verbose)
        else:
            render.console_report(rep, out, verbose)
    else:
        if format == Format.html:
            from .html_report import page
            text = page(rep)
        elif format == Format.markdown:
            text = render.markdown(rep, source=str(file))
        else:
            text = {Format.junit: render.junit, Format.json: dump}[format](rep)
        if output:
            write_atomic(output, text)
        else:
            sys.stdout.write(text)
    # the report's own exit code, so `sentinel report X` can gate a CI step too
    code = rep.exit_code() if rep.kind != "compare" else int(verdicts.compare_exit_code(c.verdict for c in rep.comparisons))
    if code:
        s = rep.statistics
        err.print(f"{escape(str(file))}: {s.violated} violated, {s.errors} error(s) (exit {code})", highlight=False)
    raise typer.Exit(code)


@app.command()
def hunt(
    target: str = typer.Option("reference", "--target", "-t", help=f"Target: {', '.join(TARGETS)}, or module:Class."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="The target's checkout (slime, areal). Default for areal: the installed package."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Revision of --repo (checked out in a temporary worktree)."),
    boundary: Optional[List[str]] = typer.Option(None, "--boundary", "-b", help="Hunt only this boundary (repeatable). Default: every boundary the target has."),
    invariant: Optional[List[str]] = typer.Option(None, "--invariant", "-i", help="Hunt only this invariant family (repeatable), e.g. sequence_uniform."),
    prop: Optional[List[str]] = typer.Option(None, "--property", help="Hunt only this property (repeatable), e.g. opsm_mask.sequence_uniform (see --list)."),
    max_examples: int = typer.Option(300, "--max-examples", "-n", min=1, help="Examples per property before it is declared to hold."),
    time_budget: float = typer.Option(60.0, "--time", help="Seconds of search in all (worker start-up and shrinking not counted)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Derandomise: the same seed draws the same examples."),
    db: Path = typer.Option(Path(".sentinel/hunt-db"), "--db", help="Hypothesis example database: known failures are replayed first."),
    no_db: bool = typer.Option(False, "--no-db", help="Use no example database."),
    out_dir: Path = typer.Option(Path("reports/hunt"), "--out", help="Write each finding here as a ready-to-run scenario YAML."),
    plant: Optional[str] = typer.Option(None, "--plant", help="Reference only: hunt a planted bug (see `sentinel list plants`)."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    compile_: bool = typer.Option(False, "--compile", help="Keep the target's torch.compile."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the JSON hunt report here. Default: reports/hunt.json; '-' for none."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout instead of tables."),
    shrink_time: float = typer.Option(20.0, "--shrink-time", help="Seconds of shrinking per finding before the smallest so far is kept."),
    first: bool = typer.Option(False, "--first", "-x", help="Stop at the first finding (once shrunk)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Worker processes hunting in parallel (one CPU core each)."),
    timeout: float = typer.Option(60.0, "--timeout", help="Extra seconds a round may overrun before it is an error."),
    list_: bool = typer.Option(False, "--list", help="List the hunt properties and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every property, not only findings and errors."),
) -> None:
    """Search for invariant violations with no hand-made trigger; shrink each to a minimal scenario.

    Hypothesis draws canonical batches and configs (batch sizes, lengths, partially and fully
    masked rows, no-EOS rows, groups, mixed advantage signs, extreme values at masked
    positions, clip and threshold configs), checks every generic invariant that applies
    to each boundary, and shrinks a violation to a minimal counterexample, written as a
    scenario YAML that [cyan]sentinel run[/] reproduces.\n
    [cyan]sentinel hunt --plant opsm-token-level --seed 0[/]\n
    [cyan]sentinel hunt --target slime --repo ~/src/slime -b opsm_mask --time 30[/]\n
    [cyan]sentinel hunt --target areal -b advantages[/]\n
    Exit: 0 nothing found, 1 a finding, 2 bad usage, 3 the target could not be loaded or run.
    """
    from . import hunt as H
    from .runner import TargetSpec
    if list_:
        t = Table(title="hunt properties", title_justify="left")
        for c in ("property", "family", "checks"):
            t.add_column(c, overflow="fold")
        for p in H.select():
            t.add_row(p.name, p.family, p.doc)
        out.print(t)
        raise typer.Exit(0)
    _check_location(target, plant, repo, commit)
    for b in boundary or []:
        if b not in boundaries.BOUNDARIES:
            raise usage_error(f"unknown boundary {b!r} (known: {', '.join(sorted(boundaries.BOUNDARIES))})")
    for i in invariant or []:
        if i not in REGISTRY:
            raise usage_error(f"unknown invariant family {i!r} (known: {', '.join(sorted(REGISTRY))})")
    for p in prop or []:
        if p not in H.PROPERTIES:
            raise usage_error(f"unknown property {p!r} (see sentinel hunt --list)")
    if not H.select(boundary, invariant, prop):
        raise usage_error("no hunt property matches these --boundary / --invariant / --property filters (see --list)")
    spec = TargetSpec(target, str(repo.resolve()) if repo else None, commit, device.value, plant, compile_)
    report_path = None if output == "-" else Path(output) if output else Path("reports") / "hunt.json"

    show = err.is_terminal and not as_json
    found: list[str] = []
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not show) as progress:
        task = progress.add_task("starting worker", total=time_budget)
        totals: dict[str, int] = {}
        last_line = [0.0]

        def on_event(e: dict) -> None:
            kind = e.get("event")
            if kind == "start":
                lanes = f"{e['jobs']} workers" if e.get("jobs", 1) > 1 else "worker"
                msg = f"{e['target']}: hunting {e['properties']} properties ({lanes} up in {e['startup_s']:.1f} s)"
                if not show and not as_json:
                    err.print(escape(msg), highlight=False)
                return
            name = e.get("property", "")
            if kind == "round":
                totals[name] = e["examples"]
            n = sum(totals.values()) + (e.get("examples", 0) if kind == "progress" else 0)
            el = e.get("hunt_elapsed_s", 0.0)
            progress.update(task, completed=min(el, time_budget),
                            description=f"{name}  · {n} examples · {len(found)} finding(s)")
            if kind == "round" and e["status"] == "violated" and name not in found:
                found.append(name)
                if not as_json:
                    (progress.console if show else err).print(f"[bold red]violated[/] {name} ({el:.1f} s)", highlight=False)
            elif not show and not as_json and kind == "round" and el - last_line[0] >= 5.0:
                last_line[0] = el
                err.print(f"  {el:5.1f} s  {n} examples  {len(found)} finding(s)", highlight=False)

        try:
            rep = H.hunt(spec, boundaries=boundary, families=invariant, names=prop, max_examples=max_examples,
                         time_budget=time_budget, seed=seed, db=None if no_db else db, out_dir=out_dir,
                         timeout=timeout, shrink_time=shrink_time, first=first, jobs=jobs,
                         command=["sentinel", *sys.argv[1:]],
                         on_event=on_event)
        except ValueError as e:
            raise usage_error(str(e)) from None
    if report_path:
        write_atomic(report_path, dump(rep))
    if as_json:
        sys.stdout.write(dump(rep))
    else:
        _hunt_console(rep, verbose)
        if report_path:
            err.print(f"hunt report written to {escape(str(report_path))}", highlight=False)
    raise typer.Exit(rep.exit_code())


def _hunt_console(rep: Report, verbose: bool) -> None:
    from rich.panel import Panel
    h = rep.hunt
    t = Table(title=f"RL-Sentinel hunt · {', '.join(rep.targets)}", title_justify="left")
    for c in ("property", "verdict", "examples", "rejected", "errors", "s", "why"):
        t.add_column(c, overflow="fold")
    for p, r in zip(h.properties, rep.results):
        if not verbose and p.status in ("holds", "unsupported") and not p.errors:
            continue
        why = (r.reason or "").split("; ")[0][:100]
        if p.errors and p.error_sample and p.status != "error":
            why += f" · target raised on {p.errors} input(s): {p.error_sample.type}: {p.error_sample.message[:80]}"
        t.add_row(p.property, render.Text(p.status, render.STYLE[p.status]), str(p.examples), str(p.rejected),
                  str(p.errors), f"{p.duration_s:.2f}", render.Text(why))
    if t.row_count:
        out.print(t)
    for f in h.findings:
        r = next(x for x in rep.results if x.id == f.property)
        body = [render.invariant_detail(i) for i in r.invariants]
        shape = f"{f.rows} row(s) x {f.tokens} token(s)" if f.tokens else f"{f.rows} row(s)"
        title = (f"{f.property}: minimal trigger {shape}, found after {f.examples_to_first} examples / "
                 f"{f.time_to_first_s:.2f} s")
        if f.reproduced is False:
            title += " · [bold magenta]the written scenario did NOT reproduce it[/]"
        out.print(Panel(render.Group(*body, render.Text(f"scenario: {f.file or f.scenario_id}", style="dim")),
                        title=title, title_align="left", border_style="red"))
    states = {s: sum(1 for p in h.properties if p.status == s) for s in ("holds", "violated", "unsupported", "error")}
    style = "bold red" if h.findings else "bold magenta" if states["error"] else "bold green"
    out.print(f"[{style}]{'FOUND' if h.findings else 'NOTHING FOUND'}[/]  {len(h.findings)} finding(s) · "
              f"{states['holds']} held · {states['unsupported']} not applicable · {states['error']} error  "
              f"({h.examples} examples in {h.search_s:.1f} s, {h.examples_per_s:.0f}/s; "
              f"worker start {h.startup_s:.1f} s)", highlight=False)
    for b, fams in h.invariants_per_boundary.items():
        if verbose:
            out.print(f"  {b}: {', '.join(fams)}", highlight=False)


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
    force: bool = typer.Option(False, "--force", help="Overwrite an existing workflow file."),
) -> None:
    """Write .github/workflows/rl-sentinel.yml: install, `gate --junit`, the markdown report in
    the job summary, the JSON report and JUnit XML uploaded as an artifact."""
    from . import scaffold
    try:
        path = scaffold.write(Path(scaffold.GITHUB_WORKFLOW), scaffold.WORKFLOW, force)
    except UsageError as e:
        raise usage_error(str(e)) from None
    err.print(f"wrote {path}: commit it, then every push and pull request runs the gate", highlight=False)


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
) -> None:
    """List the catalog's scenarios, the canonical boundaries, targets, invariant families or planted bugs."""
    t = Table(show_lines=False, title_justify="left")
    if what == What.scenarios:
        t.title = "scenarios"
        for c in ("id", "boundary", "invariants", "file"):
            t.add_column(c, overflow="fold")
        for sc in _load(paths or [catalog_path()]):
            t.add_row(sc.id, sc.boundary, ", ".join(i.family for i in sc.invariants), render.Text(_rel(sc.file)))
    elif what == What.boundaries:
        t.title = "boundaries (input? = optional; option = default: allowed values)"
        for c in ("boundary", "inputs", "outputs", "options"):
            t.add_column(c, overflow="fold")
        for b in boundaries.BOUNDARIES.values():
            opts = "\n".join(f"{o.name} = {json.dumps(o.default)}: {o.allowed()}" for o in b.options)
            t.add_row(b.name, ", ".join(p.name + ("" if p.required else "?") for p in b.inputs),
                      ", ".join(p.name for p in b.outputs), escape(opts))
    elif what == What.targets:
        t.title = "targets"
        for c in ("target", "located by", "install", "what"):
            t.add_column(c, overflow="fold")
        for info in target_registry.registry().values():
            extra = f"pip install 'rl-sentinel[{info.extra}]'" if info.extra else ""
            install = "; ".join(x for x in (extra, info.install) if x)
            t.add_row(info.name, escape(info.located_by), escape(install), escape(f"{info.description} ({info.adapter})"))
    elif what == What.invariants:
        t.title = "invariant families"
        t.add_column("family")
        t.add_column("checks", overflow="fold")
        for k, cls in sorted(REGISTRY.items()):
            t.add_row(k, " ".join((cls.__doc__ or "").split()))
    else:
        from sentinel_adapters.plants import PLANTS
        t.title = "planted bugs (sentinel gate --plant NAME)"
        for c in ("plant", "trips", "what"):
            t.add_column(c, overflow="fold")
        for k, p in sorted(PLANTS.items()):
            t.add_row(k, ", ".join(p.trips), p.description)
    out.print(t)


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


def _unwrap(doc: str) -> str:
    """A docstring as help text: paragraphs (blank-line separated) joined into one line each,
    so the terminal, not the source's line breaks, decides where lines wrap."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


for _command in app.registered_commands:
    if _command.callback is not None and _command.callback.__doc__:
        _command.callback.__doc__ = _unwrap(_command.callback.__doc__)


def entry() -> None:
    """Console script: an unexpected exception is a tool error (exit 3), never read as a violation.

    Ctrl-C, SIGTERM (CI's `timeout`) and SIGHUP all end the run the same way: workers killed,
    worktrees and temp files removed, exit 130. What an earlier, SIGKILLed run left behind is
    swept first (sentinel/cleanup.py)."""
    cleanup.install_signal_handlers()
    cleanup.on_interrupt(process.stop_all)
    git.sweep_stale()
    try:
        app()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception:  # noqa: BLE001
        err.print_exception()
        err.print("[bold magenta]rl-sentinel failed unexpectedly[/] (exit 3); please report this traceback")
        sys.exit(3)


if __name__ == "__main__":
    entry()
