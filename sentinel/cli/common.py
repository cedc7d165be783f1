"""The console: the Typer app, its consoles, option types and the helpers every command shares."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
import typer.core
from rich.console import Console
from ..inert import markup
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import __version__
from ..report import Report, dump, write_atomic
from ..spec import SpecError, load_paths
from .. import targets as target_registry
from ..errors import UsageError
from ..process import LOAD_TIMEOUT

TARGETS = target_registry.names()  # for help texts; sentinel/targets.py is the one list

# Typer's rich help shows a flag as taking `<bool>`; a flag takes no value, so show none.
_display_type = getattr(typer.core.TyperOption, "display_type_rich", None)
if _display_type is not None:
    typer.core.TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _display_type(self, ctx)

app = typer.Typer(
    name="sentinel", no_args_is_help=True, rich_markup_mode="rich", add_completion=True,
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
        "Exit codes: 0 all hold · 1 a violation · 2 bad usage or scenario · 3 target error · "
        "5 nothing ran (every scenario unsupported or excluded).\n\n"
        "Defaults come from [bold]\\[tool.sentinel][/] in the nearest pyproject.toml (target, repo, paths, "
        "timeout, device, output); a flag overrides them. Shell completion: "
        "[cyan]sentinel --install-completion[/] (bash, zsh, fish, PowerShell; "
        "[cyan]--show-completion[/] prints the script instead)."),
)
# CI logs: wide enough for the tables (140), wider where COLUMNS asks (never narrower: rich's own
# default off a terminal, and what some runners export, is 80, which folds every table)
_COLUMNS = os.environ.get("COLUMNS", "")
out = Console() if sys.stdout.isatty() else Console(width=max(140, int(_COLUMNS) if _COLUMNS.isdigit() else 0))
err = Console(stderr=True)


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class MatrixFormat(str, Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


def _version(value: bool) -> None:
    if value:
        out.print(f"rl-sentinel {__version__}")
        raise typer.Exit()


@app.callback()
def main(ctx: typer.Context,
         version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version.")) -> None:
    """Hunt quiet training-signal bugs in LLM RL trainers."""
    from .. import settings
    try:  # runs before the command's own options are read: [tool.sentinel] becomes their defaults
        ctx.default_map = {**settings.default_map(), **(ctx.default_map or {})}
    except UsageError as e:
        raise usage_error(str(e)) from None


def usage_error(msg: str) -> "typer.Exit":
    err.print(f"[bold red]error:[/] {markup(msg, lines=True)}", soft_wrap=True)
    return typer.Exit(2)


KEYWORD_HELP = ("Only scenarios whose names match EXPR, as pytest's -k: words (substrings of the id, boundary, "
                "tags or file name) joined by and / or / not and parentheses, e.g. -k 'kl and not k3'.")


def _load(paths: list[Path], keyword: str | None = None):
    try:
        scenarios = load_paths(paths)
    except SpecError as e:
        for line in e.lines():
            err.print(f"[bold red]error:[/] {markup(line)}", highlight=False, soft_wrap=True)  # FILE:LINE: stays on one line
        raise typer.Exit(2) from None
    if keyword is None:
        return scenarios
    from .. import keywords
    try:
        chosen = keywords.select(scenarios, keyword, keywords.scenario_names)
    except UsageError as e:
        raise usage_error(str(e)) from None
    if not chosen:  # as pytest: everything deselected is "nothing ran", not a pass
        err.print(f"-k {markup(keyword)} selects none of the {len(scenarios)} scenario(s): nothing ran (exit 5)",
                  highlight=False)
        raise typer.Exit(5)
    return chosen



def _for_target(scenarios: list, target: str, quiet: bool = False) -> list:
    """The scenarios that apply to `target`; a scenario written for other targets (`targets:`) is
    not run there. None applying is a usage error that names whom they are written for (running
    nothing would look like a target that supports none of them)."""
    mine = [sc for sc in scenarios if sc.applies_to(target)]
    others = sorted({t for sc in scenarios if not sc.applies_to(target) for t in sc.targets})
    if scenarios and not mine:
        raise usage_error(f"none of the {len(scenarios)} scenario(s) applies to target {target!r}: they are "
                          f"written for {', '.join(others)} (their `targets:`); run them with --target {others[0]}")
    if len(mine) < len(scenarios) and not quiet:
        err.print(f"{len(scenarios) - len(mine)} scenario(s) written for {', '.join(others)} are not run on "
                  f"{markup(target)}", highlight=False)
    return mine

def _check_target(target: str, plant: str | None) -> None:
    try:
        target_registry.get(target)
    except UsageError as e:
        raise usage_error(str(e)) from None
    if plant:
        if target != "reference":
            raise usage_error("--plant applies to the reference target only")
        PLANTS = target_registry.plants()
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
            description = markup(description)  # names a target and a scenario: their text, never markup
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
        from .. import git
        try:
            git.resolve(repo, commit)
        except git.GitError as e:
            raise usage_error(str(e)) from None


LOAD_TIMEOUT_HELP = "Seconds the target's import and load() may take before it is an error naming the phase."


def _execute(scenarios, targets, *, output: Path | None, junit: Path | None, as_json: bool, timeout: float,
             verbose: bool = False, load_timeout: float = LOAD_TIMEOUT) -> Report:
    from ..runner import run
    with _progress(as_json, len(scenarios) * len(targets)) as tick:
        report = run(scenarios, targets, timeout=timeout, on_result=lambda r: tick(f"{r.target}: {r.id}: {r.verdict}"),
                     command=["sentinel", *sys.argv[1:]], load_timeout=load_timeout)
    _emit(report, output, junit, as_json, verbose)
    return report


def _emit(report: Report, output: Path | None, junit: Path | None, as_json: bool, verbose: bool = False) -> None:
    if output:
        write_atomic(output, dump(report))
    from .. import views
    view = views.build(report)
    if junit:
        write_atomic(junit, views.render(view, "junit"))
    if as_json:
        sys.stdout.write(dump(report))
    else:
        views.show(view, out, verbose=verbose)
        for t in report.targets.values():
            if t.load_error:
                err.print(f"[bold magenta]target {markup(t.name)} could not be loaded:[/] {markup(t.load_error.message, lines=True)}")
        if output:
            err.print(f"report written to {markup(str(output))}", highlight=False)


OUTPUT_HELP = "Write the JSON report here (atomically). Default: reports/latest.json; '-' for none."


def _output(o: Optional[str]) -> Path | None:
    if o == "-":
        return None
    return Path(o) if o else Path("reports") / "latest.json"

