"""Which files an answer used, as OpenAI ``file_citation`` annotations. Pure.

The prompt numbers the files its context came from (``[1]``, ``[2]``, ...; ``plan.sources_block``) and asks
the model to cite them. Two ways an answer's citations are found, in this order:

1. **Markers.** ``[n]`` / ``[n, m]`` markers naming a numbered file are taken out of the text (with the
   spaces before them, so "Paris [1]." reads "Paris.") and become citations at that position. While
   streaming, ``CitationStripper`` holds back only what may still turn out to be a marker, so text flows
   as it comes; brackets that are no marker (``[note]``, ``[7]`` with five files) stay as written.
2. **Attribution**, when the model cited nothing (small models often do not): each sentence of the answer
   is given to the file whose context shares the largest part of its content words (at least
   ``MIN_SUPPORT``), and cited at the sentence's end. A file that supports no sentence is not cited, so
   citations point to what the answer actually used, not to everything retrieved.

``index`` is a position in the final text, as in OpenAI's annotations. Beside OpenAI's fields
(``type``, ``file_id``, ``filename``, ``index``) each annotation carries, as the engine's extension, the
place of the chunk it cites (``citation`` such as "handbook.pdf, p. 41", ``page`` / ``pages``, ``slide``,
``sheet``, ``heading_path``, ...: ``index/places.py``): of the file's chunks, the one that shares most of
the cited sentence's content words (the best-ranked one when none does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragengine.rag.text import content_words

MIN_SUPPORT = 0.5  # share of a sentence's content words found in the file's context
MAX_MARKER = 24  # characters: "[1, 2, 3, 4, 5]" fits; anything longer is text
_MARKER = re.compile(r"^\[\s*\d+(?:\s*,\s*\d+)*\s*\]$")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n{2,}")


@dataclass(frozen=True)
class Source:
    """A numbered file of the prompt's context."""

    number: int
    file_id: str
    filename: str
    texts: tuple[str, ...]
    places: tuple[dict, ...] = ()  # per text: its place fields (index.places.place_fields)


class CitationStripper:
    """Feed the answer as it comes; get the text to show now. ``marks`` collect (position, source number)."""

    def __init__(self, numbers: set[int]) -> None:
        self.numbers = numbers
        self.text = ""  # shown so far
        self.marks: list[tuple[int, int]] = []
        self._spaces = ""  # whitespace held until what follows shows whether a marker eats it
        self._held = ""  # a possible marker, from its "["

    def feed(self, delta: str) -> str:
        out: list[str] = []
        for ch in delta:
            if self._held:
                self._held += ch
                if ch == "]":
                    self._close(out)
                elif not (ch.isdigit() or ch in ", ") or len(self._held) > MAX_MARKER:
                    self._release(out)
            elif ch == "[":
                self._held = ch
            elif ch.isspace():
                self._spaces += ch
            else:
                out.append(self._spaces + ch)
                self._spaces = ""
        return self._emit(out)

    def finish(self) -> str:
        out: list[str] = []
        if self._held:
            self._release(out)
        out.append(self._spaces)
        self._spaces = ""
        return self._emit(out)

    def _emit(self, out: list[str]) -> str:
        text = "".join(out)
        self.text += text
        return text

    def _close(self, out: list[str]) -> None:
        numbers = [int(n) for n in re.findall(r"\d+", self._held)] if _MARKER.match(self._held) else []
        if numbers and all(n in self.numbers for n in numbers):
            position = len(self.text) + len("".join(out))
            self.marks.extend((position, n) for n in dict.fromkeys(numbers))
            self._held, self._spaces = "", ""  # the marker and the spaces before it go
        else:
            self._release(out)

    def _release(self, out: list[str]) -> None:
        out.append(self._spaces + self._held)
        self._spaces, self._held = "", ""


def sentence_ends(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence; ``end`` just after its final punctuation."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end() if match.group().strip() else match.start()
        if text[start:end].strip():
            spans.append((start, end))
        start = match.end()
    if text[start:].strip():
        spans.append((start, len(text.rstrip())))
    return spans


def attribute(text: str, sources: list[Source]) -> list[tuple[int, int]]:
    """(position, source number) for each sentence some file supports best (at least ``MIN_SUPPORT``)."""
    vocab = {s.number: set(content_words(" ".join(s.texts))) for s in sources}
    marks = []
    for start, end in sentence_ends(text):
        words = content_words(text[start:end])
        if not words:
            continue
        support = {n: sum(w in v for w in words) / len(words) for n, v in vocab.items()}
        best = max(support, key=lambda n: (support[n], -n), default=None)
        if best is not None and support[best] >= MIN_SUPPORT:
            marks.append((end, best))
    return marks


@dataclass
class Citations:
    """The answer's annotations from the marks; ``cited`` the files they name, in order of first citation."""

    annotations: list[dict] = field(default_factory=list)
    cited: list[str] = field(default_factory=list)


def cited_place(source: Source, sentence: str) -> dict:
    """The place of the source's chunk that supports ``sentence`` best (its first, best-ranked, on a tie)."""
    if not source.places:
        return {}
    words = content_words(sentence)
    if not words:
        return source.places[0]
    support = [sum(w in set(content_words(text)) for w in words) for text in source.texts]
    return source.places[max(range(len(support)), key=lambda i: (support[i], -i))]


def sentence_before(text: str, position: int) -> str:
    """The sentence that ends at (or just before) ``position``."""
    found = ""
    for start, end in sentence_ends(text[:position]):
        found = text[start:end]
    return found


def annotate(marks: list[tuple[int, int]], sources: list[Source], text: str = "") -> Citations:
    by_number = {s.number: s for s in sources}
    out = Citations()
    seen: set[tuple[int, str]] = set()
    for position, number in sorted(marks):
        source = by_number[number]
        if (position, source.file_id) in seen:
            continue
        seen.add((position, source.file_id))
        out.annotations.append({"type": "file_citation", "file_id": source.file_id, "filename": source.filename,
                                "index": position, **cited_place(source, sentence_before(text, position))})
        if source.file_id not in out.cited:
            out.cited.append(source.file_id)
    return out


def citations(stripper: CitationStripper, sources: list[Source]) -> Citations:
    """The markers the model wrote, else the attribution of the finished text."""
    marks = stripper.marks or attribute(stripper.text, sources)
    return annotate(marks, sources, stripper.text)
