"""pytest plugin: scenario YAML files are test files.

`pytest scenarios/` collects every scenario as a test item; all collected scenarios run
together in one worker per target (the first item to run triggers the batch), so a
hundred scenarios cost one import of the target. A violation fails its item with the
invariant's difference and offending positions; `unsupported` skips it.

Options: --sentinel-target, --sentinel-repo, --sentinel-commit, --sentinel-device,
--sentinel-plant. A scenario's `tags` are pytest markers (`pytest scenarios/ -m seed`); the
tags of the collected files are registered, so `--strict-markers` accepts them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .errors import SentinelError
from .spec import SpecError, load_file

_RESULTS = pytest.StashKey[dict]()
_MARKERS = pytest.StashKey[set]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("rl-sentinel", "RL-Sentinel scenario files")
    g.addoption("--sentinel-target", default="reference", help="target to run scenario files against")
    g.addoption("--sentinel-repo", default=None, help="the target's checkout")
    g.addoption("--sentinel-commit", default=None, help="revision of --sentinel-repo")
    g.addoption("--sentinel-device", default="cpu", help="cpu, cuda or auto")
    g.addoption("--sentinel-plant", default=None, help="reference only: a planted bug")


def _is_scenario_file(path: Path) -> bool:
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        head = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "boundary:" in head and "invariants:" in head


def pytest_collect_file(parent: pytest.Collector, file_path: Path):
    if _is_scenario_file(file_path):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    def collect(self):
        try:
            scenarios = load_file(self.path)
        except SpecError as e:
            raise self.CollectError("\n".join(e.lines())) from None
        for sc in scenarios:
            item = ScenarioItem.from_parent(self, name=sc.id, scenario=sc)
            for tag in sc.tags:
                _register_marker(self.config, tag)
                item.add_marker(tag)
            yield item


def _register_marker(config: pytest.Config, tag: str) -> None:
    if tag not in config.stash.setdefault(_MARKERS, set()):
        config.stash[_MARKERS].add(tag)
        config.addinivalue_line("markers", f"{tag}: scenarios tagged {tag!r} (RL-Sentinel)")


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario, **kw):
        super().__init__(**kw)
        self.scenario = scenario

    def _results(self) -> dict:
        stash = self.config.stash
        if _RESULTS not in stash:
            from .runner import TargetSpec, run
            items = [i for i in self.session.items if isinstance(i, ScenarioItem)]
            opt = self.config.getoption
            spec = TargetSpec(opt("--sentinel-target"), opt("--sentinel-repo"), opt("--sentinel-commit"),
                              opt("--sentinel-device"), opt("--sentinel-plant"))
            report = run([i.scenario for i in items], [spec])
            stash[_RESULTS] = {(r.file, r.id): r for r in report.results}
        return stash[_RESULTS]

    def runtest(self) -> None:
        target = self.config.getoption("--sentinel-target")
        if not self.scenario.applies_to(target):  # not run on this target, so no result
            pytest.skip(f"written for {', '.join(self.scenario.targets)}, not {target}")
        r = self._results()[(self.scenario.file, self.scenario.id)]
        if r.verdict in ("unsupported", "excluded"):
            pytest.skip(r.reason)
        if r.verdict != "holds":
            raise ScenarioFailure(r)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioFailure):
            from .views.plain import failure_lines
            r = excinfo.value.result
            head = f"{r.id} on {r.target}: {r.verdict}" + (f" ({r.reason})" if r.reason else "")
            return "\n".join([head, *failure_lines(r)])
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, self.scenario.line - 1, f"scenario {self.scenario.id}"


class ScenarioFailure(SentinelError):
    def __init__(self, result):
        super().__init__(result.reason)
        self.result = result
