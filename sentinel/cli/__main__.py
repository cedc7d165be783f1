"""`python -m sentinel.cli`: the console without the pre-started worker (sentinel/launch.py)."""

from . import entry

entry()
