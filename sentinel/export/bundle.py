"""`sentinel export`: one finding -> a bundle a maintainer runs without RL-Sentinel.

    DIR/validate.py        standalone runner (torch, numpy, the trainer's checkout)
    DIR/test_<id>.py       a unit test for the trainer's tests/ folder
    DIR/before.json        validate.py's output and the test's outcome, unfixed
    DIR/after.json         the same with the fix (--fix PATCH or --fixed-at REV)
    DIR/PR.md | ISSUE.md   the seeds' sections, filled with the real results
    DIR/bundle.json        all of the above as data (what `sentinel findings` reads)
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import inert, targets
from ..catalog import catalog_path
from ..errors import SentinelError
from ..links import github_url
from ..spec import load_file
from ..zygote import module_command
from . import dupes, generate, refrepo, sides

MAX_BYTES = 60_000
DEFAULT_ROOT = Path("reports") / "export"  # where `sentinel export` and `sentinel findings` look by default


class ExportError(SentinelError):
    """The finding cannot be exported (no violation there, or nothing the bundle can replay)."""


@dataclass
class Request:
    scenario: str
    target: str
    out: Path
    repo: str | None = None
    commit: str | None = None
    fix: str | None = None  # a patch file, or "inverse" for a plant's inverse patch
    fixed_at: str | None = None
    plant: str | None = None


def find_scenario(name: str) -> Path:
    """A YAML file, or a catalog id (scenarios/**/ID.yaml)."""
    p = Path(name)
    if p.is_file():
        return p
    hits = sorted(Path(catalog_path()).rglob(f"{name}.yaml"))
    if hits:
        return hits[0]
    # a catalog id in a file of another name (scenarios/advantages/ppo-gae-shaping.yaml holds
    # ppo-kl-shaped-rewards); the id is matched textually first so only candidate files are parsed
    for f in sorted(Path(catalog_path()).rglob("*.yaml")):
        if name in f.read_text(errors="replace") and any(s.id == name for s in load_file(f)):
            return f
    raise ExportError(f"no scenario file or catalog id {name!r}")


def record(req: Request, path: Path, root: Path | None, options: dict[str, Any], sid: str) -> dict[str, Any]:
    body = {"target": req.target, "root": str(root) if root else None, "options": options,
            "scenario": str(path), "id": sid, "package": targets.get(req.target).package}
    proc = subprocess.run(module_command("sentinel.export.select"), input=json.dumps(body), text=True,
                          capture_output=True, timeout=600)
    try:
        ans = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise ExportError(f"the recording run failed: {(proc.stderr or proc.stdout).strip()[-1500:]}") from None
    if ans.get("status") != "ok":
        raise ExportError(f"the recording run failed: {ans.get('error')}")
    return ans


def _scenario(path: Path, name: str | None = None):
    """The scenario `name` names in its file (a file may hold several), else the file's first."""
    found = load_file(path)
    return next((s for s in found if s.id == name), found[0])


def export(req: Request) -> dict[str, Any]:
    path = find_scenario(req.scenario)
    sc = _scenario(path, req.scenario)
    out = req.out
    out.mkdir(parents=True, exist_ok=True)
    rename: dict[str, Any] = {}
    options: dict[str, Any] = {}
    repo, patch = req.repo, None
    if req.target == "reference":
        if not req.plant:
            raise ExportError("the reference target holds every scenario; export a planted bug with --plant NAME")
        options = {"plant": req.plant}
        if not repo:
            repo = str(out / "reference-repo")
            if not Path(repo, ".git").exists():
                rename = refrepo.build(Path(repo), req.plant)
        rename = rename or _refrename(req.plant)
        rename.setdefault("function_file", f"{refrepo.PACKAGE}/planted.py")
    if req.fix == "inverse":
        patch = refrepo.inverse_patch(Path(repo)) if req.target == "reference" else None
        if patch is None:
            raise ExportError("--fix inverse is the inverse of a reference plant; give a patch file for other targets")
    elif req.fix:
        patch = Path(req.fix).read_text()
    # the recording sees the trainer at the unfixed side (for the reference: the adapter's plant)
    root_repo = None if req.target == "reference" else repo
    with sides.tree(root_repo, req.commit) as (root, commit):
        rec = record(req, path, root, options, sc.id)
    result = rec["result"]
    if result["verdict"] != "violated":
        raise ExportError(f"{sc.id} is {result['verdict']} on {req.target}"
                          f"{' at ' + commit[:12] if commit else ''}: nothing to export ({result.get('reason') or ''})")
    checks = generate.chosen(rec["checks"])
    if not checks:
        why = "; ".join(f"{c['family']}: {c.get('unsupported')}" for c in rec["checks"])
        raise ExportError(f"{sc.id} on {req.target}: no violated invariant can be replayed standalone ({why})")
    meta = {"id": sc.id, "title": sc.title or sc.id,
            "trigger": {"inputs": result.get("inputs"), "config": result.get("config")}}
    trainer = "refimpl" if req.target == "reference" else req.target
    validate = generate.validate_source(rec, checks, meta, trainer, rename)
    test_name = "test_" + re.sub(r"\W", "_", sc.id) + ".py"
    (out / "validate.py").write_text(validate)
    (out / test_name).write_text(generate.test_source(meta, checks, validate, {"file": test_name}))
    before = sides.run_side("before", out, test_name, repo, _rev(req, commit), None)
    after = None
    if patch is not None:
        after = sides.run_side("after", out, test_name, repo, _rev(req, commit), patch)
    elif req.fixed_at:
        after = sides.run_side("after", out, test_name, repo, req.fixed_at, None)
    for side in (before, after):
        if side:
            (out / f"{side.label}.json").write_text(json.dumps({**side.validate, "validate_exit": side.validate_rc,
                                                                "revision": side.revision, "test": {
                                                                    "command": side.test_command,
                                                                    "exit": side.test_rc,
                                                                    "output": side.test_output}},
                                                               indent=2, sort_keys=True) + "\n")
    page = _page(req, sc, rec, checks, validate, test_name, before, after, patch, repo, commit, rename)
    name = "PR.md" if after else "ISSUE.md"
    (out / name).write_text(page)
    summary = {"scenario": sc.id, "file": str(path), "target": req.target, "plant": req.plant, "repo": repo,
               "commit": commit or (before.revision if before else None), "function": checks[0]["call"]["qualname"],
               "before": before.as_dict(), "after": after.as_dict() if after else None, "document": name,
               "checks": [{k: c.get(k) for k in ("family", "observable", "kind", "run")} for c in checks],
               "reproduced": before.validate.get("status") == "reproduced",
               "not_exported": [f"{c['family']}: {c.get('unsupported') or 'on another call'}"
                                for c in rec["checks"] if c not in checks]}
    (out / "bundle.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _rev(req: Request, commit: str | None) -> str | None:
    if req.target == "reference":
        return "HEAD"
    return commit or req.commit


def _refrename(plant: str) -> dict[str, Any]:
    from sentinel import targets
    record = targets.plants()[plant]
    fn = record.code
    return {f"{targets.REFERENCE_PLANTS}:{fn.__name__}": [f"{refrepo.PACKAGE}.ops", f"OPS[{record.replaces!r}]"],
            targets.REFERENCE_OPS: f"{refrepo.PACKAGE}.reference",
            targets.REFERENCE_PLANTS: f"{refrepo.PACKAGE}.planted"}


# --- the document ---------------------------------------------------------------------

def _md(text: Any) -> str:
    """Scenario text for markdown: one line that renders no HTML, link or image (sentinel/inert.py)."""
    return inert.md_text(" ".join(str(text).split()))


def _tensor(value: Any, name: str) -> str:
    text = json.dumps(value)
    if len(text) <= 160:
        return f"- {inert.md_code(name)} = {inert.md_code(text)}"
    return f"<details><summary><code>{inert.html(name)}</code> ({len(text)} characters)</summary>\n\n```json\n{text}\n```\n\n</details>"


def _jsonblock(value: Any) -> str:
    return "```json\n" + json.dumps(value, indent=2, sort_keys=True) + "\n```"


def _source_lines(root: Path | None, rel: str | None, line: int | None, limit: int = 40) -> str:
    """The function's definition as the checkout holds it (its first `limit` lines)."""
    if not root or not rel or not line or not (root / rel).is_file():
        return "(source not available)"
    import ast
    text = (root / rel).read_text(errors="replace")
    lines = text.splitlines()
    end = line + limit
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.lineno + 1:
            end = min(node.end_lineno or end, line + limit)
    return "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(line, min(end, len(lines)) + 1))


def _page(req, sc, rec, checks, validate, test_name, before, after, patch, repo, commit, rename) -> str:
    call = checks[0]["call"]
    _, module, qualname = generate.function_expr(call, rename)
    root = Path(repo) if repo else None
    rel = generate._rel(call.get("file"), rec.get("root"))
    if req.target == "reference":
        rel = f"{refrepo.PACKAGE}/planted.py" if "planted" in module or "ops" in module else f"{refrepo.PACKAGE}/reference.py"
        src_root, line = root, _line_in(root, rel, call["qualname"])
    else:
        src_root, line = (Path(rec["root"]) if rec.get("root") else None), call.get("line")
    with sides.tree(repo, _rev(req, commit)) as (tree, sha):
        source = _source_lines(tree or src_root, rel, line)
        gitlog = dupes.git_log(str(tree) if tree else None, rel, call["qualname"].split(".")[-1],
                               [w for w in sc.id.split("-") if len(w) > 3])
    base = github_url(repo) if repo else None
    base = base or _url_from_registry(req.target)
    permalink = f"{base}/blob/{(sha or commit)}/{rel}#L{line}" if base and (sha or commit) and rel and line else None
    vdict = before.validate or {}
    p = {"title": sc.title or sc.id, "description": sc.description or sc.title or sc.id, "function": f"{module}.{qualname}",
         "trainer": req.target + (f" with plant {req.plant}" if req.plant else ""), "commit": sha or commit,
         "checks": [{**c, "read_at": generate.read_at(c)} for c in checks], "scenario_id": sc.id, "provenance": [str(x) for x in sc.provenance],
         "boundary": sc.boundary, "config_json": json.dumps(rec["result"].get("config")),
         "trigger": rec["result"].get("inputs") or {}, "repo_kind": "checkout" if repo else "installed",
         "test_name": test_name, "stubs": rec["prelude"]["stubs"], "process_group": rec["prelude"].get("process_group"), "optional": rec["prelude"]["optional"],
         "command": _command(req), "validate_source": validate.rstrip(), "validate_lines": validate.count("\n"),
         "before": before.as_dict() | {"validate": vdict}, "after": after.as_dict() if after else None,
         "source_file": rel, "permalink": permalink, "source_lines": source,
         "not_exported": [c for c in rec["checks"] if c not in checks],
         "fix_kind": "patch" if patch is not None else "commit" if after else None, "patch": (patch or "").rstrip(),
         "fix_subject": _subject(repo, req.fixed_at) if req.fixed_at else None,
         "catalog": dupes.catalog_matches(sc.boundary, checks, sc.id), "gitlog": gitlog,
         "flips": dupes.related_flips(sc.id, req.target)}
    env = generate.environment(autoescape=False)
    env.filters.update(md=_md, tensor=_tensor, jsonblock=_jsonblock)
    tpl = env.get_template("PR.md.j2")
    text = tpl.render(p=p)
    if len(text.encode()) > MAX_BYTES:  # the runner is in the bundle; the page keeps the evidence
        p["validate_source"] = f"# {len(validate)} characters: see validate.py in the bundle"
        text = tpl.render(p=p)
    return text


def _line_in(root: Path | None, rel: str, qualname: str) -> int | None:
    if not root or not (root / rel).is_file():
        return None
    for i, ln in enumerate((root / rel).read_text().splitlines(), 1):
        if ln.startswith(f"def {qualname.split('.')[-1]}("):
            return i
    return None


def _url_from_registry(target: str) -> str | None:
    try:
        m = re.search(r"\b([\w-]+/[\w.-]+)\b", targets.get(target).description)
    except Exception:  # noqa: BLE001 - an unknown target has no registry entry
        return None
    return f"https://github.com/{m.group(1)}" if m and target != "reference" else None


def _subject(repo: str | None, rev: str) -> str | None:
    if not repo:
        return None
    proc = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%s", rev], capture_output=True, text=True)
    return proc.stdout.strip() or None


def _command(req: Request) -> str:
    parts = ["sentinel export", req.scenario, "--target", req.target]
    for flag, v in (("--plant", req.plant), ("--repo", "$TRAINER_REPO" if req.repo else None), ("--commit", req.commit),
                    ("--fix", req.fix if req.fix == "inverse" else ("PATCH" if req.fix else None)),
                    ("--fixed-at", req.fixed_at)):
        if v:
            parts += [flag, v]
    return " ".join(parts + ["-o", "DIR"])
