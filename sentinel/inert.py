"""Text from a scenario or a report, made inert for each kind of output: one function per kind.

A scenario file (and a report file handed to `sentinel report`) is data. Its ids, titles,
provenance and messages, and what a target wrote into an exception, must not move or colour
the terminal (ANSI escapes, carriage returns, backspaces, bidirectional overrides), become
markup in a pull-request comment (an `<img>`, a `[link](javascript:...)`, a `![image](url)`)
or in an HTML page, or make JUnit XML ill-formed (XML 1.0 has no control characters). Every
renderer passes such text through the function for its output here, and nowhere else.

- `plain`: control characters shown as escapes (`\\x1b`), the base of every other form;
- `terminal` / `markup`: for a Rich `Text` / a Rich markup string;
- `md_text` / `md_code` / `md_fence` / `md_link`: markdown prose, a code span, a fenced
  block, a link;
- `html`: an HTML text node or attribute value;
- `xml`: JUnit XML text (ElementTree escapes `<` and `&` itself).
"""

from __future__ import annotations

import html as _html
import re
from typing import Any
from urllib.parse import quote

from rich.markup import escape as _rich_escape

# C0 controls but tab and newline, DEL, C1 controls, bidirectional marks and overrides,
# line/paragraph separators, lone surrogates (unencodable) and the XML non-characters.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                      "\ud800-\udfff\ufffe\uffff]")
# markdown punctuation that makes code, a link or an image, or ends a table cell (emphasis is
# left alone: it cannot fetch, link or hide anything, and paths stay readable as `a_b.py`)
_MD_PUNCT = re.compile(r"([\\`\[\]|])")
_URL_SAFE = ":/#?=&%@+,;~.-_!$*'"


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def plain(text: Any, lines: bool = True) -> str:
    """`text` with every control character shown as its escape; newlines and tabs kept when
    `lines`, else made spaces (a one-line field: an id, a title, a table cell)."""
    s = _CONTROL.sub(_visible, str(text))
    return s if lines else s.replace("\n", " ").replace("\t", " ")


def terminal(text: Any, lines: bool = False) -> str:
    """For a Rich `Text` (which never reads markup)."""
    return plain(text, lines)


def markup(text: Any, lines: bool = False) -> str:
    """For a Rich markup string: `[bold]` in the text stays text."""
    return _rich_escape(plain(text, lines))


def md_text(text: Any) -> str:
    """One line of markdown prose that cannot become HTML (`<`, `>`, `&` as entities), a
    link, an image, code or a table cell break (their punctuation escaped)."""
    s = plain(text, lines=False)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCT.sub(r"\\\1", s)


def md_code(text: Any) -> str:
    """A markdown code span showing `text` verbatim: fenced by more backticks than any run in
    it, `|` escaped (a table cell would end there, even inside a code span)."""
    s = plain(text, lines=False).replace("|", "\\|")
    n = max((len(r) for r in re.findall(r"`+", s)), default=0) + 1
    pad = " " if s.startswith("`") or s.endswith("`") or n > 1 else ""
    return "`" * n + pad + s + pad + "`" * n


def md_fence(text: Any, lang: str = "") -> list[str]:
    """A fenced code block (its lines) that no line of `text` can close early."""
    s = plain(text, lines=True)
    n = max(3, max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    return ["`" * n + lang, s, "`" * n]


def md_link(text: Any, url: str | None, code: bool = False) -> str:
    """A markdown link to an http(s) `url` (percent-encoded: no `)` or space ends it early),
    else the text alone; the text as a code span when `code`."""
    shown = md_code(text) if code else md_text(text)
    if not url or not url.startswith(("https://", "http://")):
        return shown
    return f"[{shown}]({quote(plain(url, lines=False), safe=_URL_SAFE)})"


def html(text: Any) -> str:
    """An HTML text node or a quoted attribute value."""
    return _html.escape(plain(text, lines=True), quote=True)


def xml(text: Any) -> str:
    """Text for an XML document (ElementTree escapes the markup characters itself)."""
    return plain(text, lines=True)
