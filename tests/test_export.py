"""`sentinel export`: a planted reference bug exported with its inverse patch (every PR.md
section checked against the real results), the pieces that need no trainer, and slime's KL
aliasing fix (045310b2b) when a slime checkout is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sentinel.export import runtime
from sentinel.export.bundle import Request, _md, export
from sentinel.export.generate import chosen

SLIME = os.environ.get("SENTINEL_SLIME_REPO")


def test_runtime_offending_positions_fail_on_the_bug_and_pass_on_the_fix():
    assert runtime.offending("uniform", [[0.0, 1.0, 0.0]], where=[[1, 1, 1]]) == [[0, 1]]
    assert runtime.offending("uniform", [[0.0, 0.0, 0.0]], where=[[1, 1, 1]]) == []
    assert runtime.offending("finite", [[1.0, np.nan]], where=[[1, 0]]) == []
    assert runtime.offending("finite", [[np.nan, 1.0]], where=[[1, 0]]) == [[0, 0]]
    assert runtime.offending("values", [[1.0, 2.0]], [[1.0, 3.0]]) == [[0, 1]]
    # slime's per-sample lists and packed rows read back in the scenario's layout
    import torch
    rows = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])]
    assert runtime.canonical(rows, "rows", (2, 2)).tolist() == [[1, 2], [3, 4]]
    assert runtime.canonical(torch.cat(rows), "flat", (2, 2)).tolist() == [[1, 2], [3, 4]]


def test_chosen_keeps_only_checks_on_the_first_exported_call():
    call = {"module": "m", "qualname": "f", "line": 1}
    other = {"module": "m", "qualname": "g", "line": 9}
    checks = [{"run": "base", "unsupported": "x"}, {"run": "base", "call": call, "observable": "a"},
              {"run": "base", "call": other, "observable": "b"}, {"run": "base", "call": call, "observable": "c"}]
    assert [c["observable"] for c in chosen(checks)] == ["a", "c"]


def test_markdown_escapes_scenario_text():
    assert _md("<script>x</script> & y") == "&lt;script&gt;x&lt;/script&gt; &amp; y"


@pytest.mark.slow
def test_export_planted_reference_bug_with_its_inverse_patch(tmp_path):
    out = tmp_path / "bundle"
    s = export(Request("opsm-mixed-advantage", "reference", out, plant="opsm-token-level", fix="inverse"))
    before, after = json.loads((out / "before.json").read_text()), json.loads((out / "after.json").read_text())
    assert before["status"] == "reproduced" and before["validate_exit"] == 1
    assert before["observed"]["opsm_mask"] == [[0.0, 1.0, 0.0]]
    assert before["training_signal_effect"]["offending_positions"]["opsm_mask"] == [[0, 1]]
    assert before["test"]["exit"] == 1
    assert after["status"] == "fixed" and after["validate_exit"] == 0 and after["test"]["exit"] == 0
    assert after["observed"]["opsm_mask"] == [[0.0, 0.0, 0.0]]
    # validate.py stands alone: no RL-Sentinel import, and it runs on the generated repository
    src = (out / "validate.py").read_text()
    assert "sentinel" not in src.replace("RL-Sentinel", "")
    proc = subprocess.run([sys.executable, "-I", str(out / "validate.py"), str(out / "reference-repo")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == "reproduced"
    pr = (out / "PR.md").read_text()
    assert len(pr.encode()) < 60_000 and not (out / "ISSUE.md").exists()
    sections = ["Summary", "Concrete Triggering Example", "Reproduction Recipe", "Validation Runner",
                "Observed Output", "Root Cause", "Fix", "Tests And Checks", "Duplicate Checks", "Related fixes"]
    assert [ln[3:] for ln in pr.splitlines() if ln.startswith("## ")] == sections
    body = {name: pr.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0] for name in sections}
    assert "`log_probs` = `[[0.0, 0.0, 0.0]]`" in body["Concrete Triggering Example"]
    assert '"status": "reproduced"' in body["Observed Output"] and '"status": "fixed"' in body["Observed Output"]
    assert "def opsm_token_level(" in body["Root Cause"] and "refimpl/planted.py" in body["Root Cause"]
    patch = (out / "reference-repo").joinpath("refimpl", "ops.py").read_text()
    assert "OPS['opsm_mask'] = opsm_token_level" in patch  # HEAD is planted; the fix removes these lines
    assert "-OPS['opsm_mask'] = opsm_token_level" in body["Fix"]
    assert "exit 1, `reproduced` | failed (exit 1)" in body["Tests And Checks"]
    assert "exit 0, `fixed` | passed (exit 0)" in body["Tests And Checks"]
    assert "1 failed" in body["Tests And Checks"] and "1 passed" in body["Tests And Checks"]
    assert "git log -L ':def opsm_token_level\\b:refimpl/planted.py'" in body["Duplicate Checks"]
    assert "1 commits touched the function" in body["Duplicate Checks"]  # the commit that planted it
    assert s["document"] == "PR.md"


@pytest.mark.slow
@pytest.mark.skipif(not SLIME, reason="SENTINEL_SLIME_REPO (a slime checkout) is not set")
def test_export_slime_kl_aliasing_fixed_at_045310b2b(tmp_path):
    out = tmp_path / "bundle"
    export(Request("ppo-kl-metric-aliasing", "slime", out, repo=SLIME, commit="045310b2b^", fixed_at="045310b2b"))
    before, after = json.loads((out / "before.json").read_text()), json.loads((out / "after.json").read_text())
    assert before["status"] == "reproduced" and before["test"]["exit"] == 1
    assert after["status"] == "fixed" and after["validate_exit"] == 0 and after["test"]["exit"] == 0
    assert Path(out / "PR.md").exists()


def test_findings_reads_run_reports_which_name_scenarios_by_id(tmp_path):
    from sentinel.export.findings import cached_verdicts
    report = {"kind": "run", "targets": {"slime": {"commit": "624b824a898ab0ec"}},
              "results": [{"id": "gae-nan-at-masked-position", "target": "slime", "verdict": "violated"}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    seen = cached_verdicts((str(tmp_path),))
    assert seen["gae-nan-at-masked-position"][0]["verdict"] == "violated"
    assert seen["gae-nan-at-masked-position"][0]["version"] == "624b824a898a"


def test_findings_run_now_needs_a_target():
    from typer.testing import CliRunner
    from sentinel.cli import app
    assert CliRunner().invoke(app, ["findings", "--run"]).exit_code == 2
    assert CliRunner().invoke(app, ["findings", "--repo", "."]).exit_code == 2


@pytest.mark.slow
def test_findings_run_now_on_the_reference(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sentinel", "findings", "--run", "-t", "reference", "--json",
                           "--bundles", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    rows = {r["id"]: r for r in json.loads(proc.stdout)}
    holds = [h.split()[0] for h in rows["opsm-mixed-advantage"]["holds"]]  # "reference <version>"
    assert holds == ["reference"] and rows["opsm-mixed-advantage"]["reproduces"] == []


def test_a_closure_the_trainer_returns_is_replayed_through_its_maker(tmp_path):
    """slime's get_sum_of_sample_mean returns sum_of_token, which the adapter then calls: the
    closure cannot be imported, so the recording ties it to the call that returned it."""
    from sentinel.export.codegen import Writer
    from sentinel.export.generate import _add_call
    from sentinel.export.record import Calls
    trainer, adapter = tmp_path / "toytrainer.py", tmp_path / "toyadapter.py"
    trainer.write_text("def make(n):\n    def inner(x):\n        return x * n\n    return inner\n")
    adapter.write_text("import toytrainer\ndef go():\n    return toytrainer.make(3)(2)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import toyadapter
        with Calls(lambda f: f == str(trainer), lambda f: f == str(adapter), Writer(lambda m: True)) as rec:
            assert toyadapter.go() == 6
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toyadapter", None), sys.modules.pop("toytrainer", None)
    made, inner = rec.calls
    assert inner["factory"] == 0 and inner["qualname"] == "make.<locals>.inner" and "error" not in inner
    calls: list = []
    assert _add_call(calls, inner, "base", {"calls": {"base": rec.calls}}, {}) == 1
    assert calls[0]["function_expr"] == "_import('toytrainer', 'make')" and calls[0]["args"] == {"n": "3"}
    assert calls[1]["function_expr"] == "call_0()[0]" and calls[1]["args"] == {"x": "2"}


@pytest.mark.slow
@pytest.mark.skipif(not SLIME, reason="SENTINEL_SLIME_REPO (a slime checkout) is not set")
@pytest.mark.parametrize("scenario", ["gae-nan-at-masked-position", "masked-token-nan-reaches-loss"])
def test_export_slime_head_reproduces_standalone(tmp_path, scenario):
    """GAE imports megatron.core inside the function (at call time, not at load); the loss
    reducer is a closure get_sum_of_sample_mean returns: both replay in validate.py alone."""
    out = tmp_path / "bundle"
    s = export(Request(scenario, "slime", out, repo=SLIME))
    before = json.loads((out / "before.json").read_text())
    assert s["reproduced"] and before["status"] == "reproduced" and before["validate_exit"] == 1
    assert "offending positions" in before["test"]["output"]
    proc = subprocess.run([sys.executable, "-I", "-B", str(out / "validate.py"), SLIME], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_a_catalog_id_in_a_file_of_another_name_is_found():
    from sentinel.export.bundle import _scenario, find_scenario
    path = find_scenario("ppo-kl-shaped-rewards")
    assert path.name == "ppo-gae-shaping.yaml" and _scenario(path, "ppo-kl-shaped-rewards").id == "ppo-kl-shaped-rewards"


def test_duplicate_check_lists_commits_that_touched_the_function_not_messages_of_the_file(tmp_path):
    """`git log -L`: a commit whose message names the function but edits another one is not a
    candidate duplicate; a commit that edits the method (indented `def`) is, whatever its message."""
    import git
    from sentinel.export.dupes import git_log
    repo = git.Repo.init(tmp_path)
    repo.config_writer().set_value("user", "name", "t").set_value("user", "email", "t@t").release()
    f = tmp_path / "loss.py"
    body = "class Loss:\n    def reduce(self, x):\n        return x.sum()\n\n\ndef other(x):\n    return x\n"
    steps = [(body, "add loss"), (body.replace("return x\n", "return x + 0\n"), "fix reduce NaN"),
             (body.replace("x.sum()", "x.mean()").replace("return x\n", "return x + 0\n"), "refactor"),
             (body.replace("x.sum()", "x.nansum()").replace("return x\n", "return x + 0\n"), "reduce: skip NaN")]
    shas = []
    for text, msg in steps:
        f.write_text(text)
        repo.index.add(["loss.py"])
        shas.append(repo.index.commit(msg).hexsha[:7])
    got = git_log(str(tmp_path), "loss.py", "reduce", ["nan"])
    found = [m["commit"][:7] for m in got["matches"]]
    assert shas[1] not in found  # its message matches, but it edited other()
    assert found == [shas[3], shas[2], shas[0]] and got["scanned"] == 3 and got["matched"] == 1
    assert [m["message_matches"] for m in got["matches"]] == [True, False, False]
    assert "-L" in got["command"] and "def reduce" in got["command"]


def test_validate_py_stands_in_for_libraries_the_trainer_imports_where_they_are_not_installed(tmp_path):
    """A maintainer's torch-only venv has no transformers: the trainer module's own third-party
    imports are real where installed and stand-ins where not, and a name an old commit imports
    that the installed version dropped (verl 6a5852147^: `from transformers import
    AutoModelForVision2Seq`) is stood in on the real module."""
    from types import SimpleNamespace
    from sentinel.adapters.shims import import_with_stubs
    from sentinel.export.generate import environment
    from sentinel.export.record import ImportLog
    from sentinel.export.select import _prelude
    site, repo = tmp_path / "site", tmp_path / "repo"
    (site / "toydep").mkdir(parents=True), repo.mkdir()
    (site / "toydep" / "__init__.py").write_text("VALUE = 3\n")
    (repo / "toytrainer.py").write_text("import toydep\nfrom toydep import VALUE, Gone\n\n\ndef f(x):\n"
                                        "    return x + VALUE\n")
    sys.path[:0] = [str(site), str(repo)]
    stubs: list[str] = []
    try:
        with ImportLog() as imports:
            import_with_stubs("toytrainer", target="toy", own="toytrainer", allowed={"toydep"}, stubs=stubs)
        adapter = SimpleNamespace(root=str(repo), stubs=stubs)
        prelude = _prelude(imports, {"toytrainer"}, lambda f: f.startswith(str(repo) + "/"), adapter)
    finally:
        del sys.path[:2]
        sys.modules.pop("toytrainer", None), sys.modules.pop("toydep", None)
    assert prelude["optional"] == ["toydep"] and prelude["names"] == [["toydep", "Gone"]]
    b = {"title": "t", "scenario_id": "t", "trainer": "toy", "function": "toytrainer.f", "prelude": prelude,
         "runtime": "", "calls": [], "standins": [], "checks_source": "[]", "trigger_source": "{}"}
    head = environment().get_template("validate.py.j2").render(b=b).split("\nimport numpy as np", 1)[0]
    script = tmp_path / "v.py"
    script.write_text(head + "\nimport toytrainer\nprint(type(toytrainer.Gone).__name__)\nprint(toytrainer.f(1))\n")
    clean = subprocess.run([sys.executable, "-I", str(script), str(repo)], capture_output=True, text=True)
    assert clean.stdout.split() == ["_StubMeta"]  # toydep not installed: the module imports, on stand-ins
    assert "TypeError" in clean.stderr  # and a stand-in the function really uses fails loudly
    env = {**os.environ, "PYTHONPATH": str(site)}
    real = subprocess.run([sys.executable, str(script), str(repo)], capture_output=True, text=True, env=env)
    assert real.returncode == 0, real.stderr  # installed: the real toydep (VALUE 3), Gone stood in
    assert real.stdout.split() == ["_StubMeta", "4"]


def test_a_value_the_trainer_stores_on_an_object_is_found_by_attribute():
    """OpenRLHF's compute_advantages_and_returns writes the advantages onto the Experience it is
    given and returns it: the exported check reads `result[0][0].advantages` (before: 'no
    recorded trainer call returns advantages')."""
    import torch
    from types import SimpleNamespace
    from sentinel.export.record import candidates
    adv = torch.tensor([[1.0, float("nan")]])
    exp = SimpleNamespace(advantages=adv, _private=adv, info={"kl": adv})
    paths = dict(candidates(([exp], None), {"experiences": [exp]}))
    assert paths["result[0][0].advantages"] is adv and paths["ARGS['experiences'][0].advantages"] is adv
    assert not any("_private" in p for p in paths)
    obj = SimpleNamespace(advantages=adv)
    assert eval("result[0][0].advantages", {"result": ([obj], None), "ARGS": {}}) is adv  # as validate.py reads it


def test_two_observables_read_from_one_place_keep_it_only_for_the_one_its_key_names():
    """slime before 045310b2b shapes the KL in place: logged_kl and token_rewards are one tensor,
    `ARGS['rollout_data']['kl']`. Reading token_rewards there made the fixed commit still look
    broken (after.json `reproduced`); the place stays with logged_kl, token_rewards is listed
    as not exported."""
    from sentinel.export.select import _one_home
    call = {"module": "slime.loss", "qualname": "compute_advantages_and_returns", "line": 704}
    place = {"run": "base", "call": call, "path": "ARGS['rollout_data']['kl']", "layout": "rows", "shape": [1, 4]}
    checks = [{"family": "close", "observable": "token_rewards", **place},
              {"family": "close", "observable": "logged_kl", **place},
              {"family": "finite", "observable": "advantages", **place, "path": "result[0]"},
              {"family": "gradient", "unsupported": "the gradient family is not exported yet"}]  # no run
    kept = _one_home(checks)
    assert [("call" in c, c.get("observable")) for c in kept] == [(False, "token_rewards"), (True, "logged_kl"),
                                                                  (True, "advantages"), (False, None)]
    assert "also holds logged_kl" in kept[0]["unsupported"] and chosen(kept)[0]["observable"] == "logged_kl"


def test_a_trainer_method_under_a_library_decorator_is_recorded(tmp_path):
    """OpenRLHF's experience maker methods are `@torch.no_grad()`: the adapter calls torch's
    wrapper, which calls the trainer's function (before: not recorded, and the GAE findings
    said 'the adapter composes it from several calls')."""
    from sentinel.export.codegen import Writer
    from sentinel.export.record import Calls
    trainer, adapter = tmp_path / "toymaker.py", tmp_path / "toyadapter2.py"
    trainer.write_text("import torch\n\n\nclass Maker:\n    @torch.no_grad()\n    def gae(self, x):\n"
                       "        return x * 2\n")
    adapter.write_text("import toymaker\n\n\ndef go():\n    m = object.__new__(toymaker.Maker)\n"
                       "    return m.gae(3)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import toyadapter2
        with Calls(lambda f: f == str(trainer), lambda f: f == str(adapter), Writer(lambda m: True)) as rec:
            assert toyadapter2.go() == 6
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toyadapter2", None), sys.modules.pop("toymaker", None)
    assert [c["qualname"] for c in rec.calls] == ["Maker.gae"] and rec.calls[0]["args"]["x"] == "3"
    assert rec.live[0][1] == 6
