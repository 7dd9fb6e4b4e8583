"""Budgets for one file's parse, and what a parse returns. Pure data, shared by parent and child."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

DEFAULT_MAX_CHARS = 5_000_000
# Why a file was not read, as a code beside the reason (``Refused.code``; ``ragengine index --json``
# reports it, pipelines sort on it): the reason says the details, the code which kind.
ENCRYPTED = "encrypted"  # password-protected (or a legacy binary Office file, which looks the same)
ZIP_BOMB = "zip_bomb"  # an archive that would inflate past the budget
MEMORY = "memory"  # over the memory budget
OVER_BUDGET = "over_budget"  # any other budget: CPU time, wall clock, pages, characters, OCR
UNREADABLE = "unreadable"  # truncated, corrupt, or a parser failure
EMPTY = "empty"  # read, but no text
UNSUPPORTED = "unsupported"  # a file type no reader takes
NOT_TEXT = "not_text"  # named as text, but binary or not UTF-8


@dataclass(frozen=True)
class ParseLimits:
    """What one file may cost. ``wall_s`` 0 = derived from ``cpu_s``: a busy machine gives a child a
    fraction of a core (a quarter was seen on a loaded 2-core test machine), so the wall-clock
    deadline is well beyond the CPU budget; it catches a child that waits rather than computes."""

    cpu_s: int = 60
    memory_mb: int = 1024
    max_pages: int = 2000  # pages, slides or sheets
    max_chars: int = DEFAULT_MAX_CHARS
    wall_s: float = 0.0
    # DOCX, PPTX and XLSX are zip archives: what the libraries may unpack
    max_zip_members: int = 10_000
    max_unzipped_mb: int = 512
    # OCR (scanned PDF pages, images): a page cap and a time cap per file, and Tesseract's languages
    ocr_max_pages: int = 100
    ocr_s: int = 300
    ocr_languages: str = "eng"
    max_image_pixels: int = 60_000_000

    @property
    def deadline_s(self) -> float:
        return self.wall_s or self.cpu_s * 5 + 30

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParseLimits:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Parsed:
    """A file's text and metadata; ``sections``: ``(offset into text, metadata)`` where each page,
    slide or sheet starts, in order (empty for formats without such units)."""

    text: str
    metadata: dict = field(default_factory=dict)
    sections: list[tuple[int, dict]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "metadata": self.metadata, "sections": [[o, m] for o, m in self.sections]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Parsed:
        return cls(str(data["text"]), dict(data.get("metadata") or {}),
                   [(int(o), dict(m)) for o, m in data.get("sections") or []])

    def parts(self) -> list[tuple[str, dict]]:
        """The text cut at its sections (a page, slide or sheet each), with their metadata; the whole
        text as one part when there are none. Empty parts are left out."""
        if not self.sections:
            return [(self.text, {})] if self.text.strip() else []
        bounds = [o for o, _ in self.sections] + [len(self.text)]
        out = []
        for (start, meta), end in zip(self.sections, bounds[1:], strict=True):
            piece = self.text[start:end].strip()
            if piece:
                out.append((piece, meta))
        return out


@dataclass(frozen=True)
class Refused:
    """Not parsed. ``over_limit``: a budget was exceeded (the caller may answer 422 rather than
    record a broken file); otherwise the file is unreadable (corrupt, encrypted, no text)."""

    reason: str
    over_limit: bool = False
    code: str = UNREADABLE  # one of the codes above
