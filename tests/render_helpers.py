"""A report rendered through the view layer (sentinel/views), as the tests call it."""

from __future__ import annotations

from sentinel.views import build, render, show


def markdown(report, **options) -> str:
    return render(build(report), "markdown", **options)


def page(report) -> str:
    return render(build(report), "html")


def junit(report) -> str:
    return render(build(report), "junit")


def console_report(report, console, verbose: bool = False) -> None:
    show(build(report), console, verbose=verbose)


def report_command(path, *args: str):
    """`sentinel report PATH ARGS...` in this process (Typer's CliRunner): rendering starts no
    worker, so a subprocess would only add an interpreter start. A renderer that raises fails
    the test here (catch_exceptions=False) instead of reading as the exit code 1 of a violation;
    the result has exit_code, stdout and stderr."""
    from typer.testing import CliRunner

    from sentinel.cli import app
    return CliRunner().invoke(app, ["report", str(path), *args], catch_exceptions=False)
