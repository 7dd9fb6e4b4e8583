"""A compiled rule's matches in a text, and what replaces them: shared by the whole-answer check
(``guardrails/scan.py``) and the stream of deltas (``guardrails/stream.py``), so the two agree on every span.
Pure: no policy, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a rule is compiled: an engine without a policy never loads regex (6 MiB)
    import regex

Finder = Callable[[Any], tuple[int, int, str] | None]  # a match -> (start, end, replacement), None = no hit


@dataclass(frozen=True)
class Rule:
    scanner: int  # index in policy.scanners
    pattern: regex.Pattern
    find: Finder


Span = tuple[int, int, str, int, int]  # start, end, replacement, scanner, rule (ties go to the earlier rule)


def find_hits(rule: Rule, text: str, i: int) -> Iterator[tuple[int, int, str]]:
    """The rule's hits from ``i``, left to right. A match its check refuses (a Luhn failure, a UUID) does not
    hide a hit that starts inside it: the search goes on from the next position, not from its end."""
    while (m := rule.pattern.search(text, i)) is not None:
        found = rule.find(m)
        if found is not None:
            yield found
        i = m.end() if found is not None and m.end() > m.start() else m.start() + 1


def select_spans(spans: list[Span]) -> list[Span]:
    """Non-overlapping spans, left to right; of two starting together the longer wins, then the earlier rule."""
    out: list[Span] = []
    end = -1
    for s in sorted(spans, key=lambda s: (s[0], -(s[1] - s[0]), s[4])):
        if s[0] >= end:
            out.append(s)
            end = s[1]
    return out


def apply_spans(text: str, spans: list[Span], hits: Counter, offset: int = 0) -> str:
    parts, cursor = [], 0
    for start, end, label, scanner, _ in spans:
        parts += [text[cursor : start - offset], label]
        cursor = end - offset
        hits[scanner] += 1
    parts.append(text[cursor:])
    return "".join(parts)
