"""The fault corpus: every way target code can misbehave ends as an `error` (or a violation
when it answers wrong), never `holds`; misbehaviour around a right answer (a grandchild
holding the result pipe, a thread left running, floods of output) still gets the answer back
in time and leaves no process behind. Real worker processes, one run for the whole corpus."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sentinel.runner import TargetSpec, run
from sentinel.spec import load_text

from faulty_adapter import CODES, MODES

TESTS = Path(__file__).resolve().parent
FAULTY = "faulty_adapter:FaultyAdapter"
AROUND_A_RIGHT_ANSWER = ("grandchild", "thread-left-running", "stdout-flood", "stderr-flood", "chdir", "environ",
                         "raise-in-del", "print", "read-stdin")
# a correct target: unsupported is its answer "no such function here", not a fault
NOT_FAULTS = ("ok", "mutate", "read-state", "int-loss", "unsupported", *AROUND_A_RIGHT_ANSWER)
FAULTS = [m for m in MODES if m not in NOT_FAULTS]
TIMEOUT = 3.0
# benchmarks/gpu_check.sh runs this corpus with SENTINEL_TEST_DEVICE=cuda on a GPU machine
DEVICE = os.environ.get("SENTINEL_TEST_DEVICE", "cpu")


def scenario(mode: str) -> str:
    return (f"id: {mode}\ntitle: loss_agg in mode {mode}\nboundary: loss_agg\ninputs:\n"
            f"  values:    [[1.0, 2.0, 3.0, {CODES[mode]}]]\n  loss_mask: [[1, 1, 1, 0]]\n"
            "invariants:\n  - close: {output: loss, expected: 2.0}\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    pid_file = tmp_path_factory.mktemp("faults") / "grandchild.pid"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        mp.setenv("FAULTY_PID_FILE", str(pid_file))
        modes = [*FAULTS, *AROUND_A_RIGHT_ANSWER, "ok"]
        scs = load_text("---\n".join(scenario(m) for m in modes), "faults.yaml")
        t0 = time.monotonic()
        report = run(scs, [TargetSpec(FAULTY, device=DEVICE)], timeout=TIMEOUT)
        return report, {r.id: r for r in report.results}, pid_file, time.monotonic() - t0


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


def test_the_grandchild_holding_the_pipe_is_killed(corpus):
    pid = int(corpus[2].read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"grandchild {pid} still runs")


def test_reading_stdin_cannot_steal_the_workers_jobs(corpus):
    # the forked child reads /dev/null, not the worker's job stream: every later job arrived
    assert corpus[1]["read-stdin"].verdict == "holds"
    assert all(r.verdict != "error" or "no answer" not in r.reason for r in corpus[0].results)
