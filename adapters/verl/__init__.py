"""verl adapter (a package: the adapter is in ``adapter.py``)."""

from .adapter import VerlAdapter

__all__ = ["VerlAdapter"]
