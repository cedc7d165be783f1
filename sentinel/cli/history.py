"""`sentinel history`: scan a commit range for verdict flips and bisect each to its commit."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Iterator, List, Optional

import typer
from ..inert import markup
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .. import targets as target_registry
from ..catalog import catalog_path
from ..errors import GitError, SentinelError, TargetError, UsageError
from ..report import dump, write_atomic
from .common import TARGETS, Device, _for_target, _load, app, err, out, usage_error


class HistoryFormat(str, Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


class ExecutorName(str, Enum):
    local = "local"
    ray = "ray"


def _scenarios(items: list[str] | None, target: str):
    """Scenario files or folders, or ids of the bundled catalog's scenarios; only those that
    apply to `target`."""
    if not items:
        scs = _load([catalog_path()])
    else:
        paths = [Path(i) for i in items if Path(i).exists()]
        ids = [i for i in items if not Path(i).exists()]
        scs = _load(paths) if paths else []
        if ids:
            catalog = {sc.id: sc for sc in _load([catalog_path()])}
            unknown = [i for i in ids if i not in catalog]
            if unknown:
                raise usage_error(f"no such scenario file, folder or catalog id: {', '.join(unknown)}")
            scs += [catalog[i] for i in ids]
    if not scs:
        raise usage_error(f"no scenario applies to target {target!r}")
    return _for_target(scs, target)


def _loss_path_files(target: str) -> tuple[str, ...]:
    try:
        return target_registry.loss_path_files(target)
    except (TargetError, ImportError) as e:
        raise usage_error(str(e)) from None


def _hunt_dir(output: str | None) -> Path:
    """--hunt's finding scenarios: beside the JSON report (reports/ when there is none)."""
    return (Path(output).parent if output and output != "-" else Path("reports")) / "history-hunt"


@contextmanager
def _progress(quiet: bool) -> Iterator:
    """Yield `update(done, total, flips)`: a bar with ETA on a terminal, a line per commit in CI logs."""
    show = err.is_terminal and not quiet
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               TextColumn("{task.completed}/{task.total} commits · {task.fields[flips]} flip(s)"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True, disable=not show) as progress:
        task = progress.add_task("history", total=None, flips=0)
        last = [-1]

        def update(done: int, total: int, flips: int) -> None:
            progress.update(task, completed=done, total=total, flips=flips)
            if not show and not quiet and done != last[0]:
                last[0] = done
                err.print(f"  {done}/{total} commits, {flips} flip(s)", highlight=False)
        yield update


@app.command()
def history(
    scenarios: Optional[List[str]] = typer.Argument(None, help="Scenario files, folders or catalog ids (default: the bundled catalog's scenarios that apply to the target)."),
    target: str = typer.Option(..., "--target", "-t", help=f"Target: {', '.join(TARGETS)}, or module:Class."),
    repo: Path = typer.Option(..., "--repo", help="The target's repository (a bare one works too); it is never checked out in place."),
    since: Optional[str] = typer.Option(None, "--since", help="Where the range starts: a revision (itself the baseline) or a date YYYY-MM-DD. Default: the first commit."),
    until: str = typer.Option("HEAD", "--until", help="Where the range ends (a revision)."),
    every: Optional[int] = typer.Option(None, "--every", min=1, help="Evaluate every N-th commit that touches the loss path (default: about 2*sqrt(n) samples)."),
    all_commits: bool = typer.Option(False, "--all-commits", help="Also sample commits that touch none of the target's loss-path files."),
    executor: ExecutorName = typer.Option(ExecutorName.local, "--executor", help="local (-j tasks at a time on this machine, workers forked by one zygote) or ray (RAY_ADDRESS selects a cluster, else a local one starts; pip install 'rl-sentinel[ray]')."),
    jobs: int = typer.Option(os.cpu_count() or 1, "--jobs", "-j", min=1, help="Tasks at a time (each a worker process here, or Ray CPUs of a local instance)."),
    cache: Path = typer.Option(Path(".sentinel") / "history-cache", "--cache", help="Result cache: a killed scan resumes, a re-scan runs nothing."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the cache."),
    hunt: Optional[float] = typer.Option(None, "--hunt", min=1, help="Also run the differential hunt for SECONDS between neighbouring samples whose loss-path files changed; its findings (scenarios in history-hunt/ beside the report) are sampled and bisected like the catalog's."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a picture: scenarios x commits, coloured by verdict (FILE.png or FILE.svg; pip install 'rl-sentinel[plot]')."),
    format: HistoryFormat = typer.Option(HistoryFormat.text, "--format", "-f", help="text (a timeline), markdown (for an issue or PR) or json."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the JSON report here (atomically). Default: reports/history.json; '-' for none."),
    device: Device = typer.Option(Device.cpu, "--device", help="cpu, cuda or auto."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one scenario's target code may run."),
) -> None:
    """Scan a commit range: verdicts per commit, each flip bisected to the commit that made it.

    Walks the first-parent history, skips commits that touch none of the target's loss-path
    files (`sentinel list targets`), evaluates a sample, and wherever a scenario's verdict differs
    between neighbouring samples bisects to the exact commit. Commits where the target does not
    load are shown grey, never as holds and never blamed.\n
    [cyan]sentinel history --target slime --repo ~/src/slime --since 045310b2b~30 --until 045310b2b[/]\n
    [cyan]sentinel history ppo-kl-metric-aliasing --target slime --repo ~/src/slime --since 2025-09-01 --executor ray --plot history.png[/]\n
    Exit: 0 no regression left in place at --until, 1 a scenario regressed in the range and is still violated, 3 the target loaded nowhere.
    """
    from .. import history as hist
    from ..history import cache as history_cache
    from ..history import executors
    from ..history import walk
    from .. import views
    from ..views import plot as history_plot

    try:
        target_registry.get(target)
    except UsageError as e:
        raise usage_error(str(e)) from None
    if not repo.exists():
        raise usage_error(f"--repo {repo} does not exist")
    repo_s = str(repo.resolve())
    try:
        walk.rev(Path(repo_s), until)
        if since and not walk.is_date(since):
            walk.rev(Path(repo_s), since)
        if plot:
            history_plot.check(plot)
    except (GitError, UsageError) as e:
        raise usage_error(str(e)) from None
    if hunt:
        from .. import process
        process.keep_hypothesis_home()
    scs = _scenarios(scenarios, target)
    adapter = target_registry.adapter_spec(target)
    opts = hist.Options(target=target, repo=repo_s, since=since, until=until, every=every, all_commits=all_commits,
                        device=device.value, timeout=timeout, loss_path_files=_loss_path_files(target),
                        hunt_seconds=hunt, hunt_dir=_hunt_dir(output), command=["sentinel", *sys.argv[1:]])
    store = history_cache.Cache(None if no_cache else cache, target, adapter, device.value)
    try:
        with executors.make(executor.value, jobs) as ex, _progress(format != HistoryFormat.text) as update:
            rep = hist.Scan(scs, opts, ex, store, update).run()
    except (GitError, UsageError) as e:
        raise usage_error(str(e)) from None
    except SentinelError as e:
        err.print(f"[bold magenta]history failed:[/] {markup(str(e))}")
        raise typer.Exit(3) from None
    dest = None if output == "-" else Path(output or Path("reports") / "history.json")
    if dest:
        write_atomic(dest, dump(rep))
    view = views.build(rep)
    if plot:
        history_plot.plot(view, plot)
    if format == HistoryFormat.json:
        sys.stdout.write(dump(rep))
    elif format == HistoryFormat.markdown:
        sys.stdout.write(views.render(view, "markdown"))
    else:
        views.show(view, out)
    for note, path in (("report", dest), ("plot", plot)):
        if path:
            err.print(f"{note} written to {markup(str(path))}", highlight=False)
    raise typer.Exit(hist.exit_code(rep))
