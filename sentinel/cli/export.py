"""`sentinel export` (a finding -> a bundle for an upstream PR) and `sentinel findings` (the
local bug database)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import SentinelError
from .common import app, err, out, usage_error


@app.command()
def export(
    scenario: str = typer.Argument(..., help="A scenario file, or a catalog id (ppo-kl-metric-aliasing)."),
    target: str = typer.Option(..., "--target", "-t", help="The target where the finding is violated."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="The trainer's checkout (reference: a generated refimpl repository in DIR when omitted)."),
    commit: Optional[str] = typer.Option(None, "--commit", help="The unfixed revision (default HEAD)."),
    fix: Optional[str] = typer.Option(None, "--fix", help="A patch file applied in a temporary worktree for after.json; 'inverse': a reference plant's inverse patch."),
    fixed_at: Optional[str] = typer.Option(None, "--fixed-at", help="A revision where the bug is fixed, for after.json."),
    plant: Optional[str] = typer.Option(None, "--plant", help="reference: the planted bug to export."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="The bundle folder (default reports/export/ID-TARGET)."),
) -> None:
    """Write a bundle a maintainer runs without RL-Sentinel: validate.py, test_ID.py,
    before.json (+ after.json with --fix / --fixed-at), PR.md (ISSUE.md without a fix).

    [cyan]sentinel export ppo-kl-metric-aliasing --target slime --repo ~/src/slime --commit 045310b2b^ --fixed-at 045310b2b[/]

    [cyan]sentinel export opsm-mixed-advantage --target reference --plant opsm-token-level --fix inverse[/]
    """
    from ..export.bundle import DEFAULT_ROOT, Request, export as run_export
    if fix and fixed_at:
        raise usage_error("give --fix or --fixed-at, not both")
    if fix and fix != "inverse" and not Path(fix).is_file():
        raise usage_error(f"no such patch file: {fix}")
    name = Path(scenario).stem
    folder = output or DEFAULT_ROOT / f"{name}-{target}{'-' + plant if plant else ''}"
    try:
        summary = run_export(Request(scenario, target, folder, str(repo) if repo else None, commit, fix, fixed_at, plant))
    except SentinelError as e:
        err.print(f"error: {e}")
        raise typer.Exit(3) from None
    b, a = summary["before"], summary["after"]
    out.print(f"{folder}/: validate.py, {Path(summary['document'])}, before.json"
              f"{', after.json' if a else ''}")
    out.print(f"before: validate.py {b['validate'].get('status')} (exit {b['validate_rc']}), unit test "
              f"{'fails' if b['test_rc'] else 'passes'}")
    if not summary["reproduced"]:  # the files stay, and say so; no fake reproduction
        err.print(f"error: the exported validate.py does not reproduce {summary['scenario']} standalone: "
                  f"{b['validate'].get('error') or b['validate'].get('status')}")
        raise typer.Exit(3)
    if a:
        out.print(f"after:  validate.py {a['validate'].get('status')} (exit {a['validate_rc']}), unit test "
                  f"{'fails' if a['test_rc'] else 'passes'}")


@app.command()
def findings(
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Only verdicts on this target."),
    bundles: Path = typer.Option(Path("reports") / "export", "--bundles", help="Where export bundles are looked for."),
    as_json: bool = typer.Option(False, "--json", help="Print the database as JSON."),
    run: bool = typer.Option(False, "--run", help="Run the seeds and findings on --target now instead of reading the cached reports."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="With --run: the target's checkout."),
    commit: Optional[str] = typer.Option(None, "--commit", help="With --run: the revision of --repo."),
) -> None:
    """The local bug database: each seed and finding scenario, where it reproduces (from the
    reports on disk under reports/, or with --run from a run now), its provenance and upstream
    links, and its export bundles."""
    from ..export.findings import database, run_now
    if run and not target:
        raise usage_error("--run needs --target (and --repo where the target needs one)")
    if (repo or commit) and not run:
        raise usage_error("--repo / --commit go with --run")
    try:
        rows = database(target, bundles, run_now(target, str(repo) if repo else None, commit) if run else None)
    except SentinelError as e:
        err.print(f"error: {e}")
        raise typer.Exit(3) from None
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    t = Table(title="findings", title_justify="left")
    for col in ("scenario", "boundary", "reproduces on", "upstream", "bundle"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["id"], r["boundary"], ", ".join(r["reproduces"]) or "-", " ".join(r["links"]) or "-",
                  ", ".join(b["folder"] for b in r["bundles"]) or "-")
    out.print(t)
