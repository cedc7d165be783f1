"""The examples the hunt's strategies draw for a boundary, collected in order (a fixed seed), for
tests that count what the drawing reaches."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from sentinel import strategies as S


def drawn(boundary: str, n: int = 300, **kw) -> list[S.Example]:
    """`n` examples of `S.examples(boundary, relations=S.RELATIONS, **kw)`, derandomised."""
    out: list[S.Example] = []

    @given(S.examples(boundary, relations=S.RELATIONS, **kw))
    @settings(max_examples=n, database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    def collect(ex):
        out.append(ex)
    collect()
    return out
