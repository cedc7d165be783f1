"""`sentinel cache info|prune`: the checkout cache (sentinel/checkouts.py) shown and trimmed."""

from __future__ import annotations

import json
import time
from typing import Optional

import typer
from rich.table import Table

from .. import checkouts
from .common import app, out

cache_app = typer.Typer(no_args_is_help=True, help="The checkout cache: one tree per commit, reused by every command.")
app.add_typer(cache_app, name="cache")


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@cache_app.command()
def info(json_out: bool = typer.Option(False, "--json", help="One JSON object instead of a table.")) -> None:
    """Where the cache is, its size against its cap, and each commit's tree (least recently used first)."""
    es = checkouts.entries()
    facts = {"folder": str(checkouts.cache_dir()), "enabled": checkouts.enabled(), "max_bytes": checkouts.max_bytes(),
             "bytes": sum(e.size for e in es),
             "entries": [{"commit": e.sha, "repo": e.repo, "bytes": e.size, "last_used": e.last_used,
                          "in_use": e.in_use, "path": str(e.tree)} for e in es]}
    if json_out:
        print(json.dumps(facts, indent=2))
        return
    out.print(f"checkout cache {facts['folder']}: {len(es)} commits, {_mb(facts['bytes'])} of {_mb(facts['max_bytes'])}"
              + ("" if facts["enabled"] else " (off: SENTINEL_CHECKOUT_CACHE)"), markup=False, highlight=False)
    if es:
        table = Table("commit", "repository", "size", "last used", "in use")
        for e in es:
            table.add_row(e.sha[:12], e.repo, _mb(e.size), time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)),
                          "yes" if e.in_use else "")
        out.print(table)


@cache_app.command()
def prune(max_mb: Optional[float] = typer.Option(None, "--max-mb", min=0, help="Keep at most this many MiB (default: the cap, SENTINEL_CACHE_MAX_MB)."),
          all_: bool = typer.Option(False, "--all", help="Remove every entry no command is using.")) -> None:
    """Remove least recently used commits until the cache fits; an entry in use is kept."""
    cap = 0 if all_ else int(max_mb * 2**20) if max_mb is not None else checkouts.max_bytes()
    removed = checkouts.prune(cap)
    left = checkouts.entries()
    out.print(f"removed {len(removed)} commits; {len(left)} left, {_mb(sum(e.size for e in left))}",
              markup=False, highlight=False)
