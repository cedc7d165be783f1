"""`sentinel history --plot FILE.png|svg`: scenarios x evaluated commits, coloured by verdict
(sentinel/views/palette.py), flips marked, commit dates on the axis.

matplotlib is an optional extra (`pip install 'rl-sentinel[plot]'`), imported only here.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .palette import colour

PLOT_HINT = "pip install 'rl-sentinel[plot]'"
# verdict -> (colour, row in the colour map); not evaluated is white
COLOURS = {v: colour(v) for v in ("not-evaluated", "holds", "violated", "error", "unsupported", "not-loaded")}
FORMATS = (".png", ".svg")


def check(path: Path) -> None:
    """Refuse, before any work, a file type matplotlib is not asked for here or a missing matplotlib."""
    if path.suffix.lower() not in FORMATS:
        raise UsageError(f"--plot writes {' or '.join(FORMATS)}, not {path.suffix or 'a file without suffix'}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"--plot needs matplotlib: {PLOT_HINT}") from None


def plot(view, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    h = view.history
    cols = view.evaluated()
    names = view.scenario_order()
    keys = list(COLOURS)
    grid = [[keys.index(c.verdicts.get(n, "not-evaluated")) for c in cols] for n in names]
    width = min(40.0, 5.5 + 0.18 * max(len(cols), 10))
    height = min(30.0, 1.8 + 0.24 * max(len(names), 3))
    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    ax.imshow(grid, cmap=ListedColormap(list(COLOURS.values())), vmin=0, vmax=len(keys) - 1, aspect="auto",
              interpolation="nearest")
    ax.set_yticks(range(len(names)), names, fontsize=7)
    labels = [f"{c.date[:10]} {c.id[:7]}" + (f" #{c.pr}" if c.pr else "") for c in cols]
    step = max(1, len(cols) // 60)  # at most ~60 labels
    ax.set_xticks(range(0, len(cols), step), labels[::step], rotation=90, fontsize=6)
    ax.set_xticks([x - 0.5 for x in range(1, len(cols))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(names))], minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    at = {c.id: i for i, c in enumerate(cols)}
    for f in h.flips:
        if f.commit in at:
            y = names.index(f.scenario)
            ax.plot(at[f.commit], y, marker="^" if f.change == "fixed" else "v", markersize=9, color="black",
                    markerfacecolor="white" if f.change == "fixed" else "black", markeredgewidth=1.5)
    handles = [Patch(facecolor=v, edgecolor="#bbbbbb", label=k) for k, v in COLOURS.items()]
    handles += [plt.Line2D([], [], marker="^", color="black", markerfacecolor="white", linestyle="",
                           label="fixed here"),
                plt.Line2D([], [], marker="v", color="black", linestyle="", label="regressed here")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    ax.set_title(f"{h.target}  {h.since} .. {h.until}\n{len(cols)} evaluated commits (oldest left), "
                 f"{len(h.flips)} flip(s)", fontsize=9, loc="left")
    ax.set_xlabel("evaluated commit (date, sha), oldest left", fontsize=8)
    ax.set_ylabel("scenario", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
