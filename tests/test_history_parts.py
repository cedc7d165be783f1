"""A history wave leaves no executor slot idle at its end (sentinel/history/scan.py `split`):
the last `n % jobs` commits' scenarios are shared among the slots; every (commit, scenario) is
still evaluated exactly once and a commit counts as one task however many parts it took."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from sentinel.history import Options, Scan
from sentinel.history.cache import Cache
from sentinel.history.executors import Executor
from sentinel.history.scan import split
from sentinel.spec import load_paths

CATALOG = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.mark.parametrize("n, jobs, parts", [
    (13, 2, [1] * 12 + [2]),  # the 13th would run alone on one of two cores
    (12, 2, [1] * 12),
    (5, 4, [1] * 4 + [4]),
    (6, 4, [1] * 4 + [2, 2]),
    (3, 1, [1, 1, 1]),
    (1, 2, [2]),
])
def test_only_the_commits_past_the_last_full_wave_are_split(n, jobs, parts):
    assert [split(n, i, jobs) for i in range(n)] == parts


class Recording(Executor):
    """Answers nothing: each task is lost (Scan._lost makes its undecided results), and kept."""

    name = "recording"

    def __init__(self, jobs: int):
        super().__init__(jobs)
        self.tasks = []

    def submit(self, task, fn=None) -> Future:
        self.tasks.append(task)
        f: Future = Future()
        f.set_exception(RuntimeError("not run"))
        return f


def test_a_split_commit_runs_each_scenario_once_and_counts_once(tmp_path):
    scenarios = load_paths([CATALOG])[:7]
    ex = Recording(2)
    scan = Scan(scenarios, Options(target="reference", repo=str(tmp_path), since=None), ex, Cache(None, "reference", "reference"))
    shas = [f"{i:040x}" for i in range(1, 4)]
    scan.evaluate(shas, scenarios)
    per_commit = {}
    for t in ex.tasks:
        per_commit.setdefault(t.commit, []).append(sorted(sc.id for sc in t.scenarios))
    assert [len(per_commit[s]) for s in shas] == [1, 1, 2]  # 3 commits on 2 slots: the third shared
    for s in shas:
        ids = [i for part in per_commit[s] for i in part]
        assert sorted(ids) == sorted(sc.id for sc in scenarios)  # each scenario once, none lost
    assert all(part for s in shas for part in per_commit[s])
    assert scan.counts["tasks"] == 3
    assert {(s, sc.id) for s in shas for sc in scenarios} == set(scan.results)


class HalfLoading(Recording):
    """The first part of each commit is lost (its worker never loaded); the others load and hold."""

    def submit(self, task, fn=None) -> Future:
        import json

        from sentinel.report import ScenarioResult, Target
        self.tasks.append(task)
        f: Future = Future()
        if sum(t.commit == task.commit for t in self.tasks) == 1:
            f.set_exception(RuntimeError("lost"))
            return f
        key = f"reference@{task.commit[:12]}"
        f.set_result(json.dumps({"commit": task.commit, "environment": {},
                                 "target": json.loads(Target(name="reference", commit=task.commit).model_dump_json()),
                                 "results": [json.loads(ScenarioResult.for_scenario(sc, key, "holds", "").model_dump_json())
                                             for sc in task.scenarios]}))
        return f


def test_a_commit_that_loaded_in_one_part_is_loaded_and_done_after_its_last(tmp_path):
    scenarios = load_paths([CATALOG])[:4]
    ex = HalfLoading(2)
    ticks = []
    scan = Scan(scenarios, Options(target="reference", repo=str(tmp_path), since=None), ex,
                Cache(None, "reference", "reference"), progress=lambda done, total, flips: ticks.append(done))
    sha = "a" * 40
    scan.evaluate([sha], scenarios)  # one commit on two slots: two parts
    assert len(ex.tasks) == 2
    assert scan.targets[sha].load_error is None  # not `not-loaded` for the whole commit
    cells = scan._cells(sha)
    assert sorted(cells.values()) == ["error", "error", "holds", "holds"]
    assert ticks == [1]  # done once, after the last part
