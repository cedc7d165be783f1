"""`sentinel history` on a small git repository built here, whose tiny trainer is fixed at one
known commit and broken again at another, with a commit that does not import in between.
Both executors (local threads, a local Ray) must find both flips at their exact commits and
give the same report; a re-scan runs nothing; a killed scan resumes. One test runs the real
slime fix (SENTINEL_SLIME_REPO)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # local Ray and real git histories: `pytest -m slow` (CI runs it)

from sentinel.errors import GitError
from sentinel.history import Options, Scan, exit_code, walk
from sentinel.history.cache import Cache
from sentinel.history.executors import Executor
from sentinel.report import load
from sentinel.spec import load_paths

from test_compare import BUGGY, FIXED, SCENARIO, git, new_repo

HERE = Path(__file__).parent
TARGET = "history_adapter:HistoryTinyAdapter"
# index -> (subject, content of tinytrainer.py: a string, "touch" (a comment more) or None (README only))
PLAN = {0: ("buggy baseline", BUGGY), 11: ("broken import", BUGGY + "\ndef (:\n"), 12: ("repair import", BUGGY),
        13: ("fix opsm per sequence (#42)", FIXED), 20: ("refactor opsm (#57)", BUGGY.replace("buggy", "again"))}
TOUCH = {3, 6, 9, 15, 18, 21}
N = 24


@pytest.fixture(scope="module")
def trainer(tmp_path_factory) -> dict:
    repo = new_repo(tmp_path_factory.mktemp("history") / "trainer")
    shas, code = [], ""
    for i in range(N):
        if i in PLAN:
            subject, code = PLAN[i]
            (repo / "tinytrainer.py").write_text(code)
        elif i in TOUCH:
            subject, code = f"tune trainer {i}", code + f"# {i}\n"
            (repo / "tinytrainer.py").write_text(code)
        else:
            subject = f"docs {i}"
            (repo / "README.md").write_text(f"docs {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
        shas.append(git(repo, "rev-parse", "HEAD"))
    scenario = repo.parent / "tiny.yaml"
    scenario.write_text(SCENARIO)
    return {"repo": repo, "shas": shas, "scenario": scenario}


@pytest.fixture(autouse=True)
def _worker_finds_adapter(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))


def sentinel(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sentinel.cli", *args], capture_output=True, text=True, **kw)


def history_args(trainer: dict, out: Path, *extra: str) -> list[str]:
    return ["history", str(trainer["scenario"]), "--target", TARGET, "--repo", str(trainer["repo"]),
            "--since", trainer["shas"][0], "-o", str(out), "-j", "2", *extra]


def comparable(path: Path) -> dict:
    """A history report without what may differ between two scans of one range: timings,
    the executor, where the cache was, and temporary worktree paths in tracebacks."""
    d = json.loads(path.read_text())
    for k in ("duration_s", "created_at", "command"):
        d.pop(k)
    h = d["history"]
    for k in ("executor", "jobs", "cache", "cost"):
        h.pop(k)
    for t in d["targets"].values():
        t.pop("import_s")
        if t["load_error"]:
            t["load_error"].pop("traceback")  # names the temporary worktree
    for r in d["results"] + [f[side] for f in h["flips"] for side in ("before", "after")]:
        r.pop("duration_s")
    return d


@pytest.fixture(scope="module")
def local_scan(trainer, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("local")
    out, cache = tmp / "history.json", tmp / "cache"
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    p = sentinel(*history_args(trainer, out, "--cache", str(cache), "--format", "markdown"), env=env)
    return {"proc": p, "out": out, "cache": cache, "env": env}


def test_walk_marks_loss_path_commits_and_samples(trainer):
    commits = walk.walk(trainer["repo"], trainer["shas"][0], "HEAD", ("tinytrainer.py",))
    assert [c.sha for c in commits] == trainer["shas"]
    assert [i for i, c in enumerate(commits) if c.touches] == sorted({0, 11, 12, 13, 20} | TOUCH)
    assert commits[13].pr == 42 and commits[20].pr == 57 and commits[1].pr is None
    assert walk.auto_stride(10) == 2
    assert walk.sample(commits, 2, all_commits=False) == [0, 6, 11, 13, 18, 21]
    assert walk.sample(commits, 5, all_commits=True) == [0, 5, 10, 15, 20, 23]
    assert len(walk.walk(trainer["repo"], trainer["shas"][5], "HEAD", ())) == N - 5
    assert len(walk.walk(trainer["repo"], "2000-01-01", "HEAD", ())) == N  # a date: the first commit on or after it
    with pytest.raises(GitError):
        walk.walk(trainer["repo"], "no-such-rev", "HEAD", ())


@pytest.mark.parametrize("subject, pr", [("fix(ppo): preserve raw KL (#2114)", 2114), ("Merge pull request #88 from a/b", 88),
                                         ("[PR #12] x", 12), ("refs #3 in text", None), ("plain", None)])
def test_pr_number_from_subject(subject, pr):
    assert walk.pr_number(subject) == pr


def test_local_history_bisects_each_flip_to_its_commit(trainer, local_scan):
    p, shas = local_scan["proc"], trainer["shas"]
    assert p.returncode == 1, p.stderr  # regressed in the range and still violated at its end
    rep = load(local_scan["out"])
    h = rep.history
    assert rep.kind == "history" and h.loss_path_files == ["tinytrainer.py"]
    flips = [(f.scenario, f.change, f.commit, f.pr) for f in h.flips]
    assert flips == [("tiny-opsm", "fixed", shas[13], 42), ("tiny-opsm", "regressed", shas[20], 57)]
    fixed, regressed = h.flips
    assert (fixed.before.verdict, fixed.after.verdict) == ("violated", "holds")
    assert fixed.before.target.endswith(shas[12][:12])  # the last commit with the old verdict
    assert fixed.before.invariants[0].observed == [[0.0, 1.0, 0.0]]
    assert fixed.after.invariants[0].observed == [[0.0, 0.0, 0.0]]
    assert (regressed.before.verdict, regressed.after.verdict) == ("holds", "violated")
    roles = {c.id: c for c in h.commits}
    # the commit that does not import is grey, and neither a verdict nor blamed
    broken = roles[shas[11]]
    assert broken.role == "sample" and broken.verdicts == {"tiny-opsm": "not-loaded"} and "SyntaxError" in broken.load_error
    assert all(shas[11] not in (f.commit, *f.candidates) for f in h.flips)
    assert [c.role for c in h.commits].count("skipped") == N - 1 - len({11, 12, 13, 20} | TOUCH)
    assert h.cost.runs < h.cost.exhaustive_runs
    assert "| fixed | `tiny-opsm` |" in p.stdout and "#42" in p.stdout  # the markdown table


def test_ray_executor_gives_the_same_report(trainer, local_scan, tmp_path):
    pytest.importorskip("ray", reason="pip install 'rl-sentinel[ray]'")
    out = tmp_path / "ray.json"
    p = sentinel(*history_args(trainer, out, "--executor", "ray", "--no-cache"), env=local_scan["env"])
    assert p.returncode == 1, p.stderr
    assert load(out).history.executor == "ray"
    assert comparable(out) == comparable(local_scan["out"])


def test_rescan_is_answered_from_the_cache(trainer, local_scan, tmp_path):
    out = tmp_path / "again.json"
    p = sentinel(*history_args(trainer, out, "--cache", str(local_scan["cache"])), env=local_scan["env"])
    assert p.returncode == 1, p.stderr
    cost = load(out).history.cost
    assert cost.tasks == 0 and cost.evaluated == 0 and cost.cached == cost.runs > 0
    assert comparable(out) == comparable(local_scan["out"])
    assert "tiny-opsm" in p.stdout and "F" in p.stdout  # the timeline


def test_killed_scan_resumes_from_the_cache(trainer, local_scan, tmp_path):
    out, cache = tmp_path / "resumed.json", tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-m", "sentinel.cli", *history_args(trainer, out, "--cache", str(cache), "-j", "1")],
                            env=local_scan["env"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and len(list(cache.rglob("*.json"))) < 2:
        time.sleep(0.2)
    assert proc.poll() is None, "the scan finished before it could be killed"
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    done = len(list(cache.rglob("*.json")))
    assert not out.exists() and done >= 2
    p = sentinel(*history_args(trainer, out, "--cache", str(cache)), env=local_scan["env"])
    assert p.returncode == 1, p.stderr
    cost = load(out).history.cost
    assert cost.cached >= done and cost.evaluated == cost.runs - cost.cached
    assert comparable(out) == comparable(local_scan["out"])


class LosingExecutor(Executor):
    """Every task lost, as when a task raises or a Ray node goes away."""

    name = "losing"

    def submit(self, task):
        f = Future()
        f.set_exception(RuntimeError("node lost"))
        return f


def test_a_lost_task_is_undecided_and_not_cached(trainer, tmp_path):
    scenarios = load_paths([trainer["scenario"]])
    opts = Options(target=TARGET, repo=str(trainer["repo"]), since=trainer["shas"][0], loss_path_files=("tinytrainer.py",))
    cache = Cache(tmp_path / "cache", TARGET, TARGET)
    rep = Scan(scenarios, opts, LosingExecutor(1), cache).run()
    evaluated = [c for c in rep.history.commits if c.role == "sample"]
    assert evaluated and all(c.verdicts == {"tiny-opsm": "not-loaded"} and "node lost" in c.load_error for c in evaluated)
    assert rep.history.flips == [] and exit_code(rep) == 3
    assert not list((tmp_path / "cache").rglob("*.json"))


def test_plot_and_refusals(trainer, local_scan, tmp_path):
    pytest.importorskip("matplotlib", reason="pip install 'rl-sentinel[plot]'")
    png = tmp_path / "history.png"
    args = history_args(trainer, tmp_path / "h.json", "--cache", str(local_scan["cache"]))
    p = sentinel(*args, "--plot", str(png), env=local_scan["env"])
    assert p.returncode == 1, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    p = sentinel(*args, "--plot", str(tmp_path / "h.jpg"), env=local_scan["env"])
    assert p.returncode == 2 and ".png or .svg" in p.stderr
    p = sentinel(*args[:-2], "--until", "no-such-rev", env=local_scan["env"])
    assert p.returncode == 2 and "no-such-rev" in p.stderr


def test_hunt_findings_join_the_scan_and_are_bisected(trainer, tmp_path):
    """--hunt: the differential hunt between the two samples around the fix finds where they
    differ; its finding scenario is sampled and bisected to the fix like a catalog scenario."""
    shas, out = trainer["shas"], tmp_path / "h.json"
    p = sentinel("history", str(trainer["scenario"]), "--target", TARGET, "--repo", str(trainer["repo"]),
                 "--since", shas[12], "--until", shas[13], "--hunt", "10", "--no-cache", "-o", str(out), "-j", "1",
                 env={**os.environ, "PYTHONPATH": str(HERE)})
    # exit 1 when a hunted flip is `regressed`: the reach draws (issue 19 item 2: edge relations) may
    # find a second difference at the fix commit beside the one the fix makes (not yet read by hand)
    assert p.returncode in (0, 1), p.stderr
    h = load(out).history
    assert h.hunt.startswith("1 pair(s) of neighbouring samples hunted for 10 s each: ")
    hunted = [f for f in h.flips if f.source == "hunt"]
    assert ("fixed", shas[13]) in [(f.change, f.commit) for f in hunted], h.flips
    assert {f.commit for f in hunted} == {shas[13]}, h.flips  # every hunted flip bisected to the fix
    assert {f.scenario for f in h.flips if f.source == "catalog"} == {"tiny-opsm"}
    written = list((tmp_path / "history-hunt").rglob("*.yaml"))
    # every hunted flip's scenario is written; whether a `changed` one is found beside it in a
    # 10 s search depends on the machine's load, so the subset is not required to be strict
    assert {f.scenario for f in hunted} <= {sc.id for sc in load_paths(written)}


def test_list_targets_shows_loss_path_files():
    p = sentinel("list", "targets", env={**os.environ, "COLUMNS": "250"})
    assert p.returncode == 0, p.stderr
    assert "slime/utils/ppo_utils.py" in p.stdout and "slime/ray/rollout.py" in p.stdout


SLIME = os.environ.get("SENTINEL_SLIME_REPO")


@pytest.mark.skipif(not SLIME, reason="set SENTINEL_SLIME_REPO to a slime checkout")
def test_slime_kl_aliasing_fix_found_by_both_executors(tmp_path):
    pytest.importorskip("ray", reason="pip install 'rl-sentinel[ray]'")
    outs = {}
    for executor in ("local", "ray"):
        outs[executor] = tmp_path / f"{executor}.json"
        p = sentinel("history", "ppo-kl-metric-aliasing", "--target", "slime", "--repo", SLIME, "--since", "045310b2b~30",
                     "--until", "045310b2b", "--executor", executor, "--no-cache", "-o", str(outs[executor]))
        assert p.returncode == 0, p.stderr
    (flip,) = load(outs["local"]).history.flips
    assert flip.scenario == "ppo-kl-metric-aliasing" and flip.change == "fixed" and flip.pr == 2114
    assert flip.commit.startswith("045310b2b")
    assert (flip.before.verdict, flip.after.verdict) == ("violated", "holds")
    logged = next(i for i in flip.before.invariants if i.config.get("close", {}).get("output") == "logged_kl")
    assert logged.verdict == "violated" and logged.positions
    assert comparable(outs["ray"]) == comparable(outs["local"])
