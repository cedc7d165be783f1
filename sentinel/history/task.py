"""One unit of work: a (commit, scenario batch) evaluated where an executor runs it.

The task checks its commit out into its own temporary worktree on the machine that runs it
(`runner.run_group` through sentinel/git.py), runs the batch in a worker process, and answers
plain JSON, so a local thread and a Ray cluster carry it the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..spec import Scenario


@dataclass
class Task:
    target: str
    repo: str
    commit: str
    scenarios: list[Scenario] = field(default_factory=list)
    device: str = "cpu"
    timeout: float = 60.0

    @property
    def key(self) -> str:
        return f"{self.target}@{self.commit[:12]}"


def evaluate(task: Task) -> str:
    """Run the batch at the commit; JSON with the target (its load error, if any), the
    environment, and one ScenarioResult per scenario."""
    from ..runner import TargetSpec, run_group
    group = run_group(task.scenarios, TargetSpec(task.target, task.repo, task.commit, task.device, label=task.key),
                      task.timeout)
    return json.dumps({"commit": task.commit, "target": json.loads(group.target.model_dump_json()),
                       "environment": group.environment,
                       "results": [json.loads(r.model_dump_json()) for r in group.results]})
