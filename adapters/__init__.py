"""Adapters: one module per target (reference, slime, areal). Installed as `sentinel_adapters`."""
