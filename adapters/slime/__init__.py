"""slime adapter (a package: the adapter is in ``adapter.py``)."""

from .adapter import SlimeAdapter

__all__ = ["SlimeAdapter"]
