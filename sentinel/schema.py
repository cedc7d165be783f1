"""The scenario file's JSON Schema, generated per boundary from the declarations.

`sentinel schema > scenario.schema.json`, then `# yaml-language-server: $schema=scenario.schema.json`
at the top of a scenario file: the editor completes and flags the boundary's config keys
and allowed values, its input names and their ranks, and the invariant families.
"""

from __future__ import annotations

import json
from typing import Any

from . import boundaries
from .adapters.options import TRAINER
from .invariants import REGISTRY

SCENARIO_SCHEMA_VERSION = "1.0"  # the scenario layout, versioned apart from the report's
SCENARIO_SCHEMA_ID = f"https://rl-sentinel.dev/schema/scenario-{SCENARIO_SCHEMA_VERSION}.json"
_NUMBER = {"anyOf": [{"type": "number"}, {"enum": ["nan", "inf", "+inf", "-inf"]}]}


def _option(o: boundaries.Option) -> dict[str, Any]:
    if o.kind == "choice":
        s: dict[str, Any] = {"enum": list(o.values)}
    elif o.kind == "bool":
        s = {"type": "boolean"}
    elif o.kind == "number":
        s = {"type": "number"}
    elif o.keys_of:
        s = _config(boundaries.get(o.keys_of))
    else:
        s = {"type": "object"}
    if o.nullable:
        s = {"anyOf": [s, {"type": "null"}]}
    return {**s, "default": o.default, "description": o.doc or o.allowed()}


def _config(b: boundaries.Boundary) -> dict[str, Any]:
    # a trainer option (`trainer:<name>`, spec._check_config): a plain value the target's adapter judges
    trainer = {"type": ["boolean", "integer", "number", "string", "null"],
               "description": "a trainer option the target's adapter declares (option_domains)"}
    return {"type": "object", "additionalProperties": False, "properties": {o.name: _option(o) for o in b.options},
            "patternProperties": {f"^{TRAINER}": trainer}}


def _port(p: boundaries.Port) -> dict[str, Any]:
    row = {"type": "array", "items": {"type": "integer"} if p.dtype == "int" else _NUMBER}
    token = {"type": "array", "items": row}
    plain = {"token": token, "row": row, "scalar": _NUMBER, "vocab": {"type": "array", "items": token}}[p.kind]
    pad = {**_NUMBER, "description": "pads ragged rows to the longest with this value (a derived loss_mask marks the "
                                      "padding); without it, rows of unequal length are an error"}
    typed = {"type": "object", "required": ["values"], "additionalProperties": False, "properties": {
        "values": plain,
        "dtype": {"enum": ["float32", "float64", "int64", "bool"]}, "pad": pad}}
    return {"anyOf": [plain, typed], "description": f"{p.contract()}" + (f": {p.doc}" if p.doc else "")}


def _inputs(b: boundaries.Boundary) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False,
            "properties": {p.name: _port(p) for p in b.inputs},
            "required": [p.name for p in b.inputs if p.required]}


def _contract(b: boundaries.Boundary) -> str:
    """The boundary's ports as `sentinel list boundaries` prints them (the outputs appear nowhere
    else in a scenario file, yet invariants name them)."""
    ports = lambda ps: "; ".join(f"{p.name}: {p.contract()}" for p in ps)  # noqa: E731
    return f"{b.name}: {b.doc} Inputs: {ports(b.inputs)}. Outputs: {ports(b.outputs)}."


def scenario_schema(model_schema: dict[str, Any]) -> dict[str, Any]:
    """`model_schema` (the pydantic ScenarioModel's) narrowed per boundary with if/then."""
    s = dict(model_schema)
    s["$schema"] = "http://json-schema.org/draft-07/schema#"
    s["$id"] = SCENARIO_SCHEMA_ID
    s["properties"]["invariants"]["items"] = {
        "type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
        "properties": {k: c.model_json_schema() for k, c in REGISTRY.items()}}
    s["properties"]["boundary"]["enum"] = sorted(boundaries.BOUNDARIES)
    s["allOf"] = [{"if": {"properties": {"boundary": {"const": b.name}}, "required": ["boundary"]},
                   "then": {"description": _contract(b), "properties": {"config": _config(b), "inputs": _inputs(b)}}}
                  for b in boundaries.BOUNDARIES.values()]
    return s


def scenario_schema_text(model_schema: dict[str, Any]) -> str:
    return json.dumps(scenario_schema(model_schema), indent=2, sort_keys=True) + "\n"
