"""From a finding to an upstream pull request: `sentinel export` writes a bundle (a standalone
validate.py, a unit test in the trainer's style, before / after results, PR.md) and `sentinel
findings` lists the local bug database. `bundle.py` drives it; `record.py` + `select.py` run
the scenario with the trainer's calls recorded (a subprocess); `codegen.py`, `generate.py` and
`templates/` write the files; `runtime.py` is copied into every validate.py; `sides.py` runs
them before and after a fix; `dupes.py` fills the duplicate checks; `refrepo.py` makes a
planted reference bug a repository."""
