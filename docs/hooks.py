"""mkdocs hook: the reference pages are generated from the code at build time, never copied.

- reference/cli.md: every command of the Typer app, its usage, help and options;
- reference/boundaries.md: every boundary's inputs and outputs (kind, shape, dtype) and options;
- reference/report.md's schema tables: the report JSON Schema's models and fields;
- reference/api.md: the public names of `sentinel` (its lazy `_API` map), rendered by mkdocstrings.

tests/test_docs.py imports this file to check what it writes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import typer

_TAG = re.compile(r"\[(?:cyan|bold|dim|italic|red|green|yellow|/)[a-z ]*\](.*?)\[/[a-z ]*\]", re.S)
_PAGES = ("reference/cli.md", "reference/boundaries.md", "reference/report-schema.md", "reference/api.md")


def _text(help_text: str | None) -> str:
    """Rich markup of a help text as markdown: `[cyan]cmd[/]` becomes `cmd` in code."""
    text = _TAG.sub(lambda m: f"`{m[1]}`", help_text or "")
    return text.replace("\b\n", "").strip()


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _command_md(cmd: Any, path: list[str], parent: Any) -> list[str]:
    """A click command (Typer's own copy of click: duck-typed) and its subcommands as markdown."""
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
    name = " ".join(path)
    out = [f"## `{name}`", "", f"```text\n{name} {' '.join(cmd.collect_usage_pieces(ctx))}\n```", "",
           _text(cmd.help), ""]
    rows = []
    for p in cmd.get_params(ctx):
        if getattr(p, "hidden", False):
            continue
        if p.param_type_name == "argument":
            rows.append(((p.metavar or p.name).upper(), getattr(p, "help", "") or "", "required" if p.required else ""))
        else:
            default = p.default if p.show_default is not False and p.default not in (None, False, ()) else ""
            if hasattr(default, "value"):
                default = default.value
            rows.append((", ".join(p.opts + p.secondary_opts), p.help or "", default))
    if rows:
        out += ["| argument / option | meaning | default |", "|---|---|---|"]
        out += [f"| `{_cell(n)}` | {_cell(_text(h))} | {_cell(d)} |" for n, h, d in rows]
        out.append("")
    if hasattr(cmd, "commands"):
        for sub_name in sorted(cmd.commands):
            sub = cmd.commands[sub_name]
            if not getattr(sub, "hidden", False):
                out += _command_md(sub, [*path, sub_name], ctx)
    return out


def cli_markdown() -> str:
    """Every command of `sentinel`, from the Typer app itself."""
    from sentinel.cli import app

    root = typer.main.get_command(app)
    body = _command_md(root, ["sentinel"], None)
    return "\n".join(["# Command line", "",
                      "Generated from the Typer app at build time: it is `sentinel COMMAND --help`, "
                      "every command on one page.", "", *body[body.index("") + 1:]]) + "\n"


def boundaries_markdown() -> str:
    """Every boundary's ports and options, from sentinel/boundaries.py (what the scenario schema says)."""
    from sentinel import boundaries

    out = ["# Boundaries and the scenario schema", "",
           "Generated from `sentinel/boundaries.py` at build time. Shapes: `B` rows (sequences), `T` tokens, "
           "`V` vocabulary; a `mask` holds only 0 and 1. A scenario's `inputs` are the boundary's inputs; its "
           "invariants name the outputs. The same facts are in `sentinel list boundaries` and in the JSON "
           "Schema `sentinel schema` prints (each boundary's `then` block and each input's description).", ""]
    for b in boundaries.BOUNDARIES.values():
        out += [f"## `{b.name}`", "", b.doc, ""]
        for title, ports in (("inputs", b.inputs), ("outputs", b.outputs)):
            out += [f"| {title[:-1]} | kind | shape | dtype | required | meaning |", "|---|---|---|---|---|---|"]
            for p in ports:
                req = "yes" if p.required else (f"under {p.when()}" if p.required_when else "no")
                out.append(f"| `{p.name}` | {p.kind} | `{p.shape}` | {p.dtype} | {_cell(req)} | {_cell(p.doc)} |")
            out.append("")
        if b.options:
            out += ["| option | default | allowed | meaning |", "|---|---|---|---|"]
            out += [f"| `{o.name}` | `{_cell(json.dumps(o.default))}` | {_cell(o.allowed())} | {_cell(o.doc)} |"
                    for o in b.options]
            out.append("")
        if b.grad_inputs:
            out += [f"Gradients (`grad:OUTPUT/INPUT`) are taken with respect to: {', '.join(b.grad_inputs)}.", ""]
    return "\n".join(out)


def _type(field: dict[str, Any]) -> str:
    if "$ref" in field:
        name = field["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in field:
        return " or ".join(_type(f) for f in field["anyOf"])
    t = field.get("type", "any")
    if t == "array":
        return f"list of {_type(field.get('items', {}))}"
    if t == "object" and "additionalProperties" in field and isinstance(field["additionalProperties"], dict):
        return f"map to {_type(field['additionalProperties'])}"
    if "enum" in field:
        return " / ".join(f"`{v}`" for v in field["enum"])
    return str(t)


def report_schema_markdown() -> str:
    """The report's JSON Schema (sentinel/report.py, `sentinel schema report`) as tables."""
    from sentinel.report import json_schema

    s = json_schema()
    out = ["# Report schema", "",
           f"Generated from the report models at build time (`$id` `{s.get('$id', '')}`); "
           "`sentinel schema report` prints the JSON Schema itself.", ""]
    models = [("Report", s), *sorted(s.get("$defs", {}).items())]
    for name, model in models:
        out += [f"## {name}", ""]
        if model.get("description") and name != "Report":
            out += [" ".join(model["description"].split()), ""]
        required = set(model.get("required", ()))
        out += ["| field | type | required | meaning |", "|---|---|---|---|"]
        for field, spec in model.get("properties", {}).items():
            out.append(f"| `{field}` | {_cell(_type(spec))} | {'yes' if field in required else ''} | "
                       f"{_cell(' '.join(spec.get('description', '').split()))} |")
        out.append("")
    return "\n".join(out)


def api_markdown() -> str:
    """One mkdocstrings block per public name of `sentinel`."""
    import sentinel

    out = ["# Python API", "",
           "The public names, importable as `from sentinel import NAME` (everything else is internal "
           "and may move). Generated from `sentinel._API` at build time.", ""]
    for name, target in sentinel._API.items():
        module, attr = target.split(":")
        out += [f"## `{name}`", "", f"::: {module}.{attr}", "    options:", "      show_root_heading: false", ""]
    return "\n".join(out)


GENERATORS = {"reference/cli.md": cli_markdown, "reference/boundaries.md": boundaries_markdown,
              "reference/report-schema.md": report_schema_markdown, "reference/api.md": api_markdown}


def on_files(files, config):  # noqa: ANN001 - mkdocs' hook signature
    from mkdocs.structure.files import File

    for uri, make in GENERATORS.items():
        files.append(File.generated(config, uri, content=make()))
    return files
