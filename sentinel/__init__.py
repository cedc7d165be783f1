"""RL-Sentinel: declare a training-signal invariant once, check it against any RL trainer.

The public Python API (everything else is internal and may move):

    from sentinel import load_scenarios, run, TargetSpec, Report        # run scenarios
    from sentinel import Adapter, BoundaryResult, FunctionRef, Unsupported, implements  # an adapter
    from sentinel import Precondition, deviation                          # ... its declared conventions
    from sentinel import differential                                     # a differential hunt
    from sentinel import SentinelError                                    # every error's root

Names are imported on first use, so `import sentinel` stays cheap (no torch until an
adapter name is asked for).
"""

from __future__ import annotations

import importlib
from typing import Any

REPORT_SCHEMA_VERSION = "1.5"  # 1.1 added hunt.properties[].progress; 1.2 mutate's reach (reached, survived_*reached); 1.3 mutate.equivalent_claims; 1.4 a mutant's hunted; 1.5 mutate.survivor_examples
# versions `sentinel report` reads: each differs from the current by fields it adds (their defaults fill in)
REPORT_SCHEMA_READS = ("1.0", "1.1", "1.2", "1.3", "1.4", REPORT_SCHEMA_VERSION)

# public name -> module that defines it
_API = {
    "load_scenarios": "sentinel.spec:load_paths",
    "Scenario": "sentinel.spec:Scenario",
    "run": "sentinel.runner:run",
    "TargetSpec": "sentinel.runner:TargetSpec",
    "Report": "sentinel.report:Report",
    "load_report": "sentinel.report:load",
    "SentinelError": "sentinel.errors:SentinelError",
    "SpecError": "sentinel.spec:SpecError",
    "TargetLoadError": "sentinel.errors:TargetLoadError",
    "Unsupported": "sentinel.errors:Unsupported",
    "Adapter": "sentinel.adapters.contract:Adapter",
    "BoundaryResult": "sentinel.adapters.contract:BoundaryResult",
    "FunctionRef": "sentinel.adapters.contract:FunctionRef",
    "implements": "sentinel.adapters.contract:implements",
    "Precondition": "sentinel.adapters.contract:Precondition",
    "deviation": "sentinel.adapters.contract:deviation",
    "differential": "sentinel.hunt.driver.differential:differential",
}
__all__ = ["__version__", *_API]


def _version() -> str:
    """The installed distribution's version: from git tags at build time (pyproject.toml).
    Asked on first use: importlib.metadata (and the email package it imports) would otherwise
    delay every `sentinel` start, the console's before it starts its worker included."""
    from importlib import metadata
    try:
        return metadata.version("rl-sentinel")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = version = _version()
        return version
    if name not in _API:
        raise AttributeError(f"module 'sentinel' has no attribute {name!r}")
    module, attr = _API[name].split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
