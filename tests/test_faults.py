"""The fault corpus: every way target code can misbehave ends as an `error` (or a violation
when it answers wrong), never `holds`; misbehaviour around a right answer (a grandchild
holding the result pipe, a thread left running, floods of output) still gets the answer back
in time and leaves no process behind. Real worker processes, one run for the whole corpus.
Then the load: a target whose import or load() blocks, writes on the worker's channel or
signals its process group is an error naming what happened, and the CLI lives to say so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sentinel.runner import TargetSpec, run
from sentinel.spec import load_text

from faulty_adapter import CODES, MODES

TESTS = Path(__file__).resolve().parent
FAULTY = "faulty_adapter:FaultyAdapter"
SHARED = "faulty_adapter:SharedProcessFaultyAdapter"  # the batch path: scenarios share a forked child
AROUND_A_RIGHT_ANSWER = ("grandchild", "thread-left-running", "stdout-flood", "stderr-flood", "chdir", "environ",
                         "raise-in-del", "print", "read-stdin", "setsid-grandchild")
GRANDCHILDREN = ("grandchild", "setsid-grandchild", "setsid-crash", "setsid-hang")  # each writes its pid
# a correct target: unsupported is its answer "no such function here", not a fault
NOT_FAULTS = ("ok", "mutate", "read-state", "read-cwd", "read-environ", "alarm", "slow-ok", "rmcwd", "append-state", "read-list",
              "int-loss",
              "unsupported", *AROUND_A_RIGHT_ANSWER)
FAULTS = [m for m in MODES if m not in NOT_FAULTS]
TIMEOUT = 3.0
# benchmarks/gpu_check.sh runs this corpus with SENTINEL_TEST_DEVICE=cuda on a GPU machine
DEVICE = os.environ.get("SENTINEL_TEST_DEVICE", "cpu")


def scenario(mode: str) -> str:
    return (f"id: {mode}\ntitle: loss_agg in mode {mode}\nboundary: loss_agg\ninputs:\n"
            f"  values:    [[1.0, 2.0, 3.0, {CODES[mode]}]]\n  loss_mask: [[1, 1, 1, 0]]\n"
            "invariants:\n  - close: {output: loss, expected: 2.0}\n")


@pytest.fixture(scope="module", params=[FAULTY, SHARED])
def corpus(tmp_path_factory, request):
    pid_dir = tmp_path_factory.mktemp("faults")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        mp.setenv("FAULTY_PID_DIR", str(pid_dir))
        modes = [*FAULTS, *AROUND_A_RIGHT_ANSWER, "ok"]
        scs = load_text("---\n".join(scenario(m) for m in modes), "faults.yaml")
        t0 = time.monotonic()
        report = run(scs, [TargetSpec(request.param, device=DEVICE)], timeout=TIMEOUT)
        return report, {r.id: r for r in report.results}, pid_dir, time.monotonic() - t0


def test_the_corpus_has_at_least_30_fault_modes():
    assert len(FAULTS) >= 30, FAULTS


@pytest.mark.parametrize("mode", FAULTS)
def test_no_fault_mode_holds(corpus, mode):
    r = corpus[1][mode]
    assert r.verdict in ("error", "violated"), (mode, r.verdict, r.reason)


@pytest.mark.parametrize("mode", AROUND_A_RIGHT_ANSWER)
def test_misbehaviour_around_a_right_answer_still_answers(corpus, mode):
    r = corpus[1][mode]
    assert r.verdict == "holds", (mode, r.reason)  # answered: a held-back answer would be a Timeout error


def test_every_scenario_has_a_result_and_the_last_one_holds(corpus):
    report, by_id, _, _ = corpus
    assert len(report.results) == len(FAULTS) + len(AROUND_A_RIGHT_ANSWER) + 1
    assert by_id["ok"].verdict == "holds"


def _gone(pid: int) -> bool:
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("mode", GRANDCHILDREN)
def test_the_grandchild_holding_the_pipe_is_killed(corpus, mode):
    # setsid-*: the grandchild left the scenario's process group; the worker, a subreaper, kills it
    [pid_file] = corpus[2].glob(f"{mode}.*.pid")
    pid = int(pid_file.read_text())
    assert _gone(pid), f"{mode}: grandchild {pid} still runs"


def test_a_crash_is_a_crash_while_a_setsid_grandchild_holds_the_pipe(corpus):
    r = corpus[1]["setsid-crash"]
    # not a Timeout: the child's exit is seen although the grandchild keeps the pipe open
    assert r.exception_info.type == "Crash", r.reason
    assert "exited with status 7" in r.reason


@pytest.mark.parametrize("mode", ["channel-json", "channel-bytes"])
def test_what_target_code_writes_on_the_channel_is_an_error_naming_the_target(corpus, mode):
    r = corpus[1][mode]
    assert r.verdict == "error" and r.exception_info.type == "ChannelError", r.reason
    assert next(iter(corpus[0].targets)) in r.reason and "result channel" in r.reason


def test_signalling_the_own_process_group_costs_the_scenario_only(corpus):
    for mode in ("killpg", "kill-0"):
        assert corpus[1][mode].exception_info.type == "Crash", corpus[1][mode].reason
    assert corpus[1]["ok"].verdict == "holds"


def test_reading_stdin_cannot_steal_the_workers_jobs(corpus):
    # the forked child reads /dev/null, not the worker's job stream: every later job arrived
    assert corpus[1]["read-stdin"].verdict == "holds"
    assert all(r.verdict != "error" or "no answer" not in r.reason for r in corpus[0].results)


# --- the load: bounded, and the CLI survives whatever the target does there ------------------

LOAD_TIMEOUT = 5.0  # counted from the start of the target's import, not the worker's own start


@pytest.mark.parametrize("target,env,phase", [
    ("faulty_adapter:HangingLoadAdapter", {}, "in HangingLoadAdapter.load()"),
    (FAULTY, {"FAULTY_IMPORT_HANG": "1"}, "while importing the adapter of faulty_adapter:FaultyAdapter"),
])
def test_a_load_that_blocks_is_an_error_naming_the_phase(target, env, phase):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        for k, v in env.items():
            mp.setenv(k, v)
        report = run(load_text(scenario("ok"), "ok.yaml"), [TargetSpec(target)], timeout=TIMEOUT,
                     load_timeout=LOAD_TIMEOUT)
    err = report.targets[target].load_error
    assert err is not None and err.type == "LoadTimeout", err
    assert err.message == f"load timed out after 5 s {phase}"
    assert [r.verdict for r in report.results] == ["error"]
    assert report.exit_code() == 3


# the console script where pip installed one; `python -m sentinel` (the same launch.entry) where the
# package was installed without scripts (`pip install --target`, as benchmarks/gpu_check.sh does)
SCRIPT = Path(sys.executable).with_name("sentinel")
SENTINEL = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "sentinel"]
CLI_CASES = {  # target -> (scenario modes, the verdict-reason text every failing one shows)
    FAULTY: (["channel-json", "channel-bytes", "killpg", "kill-0", "ok"], None),
    "faulty_adapter:HangingLoadAdapter": (["ok"], "LoadTimeout: load timed out after 5 s in HangingLoadAdapter.load()"),
    "faulty_adapter:ChannelAtLoadAdapter": (["ok"], "ChannelError"),
    "faulty_adapter:KillGroupAtLoadAdapter": (["ok"], "status -9"),
    "faulty_adapter:SignalGroupAtLoadAdapter": (["ok"], "status -15"),
}


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="process groups and sessions")
@pytest.mark.parametrize("target", list(CLI_CASES))
def test_the_cli_survives_a_target_that_writes_on_its_channel_signals_its_group_or_hangs(tmp_path, target):
    modes, why = CLI_CASES[target]
    (tmp_path / "s.yaml").write_text("---\n".join(scenario(m) for m in modes))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    # a session of its own: before the fix the target's group signal reached the CLI's group
    load = ["--load-timeout", "5"] if "Hanging" in target else []
    done = subprocess.run([*SENTINEL, "run", str(tmp_path / "s.yaml"), "--target", target, "--timeout", "20", *load,
                           "-o", str(tmp_path / "r.json")], env=env, capture_output=True, text=True, timeout=300,
                          start_new_session=True)
    assert done.returncode == 3, (done.returncode, done.stderr[-3000:])
    assert "failed unexpectedly" not in done.stderr, done.stderr[-3000:]
    results = {r["id"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    for mode in modes:
        if mode == "ok" and why is None:
            assert results[mode]["verdict"] == "holds", results[mode]
        else:
            assert results[mode]["verdict"] == "error", results[mode]
            assert why is None or why in results[mode]["reason"], results[mode]["reason"]
