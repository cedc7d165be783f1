"""Small hand-made reports for the renderer tests (markdown, HTML): no target runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sentinel.report import (Comparison, Environment, ExceptionInfo, FunctionInfo, HistoryCommit, HistoryCost, HistoryFlip,
                             HistorySummary, HuntFinding, HuntProperty, HuntSample, HuntSummary, InvariantResult, MutantRecord,
                             MutateCount, MutateSummary, Report, ScenarioResult, Target, statistics)

MASKED_GRID = [[0.0, 1.0, 0.5], [1.0, -1.0, 0.25]]
LOSS_MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def checkout(tmp_path: Path, remote: str = "git@github.com:THUDM/slime.git") -> tuple[Path, str]:
    """A git checkout under tmp_path with one commit and `remote` as origin (never contacted)."""
    repo = tmp_path / "src" / "slime"
    (repo / "slime" / "utils").mkdir(parents=True)
    (repo / "slime" / "utils" / "ppo_utils.py").write_text("def compute_opsm_mask():\n    pass\n")
    git(repo.parent, "init", "-q", "slime")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "opsm")
    git(repo, "remote", "add", "origin", remote)
    return repo, git(repo, "rev-parse", "HEAD")


def violated(sid: str = "opsm-masked", *, target: str = "slime", file: str = "scenarios/x.yaml",
             function: FunctionInfo | None = None, title: str = "OPSM rejects whole sequences") -> ScenarioResult:
    """An opsm_mask violation on a [2, 3] batch whose last token of row 0 is masked."""
    grid = InvariantResult(family="equals", config={"equals": {"output": "opsm_mask", "expected": [[0, 0, 0], [1, 1, 1]]}},
                           verdict="violated", message="opsm_mask differs from expected at 2 position(s)",
                           observed=MASKED_GRID, expected=[[0.0, 0.0, 0.5], [1.0, 1.0, 0.25]],
                           positions=[[0, 1], [1, 1]])
    scalar = InvariantResult(family="close", config={"close": {"output": "reduced_policy_loss", "expected": 0.0}},
                             verdict="violated", message="reduced_policy_loss differs from expected at 1 position(s)",
                             observed=-0.0306, expected=0.0, difference=-0.0306, positions=[[]])
    held = InvariantResult(family="finite", config={"finite": {}}, verdict="held")
    return ScenarioResult(id=sid, title=title, boundary="opsm_mask", file=file, target=target, verdict="violated",
                          reason="equals: opsm_mask differs", invariants=[grid, scalar, held],
                          inputs={"log_probs": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], "loss_mask": LOSS_MASK},
                          config={"opsm_delta": 0.1}, observations={"opsm_mask": MASKED_GRID, "reduced_policy_loss": -0.0306},
                          function=function, provenance=["https://github.com/THUDM/slime/pull/1917"])


def holds(sid: str, target: str = "slime") -> ScenarioResult:
    return ScenarioResult(id=sid, title=f"{sid} holds", boundary="kl", file="scenarios/kl.yaml", target=target,
                          verdict="holds", invariants=[InvariantResult(family="finite", config={"finite": {}}, verdict="held")])


def errored(sid: str, message: str, target: str = "slime") -> ScenarioResult:
    return ScenarioResult(id=sid, title="the target raises", boundary="loss_agg", file="scenarios/e.yaml", target=target,
                          verdict="error", reason=message, exception_info=ExceptionInfo(type="RuntimeError", message=message,
                                                                                        traceback=f"File \"{message}\""))


def report(results: list[ScenarioResult], targets: dict[str, Target] | None = None, **fields) -> Report:
    targets = targets or {"slime": Target(name="slime")}
    fields.setdefault("success", not any(r.verdict in ("violated", "error") for r in results))
    return Report(created_at="2026-01-01T00:00:00Z",
                  duration_s=1.0, environment=Environment(torch="2.13.0"), targets=targets, results=results,
                  statistics=statistics(results), **fields)


def compare_report() -> Report:
    results = [violated("opsm-masked", target="base"), holds("opsm-masked", "head"), holds("kl-k1", "base"),
               holds("kl-k1", "head"), holds("kl-k2", "base"), violated("kl-k2", target="head")]
    comparisons = [Comparison(id="opsm-masked", verdict="fixed", base="violated", head="holds"),
                   Comparison(id="kl-k1", verdict="holds-both", base="holds", head="holds"),
                   Comparison(id="kl-k2", verdict="regressed", base="holds", head="violated")]
    targets = {"base": Target(name="slime", commit="a" * 40, subject="buggy"),
               "head": Target(name="slime", commit="b" * 40, subject="fixed")}
    return report(results, targets, kind="compare", comparisons=comparisons)


def hunt_report(progress: bool = False) -> Report:
    """Two properties; with `progress`, each has its samples over the hunt (schema 1.1): the
    OPSM property finds its bug in its second round, kl.finite waits for a worker between rounds."""
    samples = {"opsm_mask.sequence_uniform": [(0.0, 0, 0), (0.5, 10, 0), (1.2, 10, 0), (1.6, 18, 1)],
               "kl.finite": [(0.0, 0, 0), (0.6, 100, 0), (0.6, 100, 0), (1.5, 200, 0), (2.0, 200, 0), (3.3, 300, 0)]}
    progress_of = lambda name: [HuntSample(s=t, examples=n, findings=f) for t, n, f in samples[name]] if progress else []  # noqa: E731
    props = [HuntProperty(property="opsm_mask.sequence_uniform", boundary="opsm_mask", family="sequence_uniform",
                          status="violated", examples=18, duration_s=0.9, rounds=2,
                          progress=progress_of("opsm_mask.sequence_uniform")),
             HuntProperty(property="kl.finite", boundary="kl", family="finite", status="holds", examples=300,
                          duration_s=2.5, rounds=4, progress=progress_of("kl.finite"))]
    finding = HuntFinding(property="opsm_mask.sequence_uniform", boundary="opsm_mask", family="sequence_uniform",
                          scenario_id="hunt-opsm", rows=1, tokens=2, examples_to_first=18, time_to_first_s=3.2,
                          hunt_elapsed_s=1.55 if progress else None,
                          message="opsm_mask differs within a sequence at 1 valid token(s)")
    summary = HuntSummary(seed=0, max_examples=300, time_budget_s=10, examples=318, search_s=3.4, examples_per_s=93.5,
                          properties=props, findings=[finding])
    return report([violated("opsm_mask.sequence_uniform")], kind="hunt", hunt=summary)


def gate_report() -> Report:
    return report([violated(), holds("kl-k1")], command=["sentinel", "gate", "--plant", "opsm-token-level"])


def matrix_report() -> Report:
    table = {"columns": ["reference", "slime@abc"],
             "rows": [{"scenario": "opsm-masked", "invariant": "equals", "cells": {"reference": "held", "slime@abc": "violated"}},
                      {"scenario": "kl-k1", "invariant": "finite", "cells": {"reference": "held",
                                                                            "slime@abc": "no checkout (set SENTINEL_SLIME_REPO)"}}]}
    return report([violated(target="slime@abc"), holds("kl-k1", "reference")],
                  {"reference": Target(name="reference"), "slime@abc": Target(name="slime")}, extra={"matrix": table})


def history_report() -> Report:
    """Five sampled commits of slime: opsm-masked is fixed at c3 (PR #42), kl-k1 holds throughout."""
    shas = [f"{i}" * 40 for i in range(1, 6)]
    commits = [HistoryCommit(id=s, date=f"2026-01-0{i + 1}T00:00:00Z", subject=f"commit {i + 1}", touches_loss_path=True,
                             role="sample", verdicts={"opsm-masked": "violated" if i < 2 else "holds", "kl-k1": "holds"})
               for i, s in enumerate(shas)]
    commits[1] = commits[1].model_copy(update={"verdicts": {}, "load_error": "SyntaxError: bad"})
    commits[1].verdicts.update({"opsm-masked": "not-loaded", "kl-k1": "not-loaded"})
    flip = HistoryFlip(scenario="opsm-masked", change="fixed", commit=shas[2], subject="fix opsm (#42)", pr=42,
                       date="2026-01-03T00:00:00Z", between=[shas[0], shas[2]], tried=3,
                       before=violated(target=f"slime@{shas[0][:12]}"), after=holds("opsm-masked", f"slime@{shas[2][:12]}"))
    cost = HistoryCost(commits_in_range=5, skipped_no_loss_path=0, samples=5, probes=0, runs=10, exhaustive_runs=10,
                       evaluated=10, cached=0, tasks=5, duration_s=2.0)
    summary = HistorySummary(target="slime", repo="src/slime", since=shas[0][:10], until=shas[-1][:10], stride=1,
                             executor="local", jobs=1, scenarios=["opsm-masked", "kl-k1"], commits=commits, flips=[flip],
                             cost=cost)
    return report([holds("opsm-masked"), holds("kl-k1")], kind="history", history=summary)


def mutate_report() -> Report:
    survivor = MutantRecord(id="f#drop-mask@k1", function="m:f", operator="drop-mask", key="k1", position="m.py:3:4",
                            diff="-    x = a * mask\n+    x = a\n", verdict="survived", scenarios=4,
                            examples={"kl": 100, "gae": 8}, hunted=["kl"])
    killed = MutantRecord(id="f#sum-mean@k2", function="m:f", operator="sum-mean", key="k2", position="m.py:5:4",
                          diff="-sum\n+mean\n", verdict="killed", killed_by="kl-k1", stage="catalog")
    count = MutateCount(mutants=2, killed=1, survived=1, score=0.5)
    summary = MutateSummary(target="slime", commit="abc", budget_s=2, seed=0, equivalent_examples=100, totals=count,
                            by_boundary={"kl": count}, by_operator={"drop-mask": MutateCount(mutants=1, survived=1, score=0.0),
                                                                   "sum-mean": MutateCount(mutants=1, killed=1, score=1.0)},
                            functions={"m:f": ["kl"]}, mutants=[survivor, killed])
    return report([], kind="mutate", success=False, mutate=summary)


def bisect_log(found: bool = True) -> dict:
    """What `sentinel bisect -o` writes (sentinel/compare.py: bisect_report)."""
    probes = [{"commit": "a" * 40, "subject": "buggy", "verdict": "violated", "reason": ""},
              {"commit": "b" * 40, "subject": "fix opsm", "verdict": "holds", "reason": ""}]
    return {"kind": "bisect", "scenario": "opsm-masked", "target": "slime", "repo": "src/slime",
            "created_at": "2026-01-01T00:00:00+00:00", "good_verdict": "violated", "bad_verdict": "holds",
            "first": probes[1] if found else None, "candidates": [] if found else ["c" * 40, "d" * 40],
            "commits_in_range": 8, "tried": 2, "probes": probes, "duration_s": 1.5, "command": ["sentinel", "bisect"]}
