"""sentinel matrix: columns per target@version, cells that cannot run say why."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from sentinel import matrix as mx


def test_parse_target():
    s = mx.parse_target("slime=/src/slime@045310b2b")
    assert (s.name, s.repo, s.commit, s.key) == ("slime", "/src/slime", "045310b2b", "slime@045310b2b")
    assert mx.parse_target("areal").key == "areal"


def test_default_columns_say_why(monkeypatch):
    monkeypatch.delenv("SENTINEL_SLIME_REPO", raising=False)
    cols = {c.key: c for c in mx.default_columns()}
    assert cols["reference"].spec is not None
    assert cols["slime@HEAD"].spec is None and "SENTINEL_SLIME_REPO" in cols["slime@HEAD"].why


def test_matrix_json(tmp_path, monkeypatch):
    monkeypatch.delenv("SENTINEL_SLIME_REPO", raising=False)
    monkeypatch.delenv("SENTINEL_AREAL_REPO", raising=False)
    monkeypatch.delenv("SENTINEL_VERL_REPO", raising=False)
    out = tmp_path / "m.json"
    p = subprocess.run([sys.executable, "-m", "sentinel.cli", "matrix", "--targets", "reference", "--targets", "areal",
                        "--format", "json", "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    table = json.loads(p.stdout)
    assert table["columns"] == ["reference", "areal"]
    cells = {(r["scenario"], r["invariant"]): r["cells"] for r in table["rows"]}
    assert all(c["reference"] == "held" for c in cells.values())
    no_eos = cells[("no-eos-outlier-reward-norm", "unchanged_under")]["areal"]
    if importlib.util.find_spec("areal") is not None:
        assert no_eos == "violated"  # AReaL 1.0.4 normalises before masking no-EOS rows
    else:
        assert no_eos == "error"
    assert json.loads(out.read_text())["extra"]["matrix"] == table
