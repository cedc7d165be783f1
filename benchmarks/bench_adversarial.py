"""The adversarial corpus in one table: cases tried, handled, none executed, none hung.

Runs the project's hostile-input tests (malformed scenario files, expression escapes and
writes, memory bombs, target faults, hostile text in every format, every accepted `expected`
in every renderer, honest exit codes, interruptions and the sweep) under pytest and reads the
JUnit XML back, so the figures are the tests' own outcomes, not a second implementation:

    python benchmarks/bench_adversarial.py            # the README's reliability figures
    python benchmarks/bench_adversarial.py --slow     # + the interrupted-bisect loop

"handled" is a case whose test passed (refused with file and line, an `error` verdict, text
shown as text, ...); "executed" counts escape cases whose canary file appeared (the tests
assert it never does); "hung" counts cases slower than --hang seconds (each case has its own
bound inside the test: a timeout is a failure, never a pass).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPORA = {  # test file -> what its cases are
    "tests/test_malformed.py": "malformed scenario files, memory bombs, bad reports",
    "tests/test_expr.py": "expression escapes and writes",
    "tests/test_faults.py": "target faults (crash, hang, channel, signals, grandchildren)",
    "tests/test_inert_text.py": "hostile text in every format",
    "tests/test_render_shapes.py": "every accepted expected in every format",
    "tests/test_exit_codes.py": "nothing ran / a side that does not load",
    "tests/test_cleanup.py": "interruptions, kills and the sweep",
    "tests/test_isolation.py": "state and process isolation",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slow", action="store_true", help="also run the slow interruption loop")
    ap.add_argument("--hang", type=float, default=120.0, help="a case slower than this counts as hung (s)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "corpus.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
               "-m", "slow or not slow" if args.slow else "not slow", *CORPORA]
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for case in ET.parse(xml).iter("testcase"):
            file = case.get("classname", "").replace(".", "/") + ".py"
            r = rows[file]
            r["tried"] += 1
            kids = {k.tag for k in case}
            if "skipped" in kids:
                r["skipped"] += 1
            elif not kids & {"failure", "error"}:
                r["handled"] += 1
            if "pwned" in "".join(k.text or "" for k in case):
                r["executed"] += 1
            secs = float(case.get("time", 0))
            r["slowest"] = max(r["slowest"], secs)
            r["hung"] += secs > args.hang
    total = defaultdict(float)
    print(f"{'corpus':<62} {'tried':>6} {'handled':>8} {'skipped':>8} {'executed':>9} {'hung':>5} {'slowest':>8}")
    for file, what in CORPORA.items():
        r = rows.get(file, {})
        for k in ("tried", "handled", "skipped", "executed", "hung"):
            total[k] += r.get(k, 0)
        print(f"{what:<62} {r.get('tried', 0):>6.0f} {r.get('handled', 0):>8.0f} {r.get('skipped', 0):>8.0f} "
              f"{r.get('executed', 0):>9.0f} {r.get('hung', 0):>5.0f} {r.get('slowest', 0):>7.1f}s")
    print(f"{'total':<62} {total['tried']:>6.0f} {total['handled']:>8.0f} {total['skipped']:>8.0f} "
          f"{total['executed']:>9.0f} {total['hung']:>5.0f}")
    print(f"wall {wall:.0f} s, load average {load:.2f} at the start, {os.cpu_count()} cores")
    return 0 if total["handled"] + total["skipped"] == total["tried"] and not total["executed"] else 1


if __name__ == "__main__":
    sys.exit(main())
