"""Target code that raises, exits, segfaults, hangs, mutates module state or prints to stdout
becomes an `error` (or `unsupported`) verdict for that scenario only: never a pass, never a
dead runner, never a leak into the next scenario. Real worker processes, no mocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sentinel.runner import TargetSpec, run
from sentinel.spec import load_text

from faulty_adapter import CODES

TESTS = Path(__file__).resolve().parent
FAULTY = "faulty_adapter:FaultyAdapter"
# the same faults through the batch path: scenarios sharing one forked child
SHARED = "faulty_adapter:SharedProcessFaultyAdapter"
BROKEN = "faulty_adapter:BrokenLoadAdapter"
# benchmarks/gpu_check.sh runs these with SENTINEL_TEST_DEVICE=cuda on a GPU machine
DEVICE = os.environ.get("SENTINEL_TEST_DEVICE", "cpu")


def scenario(sid: str, mode: str) -> str:
    return f"""id: {sid}
title: loss_agg in mode {mode}
boundary: loss_agg
inputs:
  values:    [[1.0, 2.0, 3.0, {CODES[mode]}]]
  loss_mask: [[1, 1, 1, 0]]
invariants:
  - close: {{output: loss, expected: {0.0 if mode == 'read-state' else 2.0}}}
"""


def scenarios(*pairs: tuple[str, str]):
    return load_text("---\n".join(scenario(s, m) for s, m in pairs), "faulty.yaml")


@pytest.fixture(scope="module")
def module_env():
    """The worker subprocess imports `faulty_adapter` from tests/ (it inherits os.environ)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        yield


@pytest.fixture(scope="module", params=[FAULTY, SHARED])
def misbehaving(module_env, request):
    """One worker, every misbehaviour in a row, each followed by a healthy scenario."""
    scs = scenarios(
        ("ok-first", "ok"),
        ("raises", "raise"), ("after-raise", "ok"),
        ("exits", "exit"), ("after-exit", "ok"),
        ("segfaults", "segv"), ("after-segv", "ok"),
        ("hangs", "hang"), ("after-hang", "ok"),
        ("mutates", "mutate"), ("reads-state", "read-state"),
        ("prints", "print"), ("after-print", "ok"),
        ("unsupported", "unsupported"), ("after-unsupported", "ok"),
        ("kills-worker", "kill-parent"), ("after-worker-death", "ok"),
    )
    report = run(scs, [TargetSpec(request.param, device=DEVICE)], timeout=2.0)
    return report, {r.id: r for r in report.results}


def test_every_scenario_gets_a_result_in_order(misbehaving):
    report, by_id = misbehaving
    assert [r.id for r in report.results] == list(by_id)
    assert len(report.results) == 17
    assert next(iter(report.targets.values())).version == "faulty-1"


def test_healthy_scenarios_hold_even_after_a_failure(misbehaving):
    _, by_id = misbehaving
    for sid in ("ok-first", "after-raise", "after-exit", "after-segv", "after-hang", "after-print",
                "after-unsupported", "after-worker-death"):
        assert by_id[sid].verdict == "holds", (sid, by_id[sid].reason)
        assert by_id[sid].invariants[0].observed == pytest.approx(2.0)


def test_exception_is_an_error_with_type_and_message(misbehaving):
    r = misbehaving[1]["raises"]
    assert r.verdict == "error"
    assert r.exception_info.type == "ValueError"
    assert r.exception_info.message == "planted failure: the target raised"
    assert "faulty_adapter.py" in r.exception_info.traceback
    assert r.reason == "ValueError: planted failure: the target raised"
    assert r.invariants == []


def test_sys_exit_is_an_error(misbehaving):
    r = misbehaving[1]["exits"]
    assert r.verdict == "error"
    assert r.exception_info.type == "SystemExit"
    assert "3" in r.exception_info.message


def test_segfault_is_an_error_naming_the_signal(misbehaving):
    r = misbehaving[1]["segfaults"]
    assert r.verdict == "error"
    assert r.exception_info.type == "Crash"
    assert "SIGSEGV" in r.exception_info.message


def test_hang_is_a_timeout_error(misbehaving):
    r = misbehaving[1]["hangs"]
    assert r.verdict == "error"
    assert r.exception_info.type == "Timeout"
    assert "2 s" in r.exception_info.message


def test_worker_death_is_an_error_and_the_worker_restarts(misbehaving):
    r = misbehaving[1]["kills-worker"]
    assert r.verdict == "error"
    assert r.exception_info.type == "WorkerDied"
    assert "exited" in r.exception_info.message


def test_module_state_mutated_by_one_scenario_does_not_leak(misbehaving):
    _, by_id = misbehaving
    # the mutating call itself answers correctly; the next scenario reads the counter
    assert by_id["mutates"].verdict == "holds", by_id["mutates"].reason
    assert by_id["reads-state"].verdict == "holds", by_id["reads-state"].reason
    assert by_id["reads-state"].observations["loss"] == 0.0


@pytest.mark.parametrize("target", [FAULTY, SHARED])
def test_a_folder_or_environment_changed_by_one_scenario_does_not_leak(module_env, target):
    """Scenarios share a forked child (sentinel/worker.py's batch): one that changes the current
    folder or the environment ends it, and the next runs in a fresh fork."""
    report = run(scenarios(("chdir", "chdir"), ("reads-cwd", "read-cwd"), ("environ", "environ"),
                           ("reads-environ", "read-environ")), [TargetSpec(target, device=DEVICE)], timeout=5.0)
    for r in report.results:
        assert r.verdict == "holds", (r.id, r.reason)
        assert r.observations["loss"] == 2.0, r.id


@pytest.mark.parametrize("target", [FAULTY, SHARED])
def test_a_pending_alarm_or_a_deleted_folder_is_not_charged_to_the_next_scenario(module_env, target):
    """A shared child ends after a scenario that left a timer set or whose current folder is gone
    (reading it raises): the next scenario, in a fresh fork, is neither killed by the alarm nor
    charged with the error."""
    report = run(scenarios(("alarm", "alarm"), ("slow", "slow-ok"), ("rmcwd", "rmcwd"), ("after-rmcwd", "ok")),
                 [TargetSpec(target, device=DEVICE)], timeout=5.0)
    for r in report.results:
        assert r.verdict == "holds", (r.id, r.reason)


def test_a_trainer_adapters_scenarios_each_get_a_fork_of_their_own(module_env):
    """State changed in place (a list appended to, a stats tracker) cannot be seen from outside: an
    adapter that does not declare its calls stateless (every trainer's) runs each scenario in a
    fork of its own, so the next one reads it untouched."""
    report = run(scenarios(("appends", "append-state"), ("reads-list", "read-list")),
                 [TargetSpec(FAULTY, device=DEVICE)], timeout=5.0)
    for r in report.results:
        assert r.verdict == "holds", (r.id, r.reason)


def test_stdout_noise_does_not_break_the_protocol(misbehaving):
    r = misbehaving[1]["prints"]
    assert r.verdict == "holds", r.reason
    assert r.observations["loss"] == pytest.approx(2.0)


def test_unsupported_is_not_an_error(misbehaving):
    r = misbehaving[1]["unsupported"]
    assert r.verdict == "unsupported"
    assert "planted: this target has no such loss_agg mode" in r.reason
    assert r.exception_info is None


def test_statistics_and_exit_code_of_the_mixed_run(misbehaving):
    report, by_id = misbehaving
    errors = {sid for sid, r in by_id.items() if r.verdict == "error"}
    assert errors == {"raises", "exits", "segfaults", "hangs", "kills-worker"}
    assert report.statistics.errors == 5
    assert report.statistics.unsupported == 1
    assert not report.success


def test_exit_code_is_3_for_errors_only_and_1_when_a_violation_is_present(misbehaving):
    report, _ = misbehaving
    assert {r.verdict for r in report.results} == {"holds", "error", "unsupported"}
    assert report.exit_code() == 3
    first = report.results[0].model_copy(update={"verdict": "violated"})
    assert report.model_copy(update={"results": [first, *report.results[1:]]}).exit_code() == 1
    healthy = [r for r in report.results if r.verdict in ("holds", "unsupported")]
    assert report.model_copy(update={"results": healthy}).exit_code() == 0


@pytest.fixture(scope="module")
def unloadable(module_env):
    """Two targets that cannot be loaded, run side by side in one call."""
    scs = scenarios(("one", "ok"), ("two", "ok"), ("three", "raise"))
    report = run(scs, [TargetSpec(BROKEN), TargetSpec("no_such_module_xyz:Adapter")], timeout=10.0)
    return report


def test_load_failure_makes_every_scenario_an_error(unloadable):
    results = [r for r in unloadable.results if r.target == BROKEN]
    assert [r.verdict for r in results] == ["error"] * 3
    t = unloadable.targets[BROKEN]
    assert t.load_error is not None and t.load_error.type == "RuntimeError"
    assert "planted load failure" in t.load_error.message
    for r in results:
        assert "could not be loaded" in r.reason and "planted load failure" in r.reason
        assert r.exception_info.type == "RuntimeError"
    assert unloadable.model_copy(update={"results": results}).exit_code() == 3


def test_unknown_adapter_module_is_a_load_error(unloadable):
    results = [r for r in unloadable.results if r.target == "no_such_module_xyz:Adapter"]
    assert [r.verdict for r in results] == ["error"] * 3
    assert all(r.exception_info.type == "TargetLoadError" for r in results)
    assert all("No module named 'no_such_module_xyz'" in r.reason and "PYTHONPATH" in r.reason for r in results)
    assert unloadable.exit_code() == 3


# --- the pre-started worker (sentinel/process.py) ---------------------------------------

def test_a_pre_started_worker_is_adopted_once(monkeypatch):
    """Without the zygote (sentinel/zygote.py; tests/test_zygote.py), a spare is adopted."""
    from sentinel import process
    from sentinel.process import WorkerHandle
    monkeypatch.setenv("SENTINEL_ZYGOTE", "off")
    spare = process.spawn_worker()
    monkeypatch.setattr(process, "_spares", [spare])
    handle = WorkerHandle({"target": "reference", "root": None, "device": "cpu", "timeout": 10, "options": {}})
    try:
        assert handle.proc is spare
        assert handle.receive(60)["event"] == "ready"
        assert process.take() is None  # taken: the next handle spawns its own
    finally:
        handle.close()


def test_console_script_path_runs_and_leaves_no_worker_behind(tmp_path):
    """`python -m sentinel` is the console script's path: it pre-starts a worker for `run`,
    uses it, and on a usage error kills the unused one instead of hanging on it."""
    import subprocess
    import sys
    ok = subprocess.run([sys.executable, "-m", "sentinel", "run", "scenarios/seeds/opsm-mixed-advantage.yaml",
                         "-o", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120,
                        cwd=Path(__file__).resolve().parents[1])
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "sentinel", "run", str(tmp_path / "missing.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "missing.yaml" in bad.stderr


# --- output contracts (issue 10): a wrong-shaped or missing output is an error, never a pass ----

CONTRACT_BREAKS = {
    "shape-7": "shape [7], expected []", "shape-2x4": "shape [2, 4], expected []",
    "list": "is a list, not a tensor", "complex": "complex dtype", "string": "is a str",
    "no-outputs": "'loss' is missing", "extra-output": "'lossy' is not an output",
}


@pytest.fixture(scope="module")
def contract_report(module_env):
    pairs = [(f"contract-{m}", m) for m in [*CONTRACT_BREAKS, "int-loss"]]
    return run(scenarios(*pairs), [TargetSpec(FAULTY, device=DEVICE)], timeout=20)


@pytest.mark.parametrize("mode", list(CONTRACT_BREAKS))
def test_output_contract_breaks_are_errors(contract_report, mode):
    r = next(r for r in contract_report.results if r.id == f"contract-{mode}")
    assert r.verdict == "error", (mode, r.verdict, r.reason)
    assert "ContractError" in r.reason and CONTRACT_BREAKS[mode] in r.reason, r.reason


def test_output_contract_accepts_an_integer_scalar(contract_report):
    r = next(r for r in contract_report.results if r.id == "contract-int-loss")
    assert r.verdict == "holds", r.reason
    assert contract_report.exit_code() == 3
