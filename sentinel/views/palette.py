"""Verdict colours and symbols, once for every format (terminal, markdown, HTML, plots).

A verdict is never carried by colour alone: every tone has a symbol, and every format shows
the symbol with the verdict's word (`label`), so a red-green colour-blind reader, a
monochrome terminal and a screen reader all get it. The colours are the Okabe-Ito
colour-blind-safe set, darkened where white text sits on them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tone:
    symbol: str  # one character, shown beside the word
    style: str  # Rich style (terminal)
    colour: str  # hex (HTML, plots)
    marker: str = "o"  # matplotlib marker (charts): the shape carries the verdict beside the colour


GOOD = Tone("✔", "green", "#00734f", "o")  # bluish green
BAD = Tone("✘", "bold red", "#b84600", "X")  # vermillion
WEAK_BAD = Tone("✘", "red", "#b84600", "X")
BROKEN = Tone("!", "bold magenta", "#a3457c", "D")  # reddish purple: the tool or the target failed, not a verdict
NOT_RUN = Tone("·", "yellow", "#8a6d00", "s")  # dark yellow: nothing decided
EXCLUDED = Tone("⊘", "cyan", "#0066a6", "P")  # blue
CHANGED = Tone("≠", "yellow", "#c77c00", "d")  # orange: different, not judged
GREY = Tone("░", "grey50", "#8c959f", ".")
NEUTRAL = Tone("•", "", "#656d76")

TONES: dict[str, Tone] = {
    # scenario and invariant verdicts (sentinel/verdicts.py)
    "holds": GOOD, "held": GOOD, "violated": BAD, "error": BROKEN, "skipped": NOT_RUN, "unsupported": NOT_RUN,
    "excluded": EXCLUDED,
    # compare verdicts, history flips, differential classifications
    "fixed": GOOD, "holds-both": GOOD, "regressed": BAD, "still-violated": WEAK_BAD, "inconclusive": BROKEN,
    "bug": BAD, "changed": CHANGED, "deviation": CHANGED,
    # hunt property statuses
    "untested": NOT_RUN, "stopped": NOT_RUN,
    # mutants
    "killed": GOOD, "survived": BAD, "equivalent": NOT_RUN,
    # history cells, bisect probes
    "not-loaded": GREY, "not-evaluated": Tone(" ", "", "#ffffff"), "skip": GREY,
    # whole-report words
    "PASS": Tone("✔", "bold green", GOOD.colour), "FAIL": Tone("✘", "bold red", BAD.colour),
    "FOUND": Tone("✘", "bold red", BAD.colour), "NOTHING FOUND": Tone("✔", "bold green", GOOD.colour),
    "NOTHING RAN": Tone("·", "bold yellow", NOT_RUN.colour), "TARGET ERROR": Tone("!", "bold magenta", BROKEN.colour),
}

# worst first, for sorting
SCENARIO_ORDER = {"violated": 0, "error": 1, "unsupported": 2, "excluded": 3, "holds": 4}
COMPARE_ORDER = {"regressed": 0, "inconclusive": 1, "still-violated": 2, "fixed": 3, "holds-both": 4}


def tone(verdict: str) -> Tone:
    return TONES.get(verdict, NEUTRAL)


def style(verdict: str) -> str:
    return tone(verdict).style


def colour(verdict: str) -> str:
    return tone(verdict).colour


def symbol(verdict: str) -> str:
    return tone(verdict).symbol


def marker(verdict: str) -> str:
    return tone(verdict).marker


# lines that carry no verdict (one per hunt property): the Okabe-Ito hues, then again dashed, ...
SERIES = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")


def label(verdict: str) -> str:
    """The symbol and the word: `✔ holds`."""
    return f"{symbol(verdict)} {verdict}"
