"""Code generation: the recording's answer -> validate.py and the trainer-style unit test.

Which checks go into a bundle: the first violated invariant that could be exported decides
the trainer call; every other exported check on that same call joins it (a check on another
call would replay arguments that already carry the first call's wrong values, so a fixed
trainer would still look broken there; the PR lists those invariants as not exported)."""

from __future__ import annotations

import json
import pprint
import re
from pathlib import Path
from typing import Any

import jinja2



TEMPLATES = Path(__file__).parent / "templates"


def environment(autoescape: bool = False) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=autoescape,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined)


def chosen(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The exported checks: those on the first exportable check's call (see the module doc)."""
    ok = [c for c in checks if "call" in c]
    if not ok:
        return []
    first = ok[0]
    key = (first["run"], first["call"]["module"], first["call"]["qualname"], first["call"].get("line"))
    return [c for c in ok if (c["run"], c["call"]["module"], c["call"]["qualname"], c["call"].get("line")) == key]


_KEY = "[]'\""  # around a key in a path: ['loss_mat']


def _arg(path: str) -> str:
    """ARGS['self'].model.log_probs -> self.model.log_probs"""
    return re.sub(r"^ARGS\[['\"]([^'\"]+)['\"]\]", r"\1", path)


def read_at(check: dict[str, Any]) -> str:
    """Where validate.py reads a check's observable, in words (for PR.md)."""
    if check.get("wrt_path"):
        place = read_at({**check, "wrt_path": None})
        return f"the gradient of the sum of {place} with respect to the argument `{_arg(check['wrt_path'])}`"
    path, call = check["path"], check["call"]
    spy = re.match(r"SPY\[(\d+)\]\[(0|1)\](.*)", path)
    if spy:
        place = call["spies"][call["spied"][int(spy[1])]]["name"]
        if spy[2] == "1":
            return f"what `{place}` returns{spy[3] and f' (`{spy[3]}`)'} inside the call"
        return f"the argument `{spy[3].strip(_KEY)}` the call hands `{place}`"
    if path.startswith("ARGS"):
        return f"the argument `{_arg(path)}` after the call"
    if path == "result[0] / result[1]":
        return "what the call returns, its first value over its second (`result[0] / result[1]`: its caller divides)"
    return f"what the call returns (`{path}`)"


def function_expr(call: dict[str, Any], rename: dict[str, Any]) -> tuple[str, str, str]:
    """(source that fetches the function, module, qualname) with the renames applied
    ("module:qualname" -> [module, expression] for a function reached through a table;
    "module" -> module for a package that lives elsewhere in the bundle's repository)."""
    key = f"{call['module']}:{call['qualname']}"
    if key in rename:
        module, expr = rename[key]
        return f"importlib.import_module({module!r}).{expr}", module, expr
    module = rename.get(call["module"], call["module"])
    return f"_import({module!r}, {call['qualname']!r})", module, call["qualname"]


def _rewrite_imports(src: str, rename: dict[str, Any]) -> str:
    for old, new in rename.items():
        if ":" not in old and isinstance(new, str):
            src = src.replace(f"_import({old!r},", f"_import({new!r},")
    return src


def validate_source(rec: dict[str, Any], checks: list[dict[str, Any]], sc_meta: dict[str, Any],
                    trainer: str, rename: dict[str, Any]) -> str:
    calls, table = [], []
    for ch in checks:
        entry = {k: ch[k] for k in ("observable", "kind", "path", "wrt_path", "layout", "shape", "atol", "rtol", "where")
                 if k in ch}
        entry.setdefault("atol", 1e-6)
        entry.setdefault("rtol", 1e-5)
        entry["expected"] = ch.get("expected")
        for which in ("call", "base_call"):
            if which in ch:
                run = ch["run"] if which == "call" else ch.get("base_run")
                # the places the adapter spied, only where the check reads what was seen there
                c = ch[which] if ch["path"].startswith("SPY") else {**ch[which], "spies": []}
                entry[which] = _add_call(calls, c, run, rec, rename, ch.get("call_index"))
        table.append(entry)
    fn = checks[0]["call"]
    _, module, qualname = function_expr(fn, rename)
    b = {"title": sc_meta["title"], "scenario_id": sc_meta["id"], "trainer": trainer,
         "function": f"{module}.{qualname}", "prelude": rec["prelude"], "calls": calls,
         "standins": list((rec.get("standins") or {}).values()),
         "runtime": (Path(__file__).parent / "runtime.py").read_text().split('"""', 2)[2].strip(),
         "checks_source": _py(table), "trigger_source": _py(sc_meta["trigger"])}
    return environment().get_template("validate.py.j2").render(b=b)


def _add_call(calls: list[dict[str, Any]], c: dict[str, Any], run: str, rec: dict[str, Any],
              rename: dict[str, Any], index: int | None = None) -> int:
    """Append one replayed call (after the call that made it, for a closure the trainer
    returned: validate.py calls that maker first, as the adapter did); its index. A call that
    takes a trainer-wide object (`shared`: AReaL's stats tracker, which grpo_loss_fn logs into
    and export() reads) runs after the run's earlier calls, replayed in their order."""
    before = []
    if c.get("shared") and index is not None:
        before = [_add_call(calls, e, run, rec, rename) for e in rec["calls"][run][:index]
                  if "error" not in e and "factory" not in e]
    if "factory" in c:
        k = _add_call(calls, rec["calls"][run][c["factory"]], run, rec, rename)
        expr, module, qualname = f"call_{k}()[0]", c["module"], c["qualname"]
    else:
        expr, module, qualname = function_expr(c, rename)
    renamed = rename.get("function_file") if module != c["module"] else None
    calls.append({"spies": [], **c, "before": before, "function_expr": expr, "module": module, "qualname": qualname,
                  "line": None if renamed else c.get("line"), "run": run,
                  "args": {k: _rewrite_imports(v, rename) for k, v in c["args"].items()},
                  "file": renamed or _rel(c.get("file"), rec.get("root"))})
    return len(calls) - 1


def _py(x: Any) -> str:
    """A JSON-like value as Python source (NaN / infinities as the names nan / inf)."""
    text = pprint.pformat(_nanless(x), width=110, sort_dicts=False)
    return re.sub(r"'__(nan|inf|-inf)__'", lambda m: {"nan": "nan", "inf": "inf", "-inf": "-inf"}[m[1]], text)


def _nanless(x: Any) -> Any:
    if isinstance(x, float) and x != x:
        return "__nan__"
    if isinstance(x, float) and x in (float("inf"), float("-inf")):
        return "__inf__" if x > 0 else "__-inf__"
    if isinstance(x, (list, tuple)):
        return [_nanless(v) for v in x]
    if isinstance(x, dict):
        return {k: _nanless(v) for k, v in x.items()}
    return x


def _rel(file: str | None, root: str | None) -> str | None:
    if not file:
        return None
    if root and file.startswith(root.rstrip("/") + "/"):
        return file[len(root.rstrip("/")) + 1:]
    return Path(file).name


def test_source(sc_meta: dict[str, Any], checks: list[dict[str, Any]], validate: str, trainer_style: dict[str, Any]) -> str:
    """A pytest file for the trainer's tests/ folder: it runs the same call and asserts that no
    check finds an offending position (fails on the bug, passes once fixed)."""
    body = validate.split("\nREPO = ", 1)[1].split("\n", 1)[1]  # the test finds the checkout itself
    body = body.split("\ndef main(", 1)[0]
    return environment().get_template("test.py.j2").render(
        t={"id": sc_meta["id"], "name": re.sub(r"\W", "_", sc_meta["id"]), "title": sc_meta["title"],
           "body": body, "checks": [c["observable"] for c in checks], **trainer_style})


def summary_json(x: Any) -> str:
    return json.dumps(x, indent=2, sort_keys=True, allow_nan=True)


__all__ = ["chosen", "function_expr", "read_at", "summary_json", "test_source", "validate_source"]
