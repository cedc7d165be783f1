"""`sentinel hunt`: search for violations with no hand-made trigger."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

import typer
from ..inert import markup
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import boundaries, process
from ..invariants import REGISTRY
from ..errors import UsageError
from ..report import dump, write_atomic
from ..spec import SpecError

from .common import TARGETS, app, out, err, Device, usage_error, _check_location


@app.command()
def hunt(
    target: str = typer.Option("reference", "--target", "-t", help=f"Target: {', '.join(TARGETS)}, or module:Class."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="The target's checkout (slime, areal). Default for areal: the installed package."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Revision of --repo (checked out in a temporary worktree)."),
    base: Optional[str] = typer.Option(None, "--base", help="Differential hunt: the base revision of --repo; with --head, every drawn input goes to both and a finding is where they differ."),
    head: Optional[str] = typer.Option(None, "--head", help="Differential hunt: the head revision of --repo, or WORKTREE (uncommitted changes included)."),
    against: Optional[str] = typer.Option(None, "--against", help="Differential hunt against `reference`: the same inputs through the target and the reference math; the adapter's declared deviations are not findings."),
    atol: float = typer.Option(1e-5, "--atol", help="Differential hunt: absolute tolerance between the sides."),
    rtol: float = typer.Option(1e-4, "--rtol", help="Differential hunt: relative tolerance between the sides."),
    boundary: Optional[List[str]] = typer.Option(None, "--boundary", "-b", help="Hunt only this boundary (repeatable). Default: every boundary the target has."),
    invariant: Optional[List[str]] = typer.Option(None, "--invariant", "-i", help="Hunt only this invariant family (repeatable), e.g. sequence_uniform."),
    prop: Optional[List[str]] = typer.Option(None, "--property", help="Hunt only this property (repeatable), e.g. opsm_mask.sequence_uniform (see --list)."),
    keyword: Optional[str] = typer.Option(None, "-k", metavar="EXPR", help="Only properties whose names match EXPR, as pytest's -k: words (substrings of the property, its boundary or family) joined by and / or / not, e.g. -k 'opsm and not finite'. A differential hunt: only the boundaries that match."),
    max_examples: Optional[int] = typer.Option(None, "--max-examples", "-n", min=1, help="Examples per property: then it is finished (default 300; a differential hunt: no cap, it spends its --time)."),
    min_examples: int = typer.Option(100, "--min-examples", min=1, help="A property cut off (budget, -x) before this many examples is `stopped`, not `holds`."),
    config: Optional[List[str]] = typer.Option(None, "--config", "-c", help="Pin a config option, KEY=VALUE (repeatable; a YAML value: token-mean, 0.1, null, '{mean_level: group}'). See `sentinel list boundaries`."),
    known: Optional[List[Path]] = typer.Option(None, "--known", help="Known findings not to report again: a hunt report (JSON) or scenario files / a folder of them (e.g. scenarios/findings/). Repeatable."),
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
    coverage_: bool = typer.Option(False, "--coverage", help="Measure branch coverage (coverage.py) of each mapped trainer function, the catalog's scenarios of the hunted boundaries first, then the hunt: the report lists branches covered, unreachable (with the adapter's reason) and uncovered."),
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
    [cyan]sentinel hunt --target slime --repo ~/src/slime --known scenarios/findings/[/]  (known bugs passed over)\n
    A differential hunt sends every drawn input to two sides; a finding is where they differ,
    classified fixed / regressed / changed (or bug against the reference):\n
    [cyan]sentinel hunt --target slime --repo ~/src/slime --base 045310b2b^ --head 045310b2b[/]\n
    [cyan]sentinel hunt --target verl --against reference --known scenarios/findings/[/]\n
    Exit: 0 nothing found, 1 a finding, 2 bad usage, 3 the target (or a differential hunt's side) could not be loaded or run, 5 nothing decided (every property untested, stopped or unsupported).
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
    process.keep_hypothesis_home()  # workers started from here on (python -m sentinel.cli)
    if time_budget <= 0:
        raise usage_error(f"--time {time_budget:g}: give the seconds of search, more than 0")
    differential = bool(base or head or against)
    if differential:
        _check_differential(target, plant, repo, commit, base, head, against)
    else:
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
    if keyword is not None:
        from .. import keywords
        try:
            if differential:  # the differential hunt's unit is a boundary
                boundary = keywords.select(boundary or sorted(boundaries.BOUNDARIES), keyword, lambda b: [b])
            else:
                prop = [p.name for p in keywords.select(H.select(boundary, invariant, prop), keyword,
                                                        lambda p: [p.name, p.boundary, p.family])]
        except UsageError as e:
            raise usage_error(str(e)) from None
    if not H.select(boundary, invariant, prop) or (keyword is not None and not (boundary if differential else prop)):
        raise usage_error("no hunt property matches these --boundary / --invariant / --property / -k filters (see --list)")
    try:
        pinned = parse_config(config or [], boundary or sorted({p.boundary for p in H.select(boundary, invariant, prop)}))
        known_findings = H.load_known(known or [])
    except (UsageError, SpecError) as e:  # a bad --config pair; a bad --known path
        raise usage_error(str(e)) from None
    spec = TargetSpec(target, str(repo.resolve()) if repo else None, commit, device.value, plant, compile_)
    if differential:
        from .. import git
        if against:
            sides = (TargetSpec("reference", device=device.value), spec)
        else:
            sides = (dataclasses.replace(spec, commit=base),
                     dataclasses.replace(spec, commit=None if head == git.WORKTREE else head))
    report_path = None if output == "-" else Path(output) if output else Path("reports") / "hunt.json"
    if out_dir.exists() and not out_dir.is_dir():  # found only when a finding is written: the hunt's time lost
        raise usage_error(f"--out {out_dir} is a file: --out names the folder each finding's scenario goes to")
    if report_path is not None and report_path.is_dir():
        raise usage_error(f"--output {report_path} is a folder: --output names the JSON report's file")

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
                    err.print(markup(msg), highlight=False)
                return
            if kind == "catalog":  # --coverage: the catalog's scenarios first, measured
                progress.update(task, description=f"catalog under coverage {e['done']}/{e['total']}")
                if not show and not as_json and e["done"] == e["total"]:
                    err.print(f"  catalog under coverage: {e['total']} scenarios", highlight=False)
                return
            name = e.get("property", "")
            if kind == "round":
                totals[name] = e["examples"]
            n = sum(totals.values()) + (e.get("examples", 0) if kind == "progress" else 0)
            el = e.get("hunt_elapsed_s", 0.0)
            progress.update(task, completed=min(el, time_budget),
                            description=f"{name}  · {n} examples · {len(found)} finding(s)")
            if kind == "round" and e.get("found"):
                found.append(name)
                if not as_json:
                    (progress.console if show else err).print(f"[bold red]violated[/] {markup(name)} ({el:.1f} s)",
                                                              highlight=False)
            elif not show and not as_json and kind == "round" and el - last_line[0] >= 5.0:
                last_line[0] = el
                err.print(f"  {el:5.1f} s  {n} examples  {len(found)} finding(s)", highlight=False)

        cov_dir = tempfile.TemporaryDirectory(prefix="sentinel-coverage-") if coverage_ else None
        try:
            if differential:
                rep = H.differential(*sides, boundary, time_budget, seed, against=bool(against), out_dir=out_dir,
                                     known=known_findings, config=pinned, first=first, shrink_time=shrink_time,
                                     timeout=timeout, atol=atol, rtol=rtol,
                                     max_examples=max_examples or H.DiffSettings.max_examples,
                                     min_examples=min_examples,
                                     command=["sentinel", *sys.argv[1:]], on_event=on_event)
            else:
                rep = H.hunt(spec, boundaries=boundary, families=invariant, names=prop, max_examples=max_examples or 300,
                             min_examples=min_examples, time_budget=time_budget, seed=seed, db=None if no_db else db,
                             out_dir=out_dir, timeout=timeout, shrink_time=shrink_time, first=first, jobs=jobs,
                             config=pinned, known=known_findings, command=["sentinel", *sys.argv[1:]],
                             on_event=on_event, coverage=cov_dir.name if cov_dir else None)
        except UsageError as e:
            raise usage_error(str(e)) from None
        finally:
            if cov_dir:
                cov_dir.cleanup()
    if report_path:
        write_atomic(report_path, dump(rep))
    if as_json:
        sys.stdout.write(dump(rep))
    else:
        from .. import views
        views.show(views.build(rep), out, verbose=verbose)
        if report_path:
            err.print(f"hunt report written to {markup(str(report_path))}", highlight=False)
    raise typer.Exit(rep.exit_code())


def _check_differential(target: str, plant: str | None, repo: Path | None, commit: str | None, base: str | None,
                        head: str | None, against: str | None) -> None:
    """Refuse, before any work starts, a differential hunt that cannot run as given."""
    from .. import git
    if against:
        if against != "reference":
            raise usage_error(f"--against {against!r}: the one side to hunt against is `reference`")
        if base or head:
            raise usage_error("--against reference and --base/--head are two kinds of differential hunt: give one")
        if target == "reference" and not plant:
            raise usage_error("--against reference needs a --target other than the reference (or a --plant)")
        _check_location(target, plant, repo, commit)
        return
    if not (base and head):
        raise usage_error("a differential hunt needs both --base REV and --head REV (or --head WORKTREE)")
    if target == "reference":
        raise usage_error("the reference has no revisions: --base/--head compare two revisions of a target loaded "
                          "from --repo (slime, areal, verl, ...); to compare a target with the reference math use "
                          "--against reference")
    if base == git.WORKTREE:
        raise usage_error("--base WORKTREE: the working tree can only be the head (--base REV --head WORKTREE)")
    if commit:
        raise usage_error("--commit and --base/--head: give the revisions with --base and --head")
    if not repo:
        raise usage_error("--base/--head are revisions of --repo: give the checkout with --repo PATH")
    _check_location(target, plant, repo, None)
    for rev in (base, head):
        if rev != git.WORKTREE:
            try:
                git.resolve(repo, rev)
            except git.GitError as e:
                raise usage_error(str(e)) from None


def parse_config(pairs: list[str], boundary_names: list[str]) -> dict:
    """--config KEY=VALUE pairs, each value read as YAML and checked against the declared
    Options (sentinel/boundaries.py) of every selected boundary that has the key."""
    import yaml

    from ..spec import LOADERS
    out = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--config {pair!r}: write KEY=VALUE")
        try:  # the scenario loader's YAML: 1e-3 is a number, as in a scenario file
            value = yaml.load(text, Loader=LOADERS[0]) if text.strip() else None
        except yaml.YAMLError as e:
            raise UsageError(f"--config {pair!r}: the value is not YAML: {e}") from None
        having = [b for b in boundary_names if boundaries.get(b).option(key) is not None]
        if not having:
            raise UsageError(f"--config {key}: no option {key!r} on the hunted boundaries ({', '.join(boundary_names)}); "
                             "see `sentinel list boundaries`")
        for b in having:
            why = boundaries.get(b).option(key).problem(value)
            if why:
                raise UsageError(f"--config {key}: {why} (boundary {b})")
        out[key] = value
    return out
