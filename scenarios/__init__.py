"""The bundled scenario catalog (YAML files), installed as `sentinel_catalog`."""
