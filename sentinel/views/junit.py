"""JUnit XML for CI: one test case per scenario result (run, gate, compare, matrix), hunt
property, scenario over a history, mutant, or bisect. Every string passes inert.xml: XML 1.0
has no control characters, and a title with ESC must not make the file unreadable."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ..inert import xml as x
from .model import REACH_GROUPS, MutateView
from .plain import failure_lines
from .registry import Format, by_kind


def _suite(name: str, cases: int, failures: int, errors: int, skipped: int, time: float) -> ET.Element:
    return ET.Element("testsuite", name=x(name), tests=str(cases), failures=str(failures), errors=str(errors),
                      skipped=str(skipped), time=f"{time:.3f}")


def _text(suite: ET.Element, root: ET.Element | None = None) -> str:
    top = root if root is not None else suite
    ET.indent(top)
    return ET.tostring(top, encoding="unicode", xml_declaration=True) + "\n"


def run(view) -> str:
    report = view.report
    s = report.statistics
    suite = _suite("rl-sentinel", len(report.results), s.violated, s.errors, s.unsupported + s.excluded, report.duration_s)
    if report.comparisons:  # a compare's verdicts first, as suite properties
        props = ET.SubElement(suite, "properties")
        for c in view.comparisons():
            ET.SubElement(props, "property", name=x(f"compare {c.id}"), value=f"{c.verdict} (base {c.base}, head {c.head})")
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=x(f"{r.target}.{r.boundary}"), name=x(r.id),
                             file=x(r.file), time=f"{r.duration_s:.3f}")
        text = x("\n".join(failure_lines(r)))
        if r.verdict == "violated":
            ET.SubElement(case, "failure", message=x(r.reason[:500])).text = text
        elif r.verdict == "error":
            ET.SubElement(case, "error", message=x(r.reason[:500]), type=x(r.exception_info.type if r.exception_info else "error")).text = (
                x(r.exception_info.traceback) if r.exception_info else text)
        elif r.verdict in ("unsupported", "excluded"):
            ET.SubElement(case, "skipped", message=x(r.reason[:500]))
    return _text(suite)


def hunt(view) -> str:
    """One case per hunt property: a finding fails it, an error errs, nothing decided skips it."""
    h = view.hunt
    found = {}
    for f in h.findings:
        found.setdefault(f.property, []).append(f)
    undecided = ("untested", "stopped", "unsupported")
    suite = _suite(f"rl-sentinel-hunt-{'-'.join(view.report.targets)}", len(h.properties), len(found),
                   sum(p.status == "error" for p in h.properties), sum(p.status in undecided and p.property not in found
                                                                        for p in h.properties), h.search_s)
    for p in h.properties:
        case = ET.SubElement(suite, "testcase", classname=x(f"{p.boundary}.{p.family}"), name=x(p.property),
                             time=f"{p.duration_s:.3f}")
        if p.property in found:
            fs = found[p.property]
            ET.SubElement(case, "failure", message=x(fs[0].message[:500])).text = x("\n".join(
                f"{f.classification or 'violated'}: {f.message} (minimal trigger {f.rows} row(s) x {f.tokens} token(s); "
                f"scenario {f.file or f.scenario_id})" for f in fs))
        elif p.status == "error":
            e = p.error_sample
            ET.SubElement(case, "error", message=x((p.reason or (e.message if e else "error"))[:500]),
                          type=x(e.type if e else "error")).text = x(e.traceback if e else "")
        elif p.status in undecided:
            ET.SubElement(case, "skipped", message=x(f"{p.status}: {p.reason}"[:500]))
        else:
            ET.SubElement(case, "system-out").text = x(f"{p.examples} examples held")
    return _text(suite)


def history(view) -> str:
    """One case per scenario over the range: it fails where it regressed and is still violated
    at the range's end (the history's exit code); every flip is in its output."""
    h = view.history
    still = {r.id for r in view.report.results if r.verdict == "violated"}
    names = view.scenario_order()
    failing = {f.scenario for f in h.flips if f.change == "regressed" and f.scenario in still}
    suite = _suite(f"rl-sentinel-history-{h.target}", len(names), len(failing), 0, 0, h.cost.duration_s)
    for name in names:
        case = ET.SubElement(suite, "testcase", classname=x(f"history.{h.target}"), name=x(name))
        flips = [f"{f.change} at {f.commit or 'one of ' + ' '.join(f.candidates)} ({f.date[:10]}) {f.subject}"
                 for f in h.flips if f.scenario == name]
        if name in failing:
            ET.SubElement(case, "failure", message=x(f"regressed in {h.since}..{h.until} and still violated")).text = x(
                "\n".join(flips))
        elif flips:
            ET.SubElement(case, "system-out").text = x("\n".join(flips))
    return _text(suite)


def mutate(view) -> str:
    """One case per mutant: a survivor fails, an error errs, an equivalent is skipped."""
    s = view.mutate
    suite = _suite(f"sentinel-mutate-{s.target}", s.totals.mutants, s.totals.survived, s.totals.error, s.totals.equivalent,
                   s.duration_s)
    for m in s.mutants:
        case = ET.SubElement(suite, "testcase", classname=x(m.function), name=x(f"{m.operator}@{m.key} {m.position}"),
                             time=f"{m.duration_s:.3f}")
        if m.verdict == "survived":
            ET.SubElement(case, "failure", message=x(f"survived, {dict(REACH_GROUPS)[m.reached]} "
                                                     f"({MutateView.hunt_examples(m)})")).text = x(m.diff)
        elif m.verdict == "error":
            ET.SubElement(case, "error", message=x(m.reason[:500]))
        elif m.verdict == "equivalent":
            ET.SubElement(case, "skipped", message=x(f"equivalent: {m.reason}"))
        else:
            ET.SubElement(case, "system-out").text = x(f"killed by {m.killed_by}")
    root = ET.Element("testsuites")
    root.append(suite)
    return _text(suite, root)


def bisect(view) -> str:
    """One case: the first commit found passes; candidates left by skipped commits err."""
    b = view.log
    suite = _suite("rl-sentinel-bisect", 1, 0, 0 if b.first else 1, 0, b.duration_s)
    case = ET.SubElement(suite, "testcase", classname=x(f"bisect.{b.target}"), name=x(b.scenario), time=f"{b.duration_s:.3f}")
    probes = "\n".join(f"{p.commit[:10]} {p.verdict} {p.subject}" for p in b.probes)
    if b.first:
        ET.SubElement(case, "system-out").text = x(f"{view.headline()}\n{b.first.subject}\n{probes}")
    else:
        ET.SubElement(case, "error", message=x(view.headline())).text = x(" ".join(b.candidates) + "\n" + probes)
    return _text(suite)


_KIND = by_kind({"run": run, "gate": run, "compare": run, "matrix": run, "hunt": hunt, "history": history,
                 "mutate": mutate, "bisect": bisect}, "junit")


def render(view, **_: object) -> str:
    return _KIND(view)(view)


FORMAT = Format("junit", "JUnit XML (for CI test reports)", render, suffix=".xml")
