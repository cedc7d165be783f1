"""RL-Sentinel: declare a training-signal invariant once, check it against any RL trainer."""

__version__ = "0.1.0"
REPORT_SCHEMA_VERSION = "1.0"
