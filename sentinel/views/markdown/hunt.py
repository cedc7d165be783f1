"""A hunt in markdown: the verdict in one line, each finding (its minimal trigger's size,
signature and written scenario; a differential finding with both sides), the properties
that decided nothing or erred, then every property collapsed."""

from __future__ import annotations

from ...inert import md_code, md_text
from ..locations import Locations
from .scenarios import reproduce


def _signature(sig) -> str:
    cfg = ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in sig.config.items())
    return f"{sig.property} · {sig.observable or '-'} · {{{cfg}}} · {'+'.join(sig.position) or 'any position'}"


def hunt(view, **_: object) -> str:
    report, h = view.report, view.hunt
    loc = Locations(report)
    lines = [f"## RL-Sentinel {md_text(view.headline())}", "",
             md_text(f"{', '.join(report.targets)}: {h.examples} examples in {h.search_s:.1f} s "
                     f"({h.examples_per_s:.0f}/s), seed {h.seed}, {len(h.properties)} properties"), ""]
    if h.findings:
        lines += [f"### Findings ({len(h.findings)})", ""]
        for f in h.findings:
            shape = f"{f.rows} row(s) x {f.tokens} token(s)" if f.tokens else f"{f.rows} row(s)"
            kind = f"**{md_text(f.classification)}** " if f.classification else ""
            lines.append(f"- {kind}{md_code(f.property)}: {md_text(loc.scrub(f.message))} (minimal trigger {shape}, "
                         f"after {f.examples_to_first} examples / {f.time_to_first_s:.2f} s)")
            if f.classification and f.base and f.head:
                for side, s in (("base", f.base), ("head", f.head)):
                    lines.append(f"  - {side} {md_code(s.target)}: violates {md_text(', '.join(s.violates) or 'nothing checked')}")
            if f.signature:
                lines.append(f"  - signature: {md_code(_signature(f.signature))}")
            if f.file or f.scenario_id:
                lines.append(f"  - scenario: {md_code(loc.relative(f.file) or f.scenario_id)}"
                             + (" (**did not reproduce**)" if f.reproduced is False else ""))
        lines.append("")
    odd = [p for p in h.properties if p.status in ("error", "untested", "stopped") or p.errors]
    if odd:
        lines += ["| property | status | examples | why |", "|---|---|---:|---|"]
        lines += [f"| {md_code(p.property)} | {p.status} | {p.examples} | {md_text(loc.scrub(p.reason)[:200])} |" for p in odd]
        lines.append("")
    lines += [f"<details><summary>{len(h.properties)} properties</summary>", "",
              "| property | status | examples | rejected | seconds | share (s) |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {md_code(p.property)} | {p.status} | {p.examples} | {p.rejected} | {p.duration_s:.2f} | {p.share_s:.2f} |"
              for p in h.properties]
    lines += ["", "</details>", ""]
    met = [d for d in h.deviations if d.met]
    if met:
        lines += ["Declared deviations met (not findings):", ""]
        lines += [f"- {md_code(d.name)} ({md_text(d.boundary)}): {d.met} example(s): {md_text(d.reason)}" for d in met]
        lines.append("")
    skipped = [d for d in h.deviations if not d.applies]
    if skipped:
        lines += ["Declared deviations skipped (they explain nothing at this checkout):", ""]
        lines += [f"- {md_code(d.name)} ({md_text(d.boundary)}): {md_text(d.skipped)}" for d in skipped]
        lines.append("")
    lines += reach_lines(h)
    return "\n".join(lines + reproduce(report, loc))


def reach_lines(h) -> list[str]:
    """Options read / varied / pinned / never varied per boundary, and --coverage's branches."""
    lines: list[str] = []
    if h.options:
        lines += ["| boundary | options read | varied | pinned (why) | read, never varied |", "|---|---:|---|---|---|"]
        lines += [f"| {md_code(o.boundary)} | {len(o.options_read)} | {md_text(', '.join(o.options_varied))} | "
                  f"{md_text('; '.join(f'{k}: {r}' for k, r in o.options_pinned.items()))} | "
                  f"{md_text(', '.join(o.options_read_not_varied))} |" for o in h.options]
        lines.append("")
    if h.coverage:
        lines += [f"Branch coverage of the catalog's {h.coverage_scenarios} scenario(s) of these boundaries, "
                  "then the hunt:", ""]
        lines += ["| function | branches covered | unreachable | uncovered (line: condition) |", "|---|---:|---|---|"]
        lines += [f"| {md_code(c.function)} | {c.branches_covered} / {c.branches_total} | "
                  f"{md_text('; '.join(f'{b.line}: {b.reason}' for b in c.branches_unreachable))} | "
                  f"{md_text('; '.join(f'{b.line}: {b.condition}' for b in c.uncovered))} |" for c in h.coverage]
        lines.append("")
    return lines
