"""The reproduce command a markdown or HTML report shows (views/locations.py: reproduce):
relative to the folder the command ran in, whatever folder the report is rendered from; the
revision that ran pinned; never a path of this machine nor one that does not exist there."""

from __future__ import annotations

import html
import re
import subprocess

from render_helpers import markdown, page
from report_fakes import checkout, compare_report, report, violated

from sentinel.catalog import catalog_path
from sentinel.report import Target

SEED = catalog_path() / "seeds" / "opsm-mixed-advantage.yaml"


def shown(md: str) -> str:
    return md.split("```bash\n", 1)[1].split("\n```", 1)[0]


def test_paths_are_relative_to_where_the_command_ran_and_the_commit_is_pinned(tmp_path, monkeypatch):
    ran_in = tmp_path / "work"
    ran_in.mkdir()
    repo, sha = checkout(ran_in)
    (ran_in / "mine.yaml").write_text("# a scenario\n")
    monkeypatch.chdir(ran_in)  # the command runs here ...
    rep = report([violated()], {"slime": Target(name="slime", repo=str(repo), commit=sha)},
                 command=["sentinel", "run", "mine.yaml", str(SEED), "--repo", str(repo), "--commit", "HEAD~0",
                          "-o", str(ran_in / "out" / "r.json")])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # ... and is rendered from another folder
    text = shown(markdown(rep))
    catalog, line = text.splitlines()
    assert line == f'sentinel run mine.yaml "$catalog"/seeds/opsm-mixed-advantage.yaml --repo src/slime --commit {sha} -o out/r.json'
    assert (ran_in / "mine.yaml").exists() and (ran_in / "src" / "slime").is_dir()
    # the catalog line names the installed catalog, wherever the reader's sentinel is installed
    done = subprocess.run(["bash", "-c", f'{catalog}\ntest -f "$catalog"/seeds/opsm-mixed-advantage.yaml'], cwd=elsewhere)
    assert done.returncode == 0
    assert str(tmp_path) not in text
    # the HTML page shows the same lines
    assert html.unescape(re.search(r'<pre class="reproduce">(.*?)</pre>', page(rep), re.S).group(1)) == text


def test_a_checkout_outside_the_folder_is_its_variable_and_a_head_run_gets_its_commit(tmp_path, monkeypatch):
    repo, sha = checkout(tmp_path / "checkouts")
    ran_in = tmp_path / "project"
    ran_in.mkdir()
    monkeypatch.chdir(ran_in)
    rep = report([violated()], {"slime": Target(name="slime", repo=str(repo), commit=sha)},
                 command=["sentinel", "run", "/opt/nowhere/x.yaml", "--target", "slime", f"--repo={repo}"])
    assert shown(markdown(rep)) == ('sentinel run \'<path to x.yaml>\' --target slime --repo="$SENTINEL_SLIME_REPO" '
                                    f"--commit {sha}")


def test_a_compare_pins_both_revisions_but_the_working_tree():
    rep = compare_report()
    rep.command = ["sentinel", "compare", "--base", "HEAD^", "--head", "HEAD"]
    assert shown(markdown(rep)) == f"sentinel compare --base {'a' * 40} --head {'b' * 40}"
    rep.command = ["sentinel", "compare", "--base", "HEAD^", "--head", "WORKTREE"]
    assert shown(markdown(rep)).endswith("--head WORKTREE")


def test_a_differential_hunt_pins_each_side_and_every_kind_shows_its_command():
    from report_fakes import history_report, hunt_report, mutate_report
    rep = hunt_report()
    rep.targets = {"base:slime": Target(name="slime", commit="a" * 40), "head:slime": Target(name="slime", commit="b" * 40)}
    rep.command = ["sentinel", "hunt", "--target", "slime", "--base", "v1", "--head", "main", "--time", "30"]
    assert shown(markdown(rep)) == f"sentinel hunt --target slime --base {'a' * 40} --head {'b' * 40} --time 30"
    for make in (history_report, mutate_report):
        r = make()
        r.command = ["sentinel", make.__name__.split("_")[0], "--seed", "1"]
        assert shown(markdown(r)) == " ".join(r.command)
        assert f'<pre class="reproduce">{" ".join(r.command)}</pre>' in page(r)
