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
