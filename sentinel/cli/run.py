"""Commands that run scenarios on targets: run, gate, compare, bisect, matrix."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from ..inert import markup

from .. import verdicts, views
from ..catalog import catalog_path, display_path, local_catalog
from ..report import dump, write_atomic

from .common import (TARGETS, app, out, err, Device, MatrixFormat, usage_error, _load, _check_target, _progress,
                     _check_location, _for_target, _execute, _emit, OUTPUT_HELP, _output, LOAD_TIMEOUT, LOAD_TIMEOUT_HELP, KEYWORD_HELP)


@app.command()
def run(
    paths: List[Path] = typer.Argument(..., help="Scenario files or folders (searched for *.yaml)."),
    keyword: Optional[str] = typer.Option(None, "-k", metavar="EXPR", help=KEYWORD_HELP),
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
    load_timeout: float = typer.Option(LOAD_TIMEOUT, "--load-timeout", min=0.1, help=LOAD_TIMEOUT_HELP),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every scenario's invariants, and tracebacks."),
) -> None:
    """Run scenarios on one target and write a JSON report.

    [cyan]sentinel run scenarios/seeds/opsm-mixed-advantage.yaml[/] (reference)\n
    [cyan]sentinel run scenarios/ --target slime --repo ~/src/slime --commit 045310b2b^[/]\n
    [cyan]sentinel run scenarios/ --target areal[/] (the installed areal package)
    """
    from ..runner import TargetSpec
    _check_location(target, plant, repo, commit)
    scenarios = _for_target(_load(paths, keyword), target, quiet=as_json)
    spec = TargetSpec(target, str(repo.resolve()) if repo else None, commit, device.value, plant, compile_)
    report = _execute(scenarios, [spec], output=_output(output), junit=junit, as_json=as_json, timeout=timeout,
                      verbose=verbose, load_timeout=load_timeout)
    raise typer.Exit(report.exit_code())


@app.command()
def gate(
    paths: Optional[List[Path]] = typer.Option(None, "--path", "-p", help="Scenario files or folders (default: ./scenarios when it exists, else the bundled catalog)."),
    keyword: Optional[str] = typer.Option(None, "-k", metavar="EXPR", help=KEYWORD_HELP),
    target: str = typer.Option("reference", "--target", "-t", help="Target to gate (default: the bundled reference)."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="The target's checkout (needed where `sentinel list targets` says --repo)."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Revision of --repo to gate (checked out in a temporary worktree)."),
    plant: Optional[str] = typer.Option(None, "--plant", help="Reference only: run the gate against a planted bug, to see it fail."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here (for CI)."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one scenario's target code may run before it is an error."),
    load_timeout: float = typer.Option(LOAD_TIMEOUT, "--load-timeout", min=0.1, help=LOAD_TIMEOUT_HELP),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every scenario's invariants, and tracebacks."),
) -> None:
    """Run a whole catalog; exit non-zero on any violation or error (or when nothing ran).

    The catalog is ./scenarios when the current folder has one (a repository gating its own
    scenarios), else the bundled one; the first line says which. On the reference every
    scenario must hold: [cyan]sentinel gate[/]. To watch it catch a real bug:
    [cyan]sentinel gate --plant opsm-token-level[/].
    """
    from ..runner import TargetSpec
    _check_location(target, plant, repo, commit)
    if not paths:
        local = local_catalog()
        paths = [local or catalog_path()]
        if not as_json:
            err.print(f"catalog: {markup(display_path(paths[0]))} "
                      f"({'this folder' + chr(39) + 's scenarios' if local else 'bundled with rl-sentinel'})", highlight=False)
    scenarios = _for_target(_load(paths, keyword), target, quiet=as_json)
    spec = TargetSpec(target, str(repo.resolve()) if repo else None, commit, device.value, plant)
    report = _execute(scenarios, [spec], output=_output(output), junit=junit, as_json=as_json, timeout=timeout,
                      verbose=verbose, load_timeout=load_timeout)
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
    keyword: Optional[str] = typer.Option(None, "-k", metavar="EXPR", help=KEYWORD_HELP),
    target: str = typer.Option(..., "--target", "-t", help="Target whose repository is compared (slime, areal, module:Class)."),
    repo: Path = typer.Option(..., "--repo", help="The target's repository (a bare one works too)."),
    base: str = typer.Option(..., "--base", help="Revision before the change (e.g. 045310b2b^)."),
    head: str = typer.Option(..., "--head", help="Revision after the change, or WORKTREE for the working tree with its uncommitted changes."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one scenario may run."),
    load_timeout: float = typer.Option(LOAD_TIMEOUT, "--load-timeout", min=0.1, help=LOAD_TIMEOUT_HELP),
) -> None:
    """Run scenarios at two revisions side by side: fixed, regressed, still-violated, holds-both, inconclusive.

    Both revisions are checked out into temporary worktrees and run in parallel; your
    checkout, branch, index and stash are untouched.\n
    [cyan]sentinel compare scenarios/seeds/ppo-kl-metric-aliasing.yaml --target slime --repo ~/src/slime --base 045310b2b^ --head 045310b2b[/]\n
    Then [cyan]sentinel report reports/latest.json --format markdown[/] gives the PR evidence.\n
    Exit: 0 fixed/holds-both only, 1 something regressed or still violated, 3 inconclusive, 5 nothing ran on either side (every scenario unsupported or excluded).
    """
    from .. import compare as cmp
    from .. import git
    repo_s = _repo_target(target, repo)
    scenarios = _load(paths, keyword)
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
                          load_timeout=load_timeout,
                          on_result=lambda r: tick(f"{r.target}: {r.id}: {r.verdict}"), command=["sentinel", *sys.argv[1:]])
    _emit(rep, _output(output), junit, as_json)
    raise typer.Exit(rep.exit_code())


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
    load_timeout: float = typer.Option(LOAD_TIMEOUT, "--load-timeout", min=0.1, help=LOAD_TIMEOUT_HELP),
) -> None:
    """Find the first commit whose verdict differs from --good's (git-bisect semantics).

    Commits where the target cannot be imported or run are skipped, not blamed.\n
    [cyan]sentinel bisect scenarios/seeds/ppo-kl-metric-aliasing.yaml --target slime --repo ~/src/slime --good 045310b2b~20 --bad 045310b2b[/]
    """
    from .. import compare as cmp
    from .. import git
    repo_s = _repo_target(target, repo)
    scs = _load([path])
    if scenario:
        scs = [s for s in scs if s.id == scenario]
        if not scs:
            raise usage_error(f"no scenario {scenario!r} in {path}")
    if len(scs) != 1:
        raise usage_error(f"{path} holds {len(scs)} scenarios: choose one with --scenario")
    if not scs[0].applies_to(target):
        raise usage_error(f"scenario {scs[0].id!r} is written for {', '.join(scs[0].targets)}, not {target!r}")

    def on_probe(p) -> None:
        err.print(f"  tried {p.commit[:10]} {p.verdict:<10} {markup(p.subject[:60])}", highlight=False)

    try:
        res = cmp.bisect(scs[0], target, repo_s, good, bad, device=device.value, timeout=timeout, on_probe=on_probe,
                         load_timeout=load_timeout)
    except git.GitError as e:
        raise usage_error(str(e)) from None
    log = cmp.bisect_report(res, scs[0], target, repo_s, ["sentinel", *sys.argv[1:]])
    if output:
        write_atomic(output, json.dumps(log, indent=2) + "\n")
    view = views.build(log)
    views.show(view, out)
    raise typer.Exit(view.exit_code())


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
    from .. import matrix as mx
    from ..runner import run as run_all
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
        sys.stdout.write(views.render(views.build(rep), "markdown"))
    else:
        views.show(views.build(rep), out)
    if dest:
        err.print(f"report written to {markup(str(dest))}", highlight=False)


