"""`sentinel history --plot FILE.png|svg`: the history page's timeline chart
(views/charts.py: history_figure) written to a file.

matplotlib is an optional extra (`pip install 'rl-sentinel[plot]'`), imported only when drawing.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .charts import PLOT_HINT, RC, available, history_figure

FORMATS = (".png", ".svg")


def check(path: Path) -> None:
    """Refuse, before any work, a file type matplotlib is not asked for here or a missing matplotlib."""
    if path.suffix.lower() not in FORMATS:
        raise UsageError(f"--plot writes {' or '.join(FORMATS)}, not {path.suffix or 'a file without suffix'}")
    if not available():
        raise UsageError(f"--plot needs matplotlib: {PLOT_HINT}")


def plot(view, path: Path) -> Path:
    import matplotlib
    import matplotlib.pyplot as plt
    with matplotlib.rc_context(RC):
        fig = history_figure(view)
        if isinstance(fig, str):  # nothing to draw: the reason, as the picture's only text
            note, fig = fig, plt.figure(figsize=(6, 1))
            fig.text(0.02, 0.5, note, va="center")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
