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
