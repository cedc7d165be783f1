"""`sentinel hunt`: search for violations with no hand-made trigger."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import boundaries, render
from ..invariants import REGISTRY
from ..report import Report, dump, write_atomic

from .common import TARGETS, app, out, err, Device, usage_error, _check_location


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
    from .. import hunt as H
    from ..runner import TargetSpec
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
        if p.preconditions:
            why += " · excluded by precondition: " + ", ".join(f"{k.split(':')[0]} x{n}" for k, n in p.preconditions.items())
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


