"""Files `sentinel init` and `sentinel new` write into a user's repository.

Each template is complete and commented, so the written file teaches what to change.
`write` never overwrites a file unless asked (`--force`).
"""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError
from .report import write_atomic

GITHUB_WORKFLOW = ".github/workflows/rl-sentinel.yml"

WORKFLOW = """\
# RL-Sentinel: gate every push and pull request on the scenario catalog.
# Written by `sentinel init ci`; edit freely.
name: rl-sentinel
on: [push, pull_request]

jobs:
  gate:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install RL-Sentinel
        run: |
          # the CPU build of torch first: a bare `torch` pulls a multi-GB CUDA build
          python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
          # where your project gets rl-sentinel from (a wheel, a git URL, an index)
          python -m pip install "${RL_SENTINEL_SPEC:-rl-sentinel}"
          # a trainer target: python -m pip install 'rl-sentinel[verl]' && python -m pip install --no-deps verl==0.9.1
      - name: Gate
        # ./scenarios when the repository has one, else the bundled catalog; add
        # --target NAME --repo . to gate your trainer's own code (sentinel list targets)
        run: sentinel gate --junit sentinel.xml -o reports/sentinel.json
      - name: Job summary
        if: always()
        run: sentinel report reports/sentinel.json --format markdown >> "$GITHUB_STEP_SUMMARY" || true
      - name: Upload the report
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: rl-sentinel-report
          path: |
            reports/sentinel.json
            sentinel.xml
"""


def write(path: Path, text: str, force: bool = False) -> Path:
    """Write `text` to `path` (atomically), refusing to overwrite an existing file unless `force`."""
    if path.exists() and not force:
        raise UsageError(f"{path} exists (use --force to overwrite it)")
    write_atomic(path, text)
    return path
