"""A bisect log in markdown: the first commit with the new verdict, and every revision tried."""

from __future__ import annotations

from ...inert import md_code, md_text


def bisect(view, **_: object) -> str:
    b = view.log
    lines = [f"## RL-Sentinel {view.headline(md_code)}", ""]
    if b.first:
        lines += [f"{md_code(b.first.commit)}: {md_text(b.first.subject)}", ""]
    else:
        lines += ["Candidates: " + ", ".join(md_code(c[:10]) for c in b.candidates), ""]
    lines += [md_text(f"{b.target}: tried {b.tried} revisions of {b.commits_in_range} in range, {b.duration_s:.1f} s"), "",
              "| commit | verdict | subject |", "|---|---|---|"]
    lines += [f"| {md_code(p.commit[:10])} | {md_text(p.verdict)} | {md_text(p.subject)} |" for p in b.probes]
    return "\n".join(lines) + "\n"
