"""The tiny target (tests/tiny_adapter.py) with a declared loss path, for the history tests:
only commits that change `tinytrainer.py` can change a verdict."""

from __future__ import annotations

from tiny_adapter import TinyAdapter


class HistoryTinyAdapter(TinyAdapter):
    name = "history-tiny"
    loss_path_files = ("tinytrainer.py",)
