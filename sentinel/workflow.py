"""The GitHub Actions workflow `sentinel init ci` writes into a user's repository.

It gates the user's own targets on the user's own catalog, on pushes to the default branch
and on pull requests (once each: a pull request's branch is not also built as a push), with
read-only permissions, a timeout, one run per branch at a time and pip's cache keyed on this
file (its install lines). Every report's markdown goes to the job summary, its violations
become `::error` annotations on the scenario lines (`sentinel report --format github`), and
the JSON and JUnit files are uploaded. Where rl-sentinel comes from is `--install`: a wheel
in the repository or a VCS URL; never a package name that an index may not have.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import jinja2

from . import targets as target_registry
from .errors import UsageError

PATH = ".github/workflows/rl-sentinel.yml"
REPORTS = "reports/rl-sentinel"
TORCH = "torch==2.13.0"  # the version the tool is tested with (pyproject's range admits it)
# the current major of each action (checked against their release notes when this was written)
ACTIONS = {"checkout": "actions/checkout@v7", "setup-python": "actions/setup-python@v7",
           "upload-artifact": "actions/upload-artifact@v7"}

TEMPLATE = """\
# RL-Sentinel: gate pushes to [[ branch ]] and every pull request on the scenario catalog.
# Written by `sentinel init ci`; edit freely (`sentinel init ci --help` says what each choice does).
name: rl-sentinel

on:
  push:
    branches:  # the default branch; a pull request runs once, as pull_request
      - [[ branch ]]
  pull_request:

permissions:
  contents: read

concurrency:  # a newer push to the same pull request or branch cancels the run before it
  group: ${{ github.workflow }}-${{ github.event.pull_request.number || github.ref }}
  cancel-in-progress: true

defaults:
  run:
    shell: bash

jobs:
  gate:
    runs-on: ubuntu-latest
    timeout-minutes: [[ timeout_minutes ]]
    steps:
      - uses: [[ actions['checkout'] ]]
      - uses: [[ actions['setup-python'] ]]
        with:
          python-version: "[[ python ]]"
          cache: pip
          cache-dependency-path: [[ path ]]  # the install lines below are the cache key
      - name: Install RL-Sentinel
        id: install
        run: |
          # the CPU build of torch first: a bare `torch` requirement pulls a multi-GB CUDA build
          python -m pip install [[ torch ]] --index-url https://download.pytorch.org/whl/cpu
          python -m pip install [[ install ]]
[%- for line in extra_installs %]
          [[ line ]]
[%- endfor %]
[%- for gate in gates %]
      - name: Gate [[ gate.target ]]
        if: ${{ !cancelled() && steps.install.outcome == 'success' }}
        run: >-
          sentinel gate [[ gate.args ]]
          -o [[ reports ]]/[[ gate.slug ]].json --junit [[ reports ]]/[[ gate.slug ]].xml
[%- endfor %]
      - name: Job summary and annotations
        if: ${{ !cancelled() && steps.install.outcome == 'success' }}
        run: |
          shopt -s nullglob
          for report in [[ reports ]]/*.json; do
            # `sentinel report` exits with the report's own code: only 2 (not a report) fails here
            sentinel report "$report" --format markdown >> "$GITHUB_STEP_SUMMARY" || test $? -ne 2
            # one ::error line per violated invariant, on its line of the scenario file
            sentinel report "$report" --format github || test $? -ne 2
          done
      - name: Upload the reports
        if: ${{ !cancelled() }}
        uses: [[ actions['upload-artifact'] ]]
        with:
          name: rl-sentinel-reports
          path: [[ reports ]]/
          if-no-files-found: ignore
"""


@dataclass
class Gate:
    target: str
    args: str
    slug: str


@dataclass
class Workflow:
    install: str
    targets: list[str] = field(default_factory=lambda: ["reference"])
    repo_path: str | None = None
    paths: list[str] = field(default_factory=list)
    branch: str = "main"
    python: str = f"{sys.version_info.major}.{sys.version_info.minor}"
    timeout_minutes: int = 30

    def text(self) -> str:
        for value in (self.install, self.branch, self.python, *self.targets, *self.paths,
                      *([self.repo_path] if self.repo_path is not None else [])):
            if not value.strip() or re.search(r"[\r\n'\"\\`$]", value):
                raise UsageError(f"{value!r} cannot go into the workflow (empty, or a quote, backslash, $ or newline)")
        infos = [target_registry.get(t) for t in self.targets]  # UsageError for an unknown name
        extras = sorted({i.extra for i in infos if i.extra})
        installs = [f"python -m {i.install}" for i in infos if i.install and not self.repo_path]
        gates = []
        for n, (name, info) in enumerate(zip(self.targets, infos)):
            args = [f"--target '{name}'"]
            if self.repo_path and info.name != "reference":
                args.append(f"--repo '{self.repo_path}'")
            args += [f"--path '{p}'" for p in self.paths]
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or f"target{n}"
            gates.append(Gate(name, " ".join(args), slug if slug not in {g.slug for g in gates} else f"{slug}-{n}"))
        env = jinja2.Environment(variable_start_string="[[", variable_end_string="]]", block_start_string="[%",
                                 block_end_string="%]", keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
        return env.from_string(TEMPLATE).render(
            branch=self.branch, timeout_minutes=self.timeout_minutes, actions=ACTIONS, python=self.python, path=PATH,
            torch=TORCH, install=f"'{with_extras(self.install, extras)}'", extra_installs=installs, gates=gates,
            reports=REPORTS)


def with_extras(spec: str, extras: list[str]) -> str:
    """`spec` asking for `extras` too: a wheel path as `path.whl[x]`, a URL as `rl-sentinel[x] @ URL`,
    a requirement (`rl-sentinel==1.2`, `rl-sentinel @ URL`) with the extras added to its own."""
    if not extras:
        return spec
    if re.match(r"^[a-z][a-z0-9+.-]*://|^git\+", spec):
        return f"rl-sentinel[{','.join(extras)}] @ {spec}"
    m = re.match(r"^(?P<head>[^\[\s@=<>!~;]+)(?:\[(?P<own>[^\]]*)\])?(?P<rest>.*)$", spec)
    if not m:
        raise UsageError(f"--install {spec!r} is neither a wheel path, a URL nor a requirement")
    own = [e.strip() for e in (m["own"] or "").split(",") if e.strip()]
    return f"{m['head']}[{','.join(sorted(set(own) | set(extras)))}]{m['rest']}"


def check_install(spec: str, root: Path) -> str:
    """`spec` as the workflow can use it from a checkout of `root`, or UsageError saying why not."""
    if spec.endswith(".whl") or "/" in spec and not re.match(r"^[a-z][a-z0-9+.-]*:", spec) and "@" not in spec:
        path = Path(spec.split("[")[0])
        if path.is_absolute():
            raise UsageError(f"--install {spec}: an absolute path exists on this machine only; give the wheel's "
                             "path inside the repository (CI checks out the repository, nothing else)")
        if not (root / path).is_file():
            raise UsageError(f"--install {spec}: no such file in {root}; commit the wheel there first "
                             "(python -m build --wheel in rl-sentinel's checkout writes it to dist/)")
    return spec


def default_install() -> str:
    """Where this rl-sentinel came from, as CI can install it again (PEP 610's direct_url.json):
    a VCS checkout pinned to its commit, a URL, or the index's version. A local folder or file
    is no place CI can reach: UsageError asking for --install."""
    try:
        dist = metadata.distribution("rl-sentinel")
    except metadata.PackageNotFoundError:
        raise UsageError("rl-sentinel is not installed as a package here: give --install SPEC") from None
    raw = dist.read_text("direct_url.json")
    if not raw:
        return f"rl-sentinel=={dist.version}"  # from an index: the same version resolves there
    direct = json.loads(raw)
    url = direct.get("url", "")
    if vcs := direct.get("vcs_info"):
        return f"{vcs['vcs']}+{url}@{vcs['commit_id']}"
    if not url.startswith("file:"):
        return url
    raise UsageError(f"this rl-sentinel was installed from {url.removeprefix('file://')}, which CI cannot reach: "
                     "give --install a wheel committed to your repository (--install vendor/rl_sentinel-X-py3-none-any.whl) "
                     "or a VCS URL (--install git+https://HOST/ORG/rl-sentinel@TAG)")


def default_branch(root: Path) -> str:
    """origin's HEAD branch, else git's init.defaultBranch, else main."""
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    origin = git("symbolic-ref", "--short", "refs/remotes/origin/HEAD")
    return origin.split("/", 1)[1] if "/" in origin else git("config", "init.defaultBranch") or "main"
