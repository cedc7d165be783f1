"""`sentinel mutate`: the mutation score of the catalog and the hunt on a target's mapped code."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Iterator, List, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..errors import SentinelError, UsageError
from ..mutate.equivalent import EVIDENCE_CAP_S
from ..report import dump, write_atomic
from .common import TARGETS, Device, _check_location, app, err, out, usage_error
from .history import ExecutorName, _scenarios


class MutateFormat(str, Enum):
    text = "text"
    markdown = "markdown"
    junit = "junit"
    json = "json"
    html = "html"


@contextmanager
def _progress(quiet: bool) -> Iterator:
    """Yield `update(done, total, tally)`: a bar with ETA on a terminal, a line per step in CI logs."""
    show = err.is_terminal and not quiet
    with Progress(TextColumn("mutants"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[tally]}"),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=err, transient=True,
                  disable=not show) as progress:
        task = progress.add_task("mutate", total=None, tally="")

        def update(done: int, total: int, tally: dict[str, int]) -> None:
            text = " ".join(f"{k} {v}" for k, v in sorted(tally.items()))
            progress.update(task, completed=done, total=total, tally=text)
            if not show and not quiet:
                err.print(f"  {done}/{total} mutants: {text}", highlight=False)
        yield update


@app.command()
def mutate(
    scenarios: Optional[List[str]] = typer.Argument(None, help="Scenario files, folders or catalog ids (default: the bundled catalog)."),
    target: str = typer.Option(..., "--target", "-t", help=f"Target: {', '.join(TARGETS)}, or module:Class."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="The target's checkout (never changed: a mutant lives in a forked child)."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Revision of --repo to mutate (a temporary worktree)."),
    boundary: Optional[List[str]] = typer.Option(None, "--boundary", "-b", help="Only the functions these boundaries map (repeatable)."),
    operators: Optional[str] = typer.Option(None, "--operators", help="Comma-separated operators (default: all; `sentinel mutate --list-operators`)."),
    plants: bool = typer.Option(False, "--plants", help="The reference only: judge its planted bugs as mutants (each plant's code swapped in for the function it replaces)."),
    mutant: Optional[List[str]] = typer.Option(None, "--mutant", "-m", help="Judge only this mutant (its key or id, as the report names it), or every mutant of a function (module:qualname; repeatable)."),
    budget: float = typer.Option(5.0, "--budget", min=0, help="Differential hunt seconds for each mutant the catalog leaves alive (0: catalog only)."),
    seed: int = typer.Option(0, "--seed", help="The hunt's seed (the same examples for every mutant)."),
    hunt_examples: int = typer.Option(100_000, "--hunt-examples", min=1, help="A mutant's hunt ends after this many examples per boundary (or at --budget)."),
    executor: ExecutorName = typer.Option(ExecutorName.local, "--executor", help="local (processes) or ray (RAY_ADDRESS, else a local instance)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Shards at a time (each runs two workers)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write the report here: DIR/mutate.json (and .md). Default: reports/mutate.json."),
    format: MutateFormat = typer.Option(MutateFormat.text, "--format", "-f", help="text, markdown, junit, json or html on stdout."),
    equivalent: Optional[Path] = typer.Option(None, "--equivalent", help="Equivalence claims (default: ./equivalent.yaml when it exists)."),
    equivalent_examples: int = typer.Option(100, "--equivalent-examples", min=1, help=f"Hunt examples per boundary an equivalence claim needs: a claimed mutant's hunt runs past --budget until it has them ({EVIDENCE_CAP_S:g} s more at most)."),
    survivor_examples: int = typer.Option(100, "--survivor-examples", min=0, help=f"Hunt examples per boundary a mutant needs before it is judged survived: its hunt runs past --budget until each boundary it hunts compared them ({EVIDENCE_CAP_S:g} s more at most; never more than --hunt-examples), so every survivor rests on at least that many examples whatever the load (0: --budget alone)."),
    fail_under: float = typer.Option(0.0, "--fail-under", min=0, max=100, help="Exit 1 when the score (percent) is lower."),
    cache: Path = typer.Option(Path(".sentinel") / "mutate-cache", "--cache", help="Judged mutants: a killed run resumes, a re-run judges nothing again."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the cache."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds one scenario may run on a mutant."),
    list_operators: bool = typer.Option(False, "--list-operators", help="List the operators with an example each, and exit."),
) -> None:
    """Mutation testing: how many small faults in the target's mapped functions do the catalog and the hunt catch?

    Each function a boundary maps (`sentinel list boundaries --target T`) is mutated one change at
    a time (AST operators); each mutant runs, in a forked child of a warm worker, first against the
    catalog (a scenario whose verdict changes kills it), then in a seeded differential hunt
    against the unmutated target. Score = killed / (mutants - equivalent - error).\n
    [cyan]sentinel mutate --target reference --budget 2[/]\n
    [cyan]sentinel mutate --target reference --plants[/]   (each planted bug as a mutant)\n
    [cyan]sentinel mutate --target slime --repo ~/src/slime -b opsm_mask --format markdown[/]\n
    Exit: 0 the score reaches --fail-under, 1 it does not, 2 bad usage, 3 the target could not be run.
    """
    from .. import views
    from ..mutate import driver
    from ..mutate.operators import OPERATORS
    if list_operators:
        for name, fn in OPERATORS.items():
            out.print(f"[bold]{name}[/]: {escape(' '.join((fn.__doc__ or '').split()))}", highlight=False)
        raise typer.Exit(0)
    _check_location(target, None, repo, commit)
    if plants and (target != "reference" or operators):
        raise usage_error("--plants applies to the reference target, without --operators")
    ops = [o.strip() for o in operators.split(",") if o.strip()] if operators else None
    unknown = [o for o in ops or [] if o not in OPERATORS]
    if unknown:
        raise usage_error(f"unknown operator(s) {', '.join(unknown)} (known: {', '.join(OPERATORS)})")
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():  # else found after the whole run
        raise usage_error(f"--out {out_dir} is a file: --out names the folder mutate.json and mutate.md go to")
    if equivalent is not None and not equivalent.exists():
        raise usage_error(f"--equivalent {equivalent} does not exist")
    if equivalent is None and Path("equivalent.yaml").exists():
        equivalent = Path("equivalent.yaml")
    # Said before the run: a run from another folder silently reads no claims and scores lower.
    err.print(f"equivalence claims: {escape(str(equivalent.resolve()))}" if equivalent else
              "equivalence claims: none (no --equivalent, no equivalent.yaml in this folder)", highlight=False, soft_wrap=True)
    from .. import process
    process.keep_hypothesis_home()
    opts = driver.Options(target=target, repo=str(repo.resolve()) if repo else None, commit=commit, device=device.value,
                          boundaries=list(boundary) if boundary else None, operators=ops, budget=budget, seed=seed,
                          timeout=timeout, hunt_examples=hunt_examples, executor=executor.value, jobs=jobs, cache=None if no_cache else cache,
                          equivalent=equivalent, equivalent_examples=equivalent_examples,
                          survivor_examples=survivor_examples, fail_under=fail_under, only=list(mutant) if mutant else None, plants=plants,
                          command=["sentinel", *sys.argv[1:]])
    try:
        with _progress(format != MutateFormat.text) as update:
            rep = driver.mutate(_scenarios(scenarios, target), opts, update)
    except UsageError as e:
        raise usage_error(str(e)) from None
    except SentinelError as e:
        err.print(f"[bold magenta]mutate failed:[/] {escape(str(e))}")
        raise typer.Exit(3) from None
    folder = out_dir or Path("reports")
    write_atomic(folder / "mutate.json", dump(rep))
    view = views.build(rep)
    write_atomic(folder / "mutate.md", views.render(view, "markdown"))
    if format == MutateFormat.text:
        views.show(view, out)
    else:
        sys.stdout.write(views.render(view, format.value))
    err.print(f"report written to {escape(str(folder / 'mutate.json'))}", highlight=False)
    raise typer.Exit(driver.exit_code(rep))
